// The parts of the byte-level BPE tokenizers (data/tokenize/bpe_tokenizer.h) against independent expectations: the
// merge loop against a naive textbook BPE on random vocabularies (both of its paths), the pattern translation, each
// Split behavior on Hugging Face's documented example, added-token matching, and load/save of a hand-written
// tokenizer.json through Tokenizer::load. (The id-for-id check against tiktoken and tokenizers themselves is
// tests/interop/tokenizer_interop.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/byte_level_fixture.h"
#include "data/tokenize/added_tokens.h"
#include "data/tokenize/byte_bpe.h"
#include "data/tokenize/pretokenizer.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

// Textbook BPE: merge the leftmost adjacent pair with the lowest rank until none has one. rank(l, r) < 0: no merge.
template <class Rank>
std::vector<std::string> naive_bpe(const std::string& piece, Rank rank) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int best = -1, best_rank = INT_MAX;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int r = rank(parts[i], parts[i + 1]);
      if (r >= 0 && r < best_rank) best = int(i), best_rank = r;
    }
    if (best < 0) return parts;
    parts[size_t(best)] += parts[size_t(best) + 1];
    parts.erase(parts.begin() + best + 1);
  }
}

// 256 byte tokens, then `extra` tokens each the concatenation of two earlier ones over a 4-letter alphabet.
std::vector<std::pair<std::string, std::string>> random_merges(uint64_t seed, int extra,
                                                               std::vector<std::string>& tokens) {
  std::mt19937_64 rng(seed);
  tokens.clear();
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  std::vector<std::string> small = {"a", "b", "c", "d"};
  std::vector<std::pair<std::string, std::string>> merges;
  while (int(merges.size()) < extra) {
    const std::string& l = small[rng() % small.size()];
    const std::string& r = small[rng() % small.size()];
    if (l.size() + r.size() > 8) continue;
    merges.emplace_back(l, r);
    const std::string t = l + r;
    if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) {
      tokens.push_back(t);
      small.push_back(t);
    }
  }
  return merges;
}

std::vector<std::string> as_bytes(const ByteBpe& bpe, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(bpe.token_bytes()[size_t(id)]);
  return out;
}

std::string random_piece(std::mt19937_64& rng, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += "abcd"[rng() % 4];
  return s;
}

TEST(ByteBpe, TiktokenRanksMatchTextbookBpeOnShortAndLongPieces) {
  std::vector<std::string> tokens;
  random_merges(1, 300, tokens);
  std::map<std::string, int> rank;
  for (size_t i = 0; i < tokens.size(); ++i) rank[tokens[i]] = int(i);
  const ByteBpe bpe = ByteBpe::from_ranks(tokens, "test");
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 400; ++trial) {
    const std::string piece = random_piece(rng, 1 + rng() % 300);  // both sides of kScanLimit
    std::vector<std::string> want;
    if (rank.count(piece))
      want = {piece};  // tiktoken takes a piece that is a token whole
    else
      want = naive_bpe(piece, [&](const std::string& l, const std::string& r) {
        auto it = rank.find(l + r);
        return it == rank.end() ? -1 : it->second;
      });
    std::vector<int32_t> ids, heap_ids;
    bpe.encode(piece, ids);
    bpe.encode_with_heap(piece, heap_ids);
    ASSERT_EQ(as_bytes(bpe, ids), want) << piece;
    if (!rank.count(piece)) {
      ASSERT_EQ(heap_ids, ids) << piece;
    }
  }
}

TEST(ByteBpe, HuggingFaceMergeListMatchesTextbookBpe) {
  std::vector<std::string> tokens;
  const auto merges = random_merges(3, 300, tokens);
  std::map<std::pair<std::string, std::string>, int> rank;
  std::vector<ByteBpe::Merge> list;
  auto id_of = [&](const std::string& t) {
    return int32_t(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  };
  for (const auto& [l, r] : merges) {
    rank.emplace(std::make_pair(l, r), int(rank.size()));
    list.push_back({id_of(l), id_of(r), id_of(l + r)});
  }
  const ByteBpe bpe = ByteBpe::from_merges(tokens, list, /*whole_piece_first=*/false, "test");
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 400; ++trial) {
    const std::string piece = random_piece(rng, 1 + rng() % 300);
    const auto want = naive_bpe(piece, [&](const std::string& l, const std::string& r) {
      auto it = rank.find({l, r});
      return it == rank.end() ? -1 : it->second;
    });
    std::vector<int32_t> ids, heap_ids;
    bpe.encode(piece, ids);
    bpe.encode_with_heap(piece, heap_ids);
    ASSERT_EQ(as_bytes(bpe, ids), want) << piece;
    ASSERT_EQ(heap_ids, ids) << piece;
  }
}

TEST(ByteBpe, RefusesAVocabularyWithoutEverySingleByte) {
  std::vector<std::string> tokens = {"a", "b"};
  try {
    ByteBpe::from_ranks(tokens, "t.model");
    FAIL() << "accepted a vocabulary without the 256 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("single byte 0x00"), std::string::npos) << e.what();
  }
}

TEST(Pretokenizer, TranslatesTheConstructsWhoseMeaningDiffers) {
  EXPECT_EQ(translate_pattern(R"([\p{Lu}\p{Ll}&&[^\p{Han}]]+)", "t"), R"((?:(?=[^\p{sc:Han}])[\p{Lu}\p{Ll}])+)");
  EXPECT_EQ(translate_pattern(R"(\s+(?!\S)|[^\s\p{L}])", "t"), R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  EXPECT_EQ(translate_pattern(R"([\[\\\]]x)", "t"), R"([\[\\\]]x)");
  EXPECT_THROW(translate_pattern(R"([^\S])", "t"), Error);
  EXPECT_THROW(translate_pattern(R"([a[bc]])", "t"), Error);
  EXPECT_THROW(translate_pattern(R"([abc)", "t"), Error);
  // What the translation is for: U+0085 is whitespace; '、' is not Han (only in Han's script extensions).
  const Regex space(R"(\s+)", "t"), han(R"(\p{Han}+)", "t");
  std::vector<std::pair<size_t, size_t>> m;
  space.for_each_match("a\xC2\x85 b", [&](size_t s, size_t e) { m.emplace_back(s, e); });
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{1, 4}}));
  m.clear();
  han.for_each_match("\xE3\x80\x81\xE4\xB8\x96", [&](size_t s, size_t e) { m.emplace_back(s, e); });  // 、世
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{3, 6}}));
}

TEST(Pretokenizer, SplitBehaviorsFollowHuggingFacesDocumentedExample) {
  // Hugging Face's documentation of SplitDelimiterBehavior, splitting "the-final--countdown" on "-".
  auto split = [](SplitBehavior b, bool invert = false) {
    PretokenizeStep st;
    st.regex = std::make_shared<const Regex>("-", "t");
    st.behavior = b;
    st.invert = invert;
    return Pretokenizer({st}).pieces("the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(SplitBehavior::kRemoved), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kRemoved, /*invert=*/true), (V{"-", "-", "-"}));
  PretokenizeStep bl;
  bl.kind = PretokenizeStep::Kind::kByteLevel;
  bl.add_prefix_space = true;
  bl.regex = std::make_shared<const Regex>(kGpt2Pattern, "t");
  EXPECT_EQ(Pretokenizer({bl}).pieces("Hello  world's"), (V{" Hello", " ", " world", "'s"}));
}

TEST(AddedTokens, LeftmostLongestStripsAndSpecialsAsText) {
  AddedTokens added({{"<|a|>", 10, true}, {"<|a|>x", 11, true}, {"<b>", 12, false, true, true}}, "t");
  std::vector<std::string> out;
  auto run = [&](std::string_view text, bool specials) {
    out.clear();
    added.split(
        text, specials, [&](std::string_view s) { out.push_back("T:" + std::string(s)); },
        [&](int32_t id) { out.push_back("#" + std::to_string(id)); });
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run("q<|a|>xy<|a|>", true), (V{"T:q", "#11", "T:y", "#10"}));
  EXPECT_EQ(run("q  <b>\t z", true), (V{"T:q", "#12", "T:z"}));  // lstrip and rstrip take the spaces
  EXPECT_EQ(run("q<|a|>x<b>", false), (V{"T:q<|a|>x", "#12"}));  // specials stay text; <b> is not special
  EXPECT_THROW(AddedTokens({{"x", 1}, {"x", 2}}, "t"), Error);
}

class TokenizerFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("myriad_bpe_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TokenizerFiles, LoadsAHuggingFaceDirectorySavesAndReloadsIt) {
  std::ofstream(dir_ / "tokenizer.json") << hand_written_tokenizer_json({{"<|eot|>", true}}).dump();
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"eos_token": {"content": "<|eot|>"}})";
  const Tokenizer t = Tokenizer::load(dir_.string());
  EXPECT_EQ(t.kind(), TokenizerKind::kHuggingFaceBpe);
  EXPECT_EQ(t.vocab_size(), 259);
  // " the": "Ġ" + "t" -> "Ġt" (256, rank 0), then "Ġt" + "h" -> "Ġth" (257, rank 1); "e" stays.
  EXPECT_EQ(t.encode(" the<|eot|>"), (std::vector<int32_t>{257, t.byte_id('e'), 258}));
  EXPECT_EQ(t.encode("<|eot|>", Specials::kAsText).size(), 7u);
  EXPECT_EQ(t.end_of_text_id(), 258);
  EXPECT_EQ(t.stop_ids(), (std::vector<int32_t>{258}));
  EXPECT_EQ(t.piece(256), "Ġt");
  EXPECT_EQ(t.decode(t.encode(" the\xFF<|eot|>")), " the\xFF<|eot|>");
  const fs::path copy = dir_ / "copy";
  t.save(copy.string());
  const Tokenizer back = Tokenizer::load(copy.string());
  EXPECT_EQ(back.hash(), t.hash());
  EXPECT_EQ(back.encode(" the them"), t.encode(" the them"));
}

// Found by fuzzing (tokenizer_json): a 6.5 KB file with one vocabulary id of 28,255,555 made the loader allocate
// three tables of 28 million entries (2.7 GB). Gaps in the ids are allowed (reserved ids), the id space is bounded
// by the tokens the file defines.
TEST_F(TokenizerFiles, RefusesAnIdSpaceOutOfProportionToTheFile) {
  nlohmann::json j = hand_written_tokenizer_json({{"<|eot|>", true}});
  j["added_tokens"][0]["id"] = 259 + 100;  // a gap of 100 ids: allowed
  std::ofstream(dir_ / "tokenizer.json") << j.dump();
  EXPECT_EQ(Tokenizer::load(dir_.string()).vocab_size(), 360);
  for (const char* where : {"vocab", "added"}) {
    nlohmann::json bad = hand_written_tokenizer_json({{"<|eot|>", true}});
    if (std::string(where) == "vocab")
      bad["model"]["vocab"]["Ġth"] = 28255555;
    else
      bad["added_tokens"][0]["id"] = 28255555;
    std::ofstream(dir_ / "tokenizer.json", std::ios::trunc) << bad.dump();
    try {
      Tokenizer::load(dir_.string());
      ADD_FAILURE() << where << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
      EXPECT_NE(std::string(e.what()).find("the largest token id is 28255555 but the file defines only 259 tokens"),
                std::string::npos)
          << e.what();
    }
  }
}

// Found by fuzzing (tokenizer_json): a normalizer whose "type" was a boolean ended the process (nlohmann's
// value("type", "") threw type_error, which nothing catches). A tag of the wrong type is an unsupported normalizer,
// at the top level and inside a Sequence; NFC in either form still loads.
TEST_F(TokenizerFiles, ANormalizerTypeThatIsNotAStringIsRefused) {
  const auto load_with = [&](const nlohmann::json& normalizer) {
    nlohmann::json j = hand_written_tokenizer_json({{"<|eot|>", true}});
    j["normalizer"] = normalizer;
    std::ofstream(dir_ / "tokenizer.json", std::ios::trunc) << j.dump();
    return Tokenizer::load(dir_.string());
  };
  EXPECT_EQ(load_with({{"type", "NFC"}}).vocab_size(), 259);
  EXPECT_EQ(load_with({{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}).vocab_size(), 259);
  for (const nlohmann::json& bad : {nlohmann::json{{"type", true}, {"use_regex", true}}, nlohmann::json{{"type", 7}},
                                    nlohmann::json{{"type", "Sequence"}, {"normalizers", {{{"type", false}}}}}}) {
    try {
      load_with(bad);
      ADD_FAILURE() << bad.dump() << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("normalizer = "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the normalizer myriad implements is NFC"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TokenizerFiles, FindsAModelsTokenizerOrSaysWhereItLooked) {
  EXPECT_THROW(
      {
        try {
          find_model_tokenizer(dir_.string());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  std::ofstream(dir_ / "tokenizer.json") << hand_written_tokenizer_json({{"<|eot|>", true}}).dump();
  EXPECT_EQ(find_model_tokenizer(dir_.string()), dir_.string());
  fs::create_directories(dir_ / "tokenizer");
  EXPECT_EQ(find_model_tokenizer(dir_.string()), (dir_ / "tokenizer").string());
}

}  // namespace
}  // namespace myriad

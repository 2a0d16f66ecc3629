// SentencePiece BPE tokenizer with an exact byte round trip. See tokenizer.h.
#include "data/tokenize/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/log.h"
#include "core/utf8.h"
#include "data/tokenize/bpe_tokenizer.h"
#include "data/tokenize/data_files.h"
#include "io/atomic_file.h"
#include "io/checksums.h"

namespace myriad {

namespace {

// myriad's own tokenizer.json (beside a tokenizer.model) says {"type": "sentencepiece-bpe"}; any other file,
// including one whose "type" is not a string (found by fuzzing: json::value threw type_error), is not one.
bool describes_sentencepiece(const nlohmann::json& j) {
  return string_member(j, "type") == "sentencepiece-bpe";
}

namespace fs = std::filesystem;

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's whitespace marker.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// Splits text into the runs SentencePiece may see (well-formed UTF-8 without '\n' and U+2581) and the bytes that
// bypass it. on_text(run) for each non-empty run, on_byte(b) for each bypassing byte, in order.
template <class OnText, class OnByte>
void split_for_sentencepiece(std::string_view text, OnText&& on_text, OnByte&& on_byte) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t run = 0, i = 0;
  auto flush = [&](size_t end) {
    if (end > run) on_text(text.substr(run, end - run));
  };
  while (i < n) {
    if (s[i] >= 0x20 && s[i] < 0x80) {  // fast path: printable ASCII
      ++i;
      continue;
    }
    const size_t len = s[i] == '\n' ? 0 : utf8_sequence_length(s + i, n - i);
    if (len == 0) {
      flush(i);
      on_byte(s[i]);
      run = ++i;
    } else if (len == 3 && text.substr(i, 3) == kSpaceMarker) {
      flush(i);
      for (int k = 0; k < 3; ++k) on_byte(s[i + size_t(k)]);
      run = i += 3;
    } else {
      i += len;
    }
  }
  flush(n);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Uniform in [0, m) from a 64-bit generator by rejection (the same on every platform).
uint64_t below(std::mt19937_64& rng, uint64_t m) {
  const uint64_t r = (uint64_t(0) - m) % m;  // 2^64 mod m: accept x < 2^64 - r, a multiple of m values
  for (;;) {
    const uint64_t x = rng();
    if (r == 0 || x < uint64_t(0) - r) return x % m;
  }
}

// The training sentences: text cut at newlines and at bytes that bypass SentencePiece, long runs cut to at most
// max_bytes (at the last space when there is one, so that the space starts the next sentence as it starts a
// word), then a reservoir sample of at most max_sentences, kept in input order.
class SentenceSample {
 public:
  SentenceSample(int64_t max_sentences, int64_t max_bytes, uint64_t seed)
      : max_(size_t(max_sentences)), max_bytes_(size_t(max_bytes)), rng_(seed) {}

  void add_text(std::string_view text) {
    split_for_sentencepiece(
        text, [&](std::string_view run) { add_run(run); }, [](unsigned char) {});
  }

  // Sentences in input order.
  std::vector<std::string> finish() {
    std::sort(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> out;
    out.reserve(kept_.size());
    for (auto& k : kept_) out.push_back(std::move(k.second));
    kept_.clear();
    return out;
  }
  int64_t seen() const { return int64_t(seen_); }

 private:
  void add_run(std::string_view run) {
    while (run.size() > max_bytes_) {
      size_t cut = run.rfind(' ', max_bytes_);
      if (cut == std::string_view::npos || cut == 0) {
        cut = max_bytes_;
        while (cut > 0 && (static_cast<unsigned char>(run[cut]) & 0xC0) == 0x80) --cut;  // character boundary
        if (cut == 0) cut = max_bytes_;
      }
      add_sentence(run.substr(0, cut));
      run.remove_prefix(cut);
    }
    add_sentence(run);
  }
  void add_sentence(std::string_view s) {
    if (s.empty()) return;
    if (kept_.size() < max_) {
      kept_.emplace_back(seen_, std::string(s));
    } else {
      const uint64_t j = below(rng_, seen_ + 1);
      if (j < max_) kept_[j] = {seen_, std::string(s)};
    }
    ++seen_;
  }

  size_t max_, max_bytes_;
  std::mt19937_64 rng_;
  uint64_t seen_ = 0;
  std::vector<std::pair<uint64_t, std::string>> kept_;
};

class VectorSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentenceIterator(const std::vector<std::string>* v) : v_(v) {}
  bool done() const override { return i_ >= v_->size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return (*v_)[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>* v_;
  size_t i_ = 0;
};

Tokenizer train_on_sentences(const std::vector<std::string>& sentences, int64_t vocab_size,
                             const TokenizerTrainOptions& options) {
  MYRIAD_REQUIRE(vocab_size >= kMinVocabSize && vocab_size <= (int64_t(1) << 24), kValue,
                 "tokenizer train: vocab size ", vocab_size, " must be in [", kMinVocabSize, ", ", int64_t(1) << 24,
                 "] (", kFirstByteId, " special tokens and 256 byte tokens come first)");
  MYRIAD_REQUIRE(!sentences.empty(), kValue, "tokenizer train: no training text (the input is empty)");
  std::string symbols;
  for (const char* s : kSpecialTokens) symbols += (symbols.empty() ? "" : ",") + std::string(s);
  const std::unordered_map<std::string, std::string> kwargs = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"user_defined_symbols", symbols},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(options.max_sentence_bytes + 1)},
      {"num_threads", std::to_string(std::max(1, options.num_threads))},
      // A vocabulary the text cannot fill ends early (with a warning below) rather than failing.
      {"hard_vocab_limit", "false"},
      {"minloglevel", "2"},  // SentencePiece's INFO/WARNING chatter off; its errors come back as status
  };
  VectorSentenceIterator it(&sentences);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &model);
  MYRIAD_REQUIRE(status.ok(), kValue, "tokenizer train (vocab size ", vocab_size, ", ", sentences.size(),
                 " sentences): SentencePiece: ", status.ToString());
  Tokenizer t = Tokenizer::from_model_bytes(std::move(model), "trained model");
  if (t.vocab_size() < vocab_size)
    log_warn("tokenizer train: the training text supports only ", t.vocab_size(), " tokens (no pair left to merge), ",
             "fewer than the ", vocab_size, " asked for; the vocabulary has ", t.vocab_size(), " tokens");
  return t;
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  sentencepiece::SentencePieceProcessor sp;  // kSentencePiece
  std::shared_ptr<const BpeTokenizer> bpe;   // the other kinds
  std::string model_bytes;
  std::string hash;
  std::vector<std::string> surface;  // bytes each id decodes to
  std::vector<std::string> pieces;
  int32_t end_of_text = -1;
  std::vector<int32_t> stop_ids;
};

const char* tokenizer_kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kSentencePiece:
      return "sentencepiece";
    case TokenizerKind::kTiktoken:
      return "tiktoken";
    case TokenizerKind::kHuggingFaceBpe:
      return "huggingface-bpe";
  }
  return "?";
}

namespace {

std::string fnv_hash_string(std::string_view bytes) {
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return std::string("fnv1a64:") + hash;
}

}  // namespace

Tokenizer Tokenizer::from_bpe(BpeTokenizer bpe_in) {
  auto impl = std::make_shared<Impl>();
  auto bpe = std::make_shared<const BpeTokenizer>(std::move(bpe_in));
  impl->kind =
      bpe->format() == BpeTokenizer::Format::kTiktoken ? TokenizerKind::kTiktoken : TokenizerKind::kHuggingFaceBpe;
  impl->surface.resize(size_t(bpe->vocab_size()));
  impl->pieces.resize(size_t(bpe->vocab_size()));
  for (int32_t id = 0; id < int32_t(bpe->vocab_size()); ++id) {
    impl->surface[size_t(id)] = bpe->surface(id);
    impl->pieces[size_t(id)] = bpe->piece(id);
  }
  std::string all;
  for (const auto& [name, bytes] : bpe->files()) all += name + '\0' + bytes + '\0';
  impl->hash = fnv_hash_string(all);
  impl->model_bytes = bpe->files().front().second;
  impl->bpe = std::move(bpe);
  Tokenizer t;
  t.impl_ = impl;
  if (const std::string& eos = impl->bpe->eos_token(); !eos.empty()) {
    // An added token, or an ordinary one of the vocabulary (GPT-2's <|endoftext|>).
    int32_t id = t.has_special(eos) ? t.id_of(eos) : -1;
    for (size_t i = 0; id < 0 && i < impl->pieces.size(); ++i)
      if (impl->pieces[i] == eos) id = int32_t(i);
    MYRIAD_REQUIRE(id >= 0, kFormat, "tokenizer: eos_token '", eos, "' of ", kTokenizerConfigFile,
                   " is not a token of the tokenizer");
    impl->end_of_text = id;
    impl->stop_ids = {id};
  }
  return t;
}

const Tokenizer::Impl& Tokenizer::impl() const {
  MYRIAD_REQUIRE(impl_ != nullptr, kValue, "tokenizer: used before it was trained or loaded");
  return *impl_;
}

Tokenizer Tokenizer::from_model_bytes(std::string model_bytes, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  sentencepiece::util::Status status;
  try {
    status = impl->sp.LoadFromSerializedProto(model_bytes);
  } catch (const std::exception& e) {
    // SentencePiece reports most bad models through its status, but some well-formed protos with bad pieces (an
    // empty piece in a unigram model: found by tests/fuzz/fuzz_tokenizer_model.cc) throw from its trie builder.
    throw_error(ErrorKind::kFormat, source, ": not a usable SentencePiece model: ", e.what());
  }
  MYRIAD_REQUIRE(status.ok(), kFormat, source, ": not a SentencePiece model: ", status.ToString());
  const int n = impl->sp.GetPieceSize();
  MYRIAD_REQUIRE(n >= kFirstByteId + 256, kFormat, source, ": ", n, " pieces, a myriad tokenizer has at least ",
                 kFirstByteId + 256);
  const char* control[] = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i)
    MYRIAD_REQUIRE(impl->sp.IdToPiece(i) == control[i] && (i == 0 ? impl->sp.IsUnknown(i) : impl->sp.IsControl(i)),
                   kFormat, source, ": piece ", i, " is '", impl->sp.IdToPiece(i), "', expected '", control[i], "'");
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) {
    const int id = kFirstSpecialId + int(i);
    MYRIAD_REQUIRE(impl->sp.IdToPiece(id) == kSpecialTokens[i] && !impl->sp.IsControl(id) && !impl->sp.IsByte(id),
                   kFormat, source, ": piece ", id, " is '", impl->sp.IdToPiece(id), "', expected the special token '",
                   kSpecialTokens[i], "'");
  }
  impl->surface.resize(size_t(n));
  impl->pieces.resize(size_t(n));
  for (int id = 0; id < n; ++id) {
    const std::string piece = impl->sp.IdToPiece(id);
    impl->pieces[size_t(id)] = piece;
    std::string& s = impl->surface[size_t(id)];
    if (id >= kFirstByteId && id < kFirstByteId + 256) {
      char want[8];
      std::snprintf(want, sizeof(want), "<0x%02X>", id - kFirstByteId);
      MYRIAD_REQUIRE(impl->sp.IsByte(id) && piece == want, kFormat, source, ": piece ", id, " is '", piece,
                     "', expected the byte token '", want, "' (trained without byte_fallback?)");
      s = std::string(1, char(id - kFirstByteId));
    } else if (impl->sp.IsControl(id) || impl->sp.IsUnknown(id) || impl->sp.IsUnused(id)) {
      s.clear();
    } else if (id < kFirstByteId) {  // our user-defined special tokens (this SentencePiece has no IsUserDefined)
      s = piece;
    } else {
      for (size_t p = 0; p < piece.size();) {
        if (piece.compare(p, kSpaceMarker.size(), kSpaceMarker) == 0) {
          s += ' ';
          p += kSpaceMarker.size();
        } else {
          s += piece[p++];
        }
      }
    }
  }
  // A model trained with normalization, a dummy prefix or whitespace folding would not round-trip; probe it.
  const std::string probe = "  a\xEF\xAC\x81  b1 ";  // two spaces, U+FB01 (NFKC folds it to "fi"), trailing space
  std::vector<int> ids;
  std::string back;
  if (impl->sp.Encode(probe, &ids).ok())
    for (int id : ids) back += impl->surface[size_t(id)];
  MYRIAD_REQUIRE(back == probe, kFormat, source,
                 ": the model alters text (it was not trained with normalization_rule_name=identity, "
                 "add_dummy_prefix=false, remove_extra_whitespaces=false)");
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(model_bytes)));
  impl->hash = std::string("fnv1a64:") + hash;
  impl->model_bytes = std::move(model_bytes);
  impl->end_of_text = kEndOfTextId;
  impl->stop_ids = {kEndOfTextId, kEosId};
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::train_from_texts(const std::vector<std::string>& texts, int64_t vocab_size,
                                      const TokenizerTrainOptions& options) {
  SentenceSample sample(options.max_sentences, options.max_sentence_bytes, options.seed);
  for (const auto& t : texts) sample.add_text(t);
  return train_on_sentences(sample.finish(), vocab_size, options);
}

Tokenizer Tokenizer::train(const std::vector<std::string>& paths, int64_t vocab_size, const std::string& out_dir,
                           const TokenizerTrainOptions& options) {
  MYRIAD_REQUIRE(vocab_size >= kMinVocabSize, kValue, "tokenizer train: vocab size ", vocab_size, " must be at least ",
                 kMinVocabSize, " (", kFirstByteId, " special tokens and 256 byte tokens come first)");
  const std::vector<DataFile> files = collect_data_files(paths);
  SentenceSample sample(options.max_sentences, options.max_sentence_bytes, options.seed);
  SkippedLines skipped;
  for (const DataFile& f : files) {
    if (f.jsonl)
      read_jsonl_documents(
          f, [&](std::string_view text, uint64_t) { sample.add_text(text); }, &skipped);
    else
      read_text_chunks(f.path, 0, f.bytes, size_t(1) << 20, [&](std::string_view chunk) { sample.add_text(chunk); });
  }
  if (skipped.count > 0) log_warn("tokenizer train: ", skipped.describe());
  std::vector<std::string> sentences = sample.finish();
  MYRIAD_REQUIRE(!sentences.empty(), kValue, "tokenizer train: no training text in ", files.size(), " file(s)",
                 skipped.count > 0 ? " (" + skipped.describe() + ")" : std::string());
  Tokenizer t = train_on_sentences(sentences, vocab_size, options);
  t.save(out_dir);
  return t;
}

std::string find_model_tokenizer(const std::string& checkpoint_dir, const std::string& run_dir) {
  std::error_code ec;
  const fs::path ck(checkpoint_dir);
  if (fs::is_directory(ck / "tokenizer", ec)) return (ck / "tokenizer").string();
  if (!run_dir.empty() && fs::is_directory(fs::path(run_dir) / "tokenizer", ec))
    return (fs::path(run_dir) / "tokenizer").string();
  for (const char* f : {kTokenizerModelFile, kTiktokenModelFile, kTokenizerJsonFile})
    if (fs::exists(ck / f, ec)) return checkpoint_dir;
  throw_error(ErrorKind::kIo, "model ", checkpoint_dir, ": no tokenizer (looked in ", (ck / "tokenizer").string(),
              run_dir.empty() || run_dir == checkpoint_dir ? "" : ", " + (fs::path(run_dir) / "tokenizer").string(),
              " and for ", kTokenizerModelFile, ", ", kTiktokenModelFile, " or ", kTokenizerJsonFile, " in ",
              checkpoint_dir, "); give one with --tokenizer DIR|FILE");
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  if (is_dir) {
    // The first kind whose file is there (tokenizer.h).
    const fs::path d(path);
    if (!fs::exists(d / kTokenizerModelFile, ec)) {
      if (fs::exists(d / kTiktokenModelFile, ec)) return load((d / kTiktokenModelFile).string());
      if (fs::exists(d / kTokenizerJsonFile, ec)) return load((d / kTokenizerJsonFile).string());
      throw_error(ErrorKind::kIo, "tokenizer: no tokenizer in '", path, "' (looked for ", kTokenizerModelFile, ", ",
                  kTiktokenModelFile, " and ", kTokenizerJsonFile,
                  "); give one with --tokenizer DIR|FILE, or train one with myriad tokenizer train");
    }
  } else {
    MYRIAD_REQUIRE(fs::exists(path, ec), kIo, "tokenizer: '", path,
                   "' does not exist (give a directory holding tokenizer.model, tiktoken.model or tokenizer.json, "
                   "or one of those files)");
    const std::string name = fs::path(path).filename().string();
    if (name == kTiktokenModelFile) {
      verify_checksum(path);
      return from_bpe(BpeTokenizer::load_tiktoken(path));
    }
    if (name.size() > 5 && name.ends_with(".json")) {
      verify_checksum(path);
      // myriad's own tokenizer.json describes a tokenizer.model beside it.
      const nlohmann::json head = parse_json_or_discarded(read_file(path));
      if (!describes_sentencepiece(head)) return from_bpe(BpeTokenizer::load_hugging_face(path));
      return load(fs::path(path).parent_path().string());
    }
  }
  const std::string model_path = is_dir ? (fs::path(path) / kTokenizerModelFile).string() : path;
  verify_checksum(model_path);
  Tokenizer t = from_model_bytes(read_file(model_path), model_path);
  const std::string json_path = (fs::path(model_path).parent_path() / kTokenizerJsonFile).string();
  if (fs::exists(json_path, ec)) {
    verify_checksum(json_path);
    nlohmann::json j = parse_json_or_discarded(read_file(json_path));
    MYRIAD_REQUIRE(j.is_object(), kFormat, json_path, ": not a JSON object");
    MYRIAD_REQUIRE(describes_sentencepiece(j), kFormat, json_path, ": \"type\" must be \"sentencepiece-bpe\"");
    MYRIAD_REQUIRE(j.contains("vocab_size") && j["vocab_size"].is_number_integer() &&
                       j["vocab_size"].get<int64_t>() == t.vocab_size(),
                   kFormat, json_path, ": \"vocab_size\" ", j.value("vocab_size", nlohmann::json()).dump(),
                   " does not match ", model_path, " (", t.vocab_size(), " pieces)");
    if (j.contains("special_tokens")) {
      MYRIAD_REQUIRE(j["special_tokens"].is_object(), kFormat, json_path, ": \"special_tokens\" must be an object");
      for (const auto& [name, id] : j["special_tokens"].items()) {
        int64_t want = -1;
        for (int32_t i = 0; i < kFirstByteId; ++i)
          if (t.piece(i) == name) want = i;
        MYRIAD_REQUIRE(want >= 0, kFormat, json_path, ": \"", name, "\" is not a special token of ", model_path);
        MYRIAD_REQUIRE(id.is_number_integer() && id.get<int64_t>() == want, kFormat, json_path, ": special token ",
                       name, " has id ", id.dump(), ", the model has ", want);
      }
    }
  }
  return t;
}

void Tokenizer::save(const std::string& dir) const {
  const Impl& im = impl();
  std::error_code ec;
  fs::create_directories(dir, ec);
  MYRIAD_REQUIRE(!ec && fs::is_directory(dir), kIo, "cannot create tokenizer directory '", dir,
                 "': ", ec ? ec.message() : "not a directory");
  if (im.bpe) {
    for (const auto& [name, bytes] : im.bpe->files()) write_file_atomic((fs::path(dir) / name).string(), bytes);
    return;
  }
  nlohmann::ordered_json j;
  j["type"] = "sentencepiece-bpe";
  j["vocab_size"] = vocab_size();
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();
  specials["<unk>"] = kUnkId;
  specials["<s>"] = kBosId;
  specials["</s>"] = kEosId;
  for (size_t i = 0; i < kSpecialTokens.size(); ++i) specials[kSpecialTokens[i]] = kFirstSpecialId + int32_t(i);
  j["special_tokens"] = std::move(specials);
  j["byte_fallback_first_id"] = kFirstByteId;
  j["hash"] = im.hash;
  write_file_atomic((fs::path(dir) / kTokenizerModelFile).string(), im.model_bytes);
  write_file_atomic((fs::path(dir) / kTokenizerJsonFile).string(), j.dump(2) + "\n");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, Specials specials) const {
  const Impl& im = impl();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (im.bpe) {
    im.bpe->encode(text, specials == Specials::kParse, out);
    return out;
  }
  std::vector<int> ids;
  auto sentencepiece = [&](std::string_view run) {
    if (run.empty()) return;
    const auto status = im.sp.Encode(run, &ids);
    MYRIAD_REQUIRE(status.ok(), kValue, "tokenizer encode: SentencePiece: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  };
  auto as_text = [&](std::string_view run) {
    // Every special token starts with "<|": emit that '<' as a byte wherever one begins, so SentencePiece never
    // sees a whole special token.
    size_t from = 0;
    for (size_t at = run.find("<|"); at != std::string_view::npos; at = run.find("<|", at + 1)) {
      const std::string_view rest = run.substr(at);
      const bool special =
          std::any_of(kSpecialTokens.begin(), kSpecialTokens.end(), [&](const char* s) { return rest.starts_with(s); });
      if (!special) continue;
      sentencepiece(run.substr(from, at - from));
      out.push_back(byte_id('<'));
      from = at + 1;
    }
    sentencepiece(run.substr(from));
  };
  split_for_sentencepiece(
      text,
      [&](std::string_view run) {
        if (specials == Specials::kParse)
          sentencepiece(run);
        else
          as_text(run);
      },
      [&](unsigned char b) { out.push_back(byte_id(b)); });
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& im = impl();
  std::string out;
  for (const int32_t id : ids) {
    MYRIAD_REQUIRE(id >= 0 && size_t(id) < im.surface.size(), kValue, "tokenizer decode: token id ", id,
                   " is outside the vocabulary [0, ", im.surface.size(), ")");
    out += im.surface[size_t(id)];
  }
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  const Impl& im = impl();
  MYRIAD_REQUIRE(id >= 0 && size_t(id) < im.surface.size(), kValue, "tokenizer: token id ", id,
                 " is outside the vocabulary [0, ", im.surface.size(), ")");
  return im.surface[size_t(id)];
}

std::string Tokenizer::piece(int32_t id) const {
  const Impl& im = impl();
  MYRIAD_REQUIRE(id >= 0 && size_t(id) < im.pieces.size(), kValue, "tokenizer: token id ", id,
                 " is outside the vocabulary [0, ", im.pieces.size(), ")");
  return im.pieces[size_t(id)];
}

int32_t Tokenizer::id_of(std::string_view special) const {
  const Impl& im = impl();
  if (im.bpe) {
    if (const AddedToken* a = im.bpe->added().find(special)) return a->id;
    std::string names;
    int shown = 0;
    for (const AddedToken& a : im.bpe->added().tokens()) {
      if (a.content.starts_with("<|reserved_token_")) continue;
      if (shown++ == 12) {
        names += ", ...";
        break;
      }
      names += (names.empty() ? "" : ", ") + a.content;
    }
    throw_error(ErrorKind::kValue, "tokenizer: '", special, "' is not a special token of this ",
                tokenizer_kind_name(im.kind), " tokenizer (", names.empty() ? "it has none" : names, ")");
  }
  if (special == "<unk>") return kUnkId;
  if (special == "<s>") return kBosId;
  if (special == "</s>") return kEosId;
  for (size_t i = 0; i < kSpecialTokens.size(); ++i)
    if (special == kSpecialTokens[i]) return kFirstSpecialId + int32_t(i);
  std::string names = "<unk>, <s>, </s>";
  for (const char* s : kSpecialTokens) names += std::string(", ") + s;
  throw_error(ErrorKind::kValue, "tokenizer: '", special, "' is not a special token (", names, ")");
}

bool Tokenizer::has_special(std::string_view special) const {
  const Impl& im = impl();
  if (im.bpe) return im.bpe->added().find(special) != nullptr;
  if (special == "<unk>" || special == "<s>" || special == "</s>") return true;
  return std::any_of(kSpecialTokens.begin(), kSpecialTokens.end(), [&](const char* s) { return special == s; });
}

int32_t Tokenizer::byte_id(uint8_t byte) const {
  const Impl& im = impl();
  if (im.bpe) return im.bpe->byte_token(byte);
  return kFirstByteId + int32_t(byte);
}

TokenizerKind Tokenizer::kind() const {
  return impl().kind;
}

int32_t Tokenizer::end_of_text_id() const {
  return impl().end_of_text;
}

const BpeTokenizer* Tokenizer::bpe() const {
  return impl().bpe.get();
}

const std::vector<int32_t>& Tokenizer::stop_ids() const {
  return impl().stop_ids;
}

int64_t Tokenizer::vocab_size() const {
  return int64_t(impl().surface.size());
}

const std::string& Tokenizer::model_bytes() const {
  return impl().model_bytes;
}

const std::string& Tokenizer::hash() const {
  return impl().hash;
}

}  // namespace myriad

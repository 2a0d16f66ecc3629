// Token shards (header round trip, bad files), the loader (coverage, shifted targets, deterministic shuffle,
// bit-exact resume, seq_len changes, val order) and `data prepare` (90/10 split by position, JSONL bad lines,
// split by document, atomic output and errors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/datasets/loader.h"
#include "data/datasets/prepare.h"
#include "data/datasets/shards.h"
#include "data/tokenize/data_files.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

// Runs fn, expects a myriad::Error of `kind` whose message contains `needle`.
template <class Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class DataTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> texts;
    std::mt19937_64 rng(5);
    const char* words[] = {"to",      "be",  "or",     "not", "that", "is",     "the",  "question",
                           "whether", "tis", "nobler", "in",  "mind", "suffer", "日本", "é"};
    for (int i = 0; i < 150; ++i) {
      std::string line;
      for (int j = 0; j < 8; ++j) line += std::string(j ? " " : "") + words[rng() % 16];
      texts.push_back(line);
    }
    tok_ = new Tokenizer(Tokenizer::train_from_texts(texts, 330));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) / (std::string("myriad_data_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A shard directory whose train stream is 0, 1, ..., n-1 (cut into shards of the given sizes) and whose val
  // stream is 10000, 10001, ..., 10000 + n_val - 1.
  std::string make_stream_dir(const std::vector<int64_t>& shard_sizes, int64_t n_val,
                              ShardDType dtype = ShardDType::kU16) {
    const fs::path d = dir_ / "shards";
    fs::create_directories(d);
    int32_t next = 0;
    for (size_t s = 0; s < shard_sizes.size(); ++s) {
      std::vector<int32_t> t(static_cast<size_t>(shard_sizes[s]));
      for (auto& x : t) x = next++;
      write_shard(shard_path(d.string(), "train", int64_t(s)), dtype, t);
    }
    if (n_val > 0) {
      std::vector<int32_t> v(static_cast<size_t>(n_val));
      for (size_t i = 0; i < v.size(); ++i) v[i] = 10000 + int32_t(i);
      write_shard(shard_path(d.string(), "val", 0), dtype, v);
    }
    return d.string();
  }

  static std::vector<int64_t> stream_tokens(const std::string& dir, const std::string& split) {
    const TokenStream s = TokenStream::open(dir, split, true);
    std::vector<int64_t> out(static_cast<size_t>(s.size()));
    if (s.size() > 0) s.read(0, s.size(), out.data());
    return out;
  }
  static std::string decode_stream(const std::string& dir, const std::string& split) {
    const std::vector<int64_t> t = stream_tokens(dir, split);
    return tok_->decode(std::vector<int32_t>(t.begin(), t.end()));
  }

  static Tokenizer* tok_;
  fs::path dir_;
};

Tokenizer* DataTest::tok_ = nullptr;

// ---- Shards ----

TEST_F(DataTest, ShardHeaderRoundTrip) {
  const std::string h = encode_shard_header(ShardDType::kU32, 12345);
  ASSERT_EQ(h.size(), 32u);
  EXPECT_EQ(h.substr(0, 8), std::string("MYRTOKS\0", 8));
  const ShardHeader p = parse_shard_header(h.data(), 32 + 12345 * 4, "x.bin");
  EXPECT_EQ(p.version, 1u);
  EXPECT_EQ(p.dtype, ShardDType::kU32);
  EXPECT_EQ(p.count, 12345u);

  for (ShardDType dt : {ShardDType::kU16, ShardDType::kU32}) {
    const std::vector<int32_t> tokens = {0, 1, 2, 65535, 3, 40000};
    const fs::path path = dir_ / "s.bin";
    write_shard(path.string(), dt, tokens);
    EXPECT_EQ(fs::file_size(path), 32u + tokens.size() * size_t(shard_dtype_bytes(dt)));
    const MappedShard m = MappedShard::open(path.string());
    EXPECT_EQ(m.dtype(), dt);
    ASSERT_EQ(m.size(), int64_t(tokens.size()));
    std::vector<int64_t> back(tokens.size());
    m.read(0, m.size(), back.data());
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(back[i], tokens[i]);
      EXPECT_EQ(m[int64_t(i)], tokens[i]);
    }
  }
  EXPECT_EQ(shard_dtype_for_vocab(65536), ShardDType::kU16);
  EXPECT_EQ(shard_dtype_for_vocab(65537), ShardDType::kU32);
  expect_error([&] { write_shard((dir_ / "o.bin").string(), ShardDType::kU16, std::vector<int32_t>{65536}); },
               ErrorKind::kValue, "does not fit");
  EXPECT_FALSE(fs::exists(dir_ / "o.bin")) << "nothing half-written";
}

TEST_F(DataTest, BadShardsAreErrorsNamingTheFile) {
  const fs::path good = dir_ / "good.bin";
  write_shard(good.string(), ShardDType::kU16, std::vector<int32_t>{1, 2, 3, 4});
  const std::string bytes = read_all(good);

  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  write_all(dir_ / "magic.bin", bad_magic);
  expect_error([&] { MappedShard::open((dir_ / "magic.bin").string()); }, ErrorKind::kFormat, "magic.bin");
  expect_error([&] { MappedShard::open((dir_ / "magic.bin").string()); }, ErrorKind::kFormat, "bad magic");

  write_all(dir_ / "trunc.bin", bytes.substr(0, bytes.size() - 1));
  expect_error([&] { MappedShard::open((dir_ / "trunc.bin").string()); }, ErrorKind::kFormat, "trunc.bin");
  expect_error([&] { MappedShard::open((dir_ / "trunc.bin").string()); }, ErrorKind::kFormat, "truncated");

  write_all(dir_ / "short.bin", bytes.substr(0, 20));
  expect_error([&] { MappedShard::open((dir_ / "short.bin").string()); }, ErrorKind::kFormat, "short.bin");

  std::string bad_version = bytes;
  bad_version[8] = 2;
  write_all(dir_ / "version.bin", bad_version);
  expect_error([&] { MappedShard::open((dir_ / "version.bin").string()); }, ErrorKind::kFormat, "version 2");

  std::string bad_dtype = bytes;
  bad_dtype[12] = 3;
  write_all(dir_ / "dtype.bin", bad_dtype);
  expect_error([&] { MappedShard::open((dir_ / "dtype.bin").string()); }, ErrorKind::kFormat, "dtype 3");

  write_all(dir_ / "long.bin", bytes + "xx");
  expect_error([&] { MappedShard::open((dir_ / "long.bin").string()); }, ErrorKind::kFormat, "long.bin");

  expect_error([&] { MappedShard::open((dir_ / "none.bin").string()); }, ErrorKind::kIo, "none.bin");
}

// ---- Loader ----

TEST_F(DataTest, BatchesCoverTheStreamWithShiftedTargets) {
  const std::string d = make_stream_dir({100, 57, 300}, 0);  // 457 tokens, windows cross shard boundaries
  Loader loader(d, 1);
  const int64_t T = 8, n = loader.windows_per_epoch(T);
  ASSERT_EQ(n, (457 - 1) / 8);
  std::set<int64_t> starts;
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = loader.next_batch(T);
    ASSERT_EQ(b.batch, 1);
    ASSERT_EQ(b.tokens.size(), size_t(T));
    ASSERT_EQ(b.tokens[0] % T, 0) << "windows start on the grid";
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(b.tokens[size_t(t)], b.tokens[0] + t) << "consecutive stream tokens";
      EXPECT_EQ(b.targets[size_t(t)], b.tokens[size_t(t)] + 1) << "targets are the tokens shifted by one";
    }
    starts.insert(b.tokens[0]);
  }
  EXPECT_EQ(int64_t(starts.size()), n) << "each window exactly once per epoch";
  EXPECT_EQ(*starts.rbegin(), (n - 1) * T);
  EXPECT_EQ(loader.epoch(), 0);
  loader.next_batch(T);
  EXPECT_EQ(loader.epoch(), 1);

  // Batches of several rows are the same windows, row after row.
  Loader a(d, 9), b(d, 9);
  const Batch big = a.next_batch(T, 4);
  ASSERT_EQ(big.batch, 4);
  for (int r = 0; r < 4; ++r) {
    const Batch one = b.next_batch(T);
    EXPECT_TRUE(std::equal(one.tokens.begin(), one.tokens.end(), big.tokens.begin() + r * T));
    EXPECT_TRUE(std::equal(one.targets.begin(), one.targets.end(), big.targets.begin() + r * T));
  }
}

TEST_F(DataTest, ShuffleIsDeterministicPerSeedAndDiffersAcrossSeeds) {
  const std::string d = make_stream_dir({500}, 0);
  auto order = [&](uint64_t seed, int epochs) {
    Loader l(d, seed);
    std::vector<int64_t> firsts;
    for (int64_t i = 0; i < l.windows_per_epoch(10) * epochs; ++i) firsts.push_back(l.next_batch(10).tokens[0]);
    return firsts;
  };
  const auto a = order(42, 2), b = order(42, 2), c = order(43, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const size_t n = a.size() / 2;
  EXPECT_NE(std::vector<int64_t>(a.begin(), a.begin() + ptrdiff_t(n)),
            std::vector<int64_t>(a.begin() + ptrdiff_t(n), a.end()))
      << "each epoch has its own order";
  std::vector<int64_t> sorted(a.begin(), a.begin() + ptrdiff_t(n));
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(sorted[i], int64_t(i) * 10);
  // The permutation is ours (no std::shuffle), the same on every platform and in every version, or a resumed run
  // would change course: pinned.
  const std::vector<uint64_t> p = window_permutation(0, 0, 10);
  EXPECT_EQ(p, (std::vector<uint64_t>{6, 1, 2, 4, 7, 5, 3, 0, 9, 8}));
  EXPECT_EQ(window_permutation(1, 0, 10), (std::vector<uint64_t>{5, 0, 8, 7, 3, 1, 9, 6, 4, 2}));
  std::vector<uint64_t> sp = p;
  std::sort(sp.begin(), sp.end());
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(sp[i], i);
  EXPECT_EQ(window_permutation(0, 0, 10), p);
  EXPECT_NE(window_permutation(0, 1, 10), p);
}

TEST_F(DataTest, ResumeIsBitExact) {
  // 5 + 5 batches of 3 windows of 16 cross the end of the first epoch (300 tokens: 18 windows).
  const std::string d = make_stream_dir({120, 180}, 0);
  Loader first(d, 77);
  for (int i = 0; i < 5; ++i) first.next_batch(16, 3);
  const std::string saved = first.state().dump();  // through text, as a checkpoint stores it
  std::vector<Batch> a, b;
  for (int i = 0; i < 5; ++i) a.push_back(first.next_batch(16, 3));
  EXPECT_EQ(first.epoch(), 1);

  Loader second(d, 0);  // the seed comes from the state
  second.restore(nlohmann::json::parse(saved));
  for (int i = 0; i < 5; ++i) b.push_back(second.next_batch(16, 3));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a[size_t(i)].tokens, b[size_t(i)].tokens) << "batch " << i;
    EXPECT_EQ(a[size_t(i)].targets, b[size_t(i)].targets) << "batch " << i;
  }
  EXPECT_EQ(first.state(), second.state());
  const auto s = nlohmann::json::parse(saved);
  EXPECT_EQ(s["epoch"], 0);
  EXPECT_EQ(s["position"], 5 * 3 * 16);
  EXPECT_EQ(s["seed"], 77);
  EXPECT_EQ(s["seq_len"], 16);
}

TEST_F(DataTest, RestoreRejectsStatesThatDoNotFit) {
  const std::string d = make_stream_dir({300}, 0);
  Loader l(d, 1);
  l.next_batch(16);
  auto s = l.state();
  auto other = s;
  other["train_tokens"] = 301;
  expect_error([&] { l.restore(other); }, ErrorKind::kValue, "train_tokens");
  other = s;
  other["position"] = 17;
  expect_error([&] { l.restore(other); }, ErrorKind::kValue, "position");
  other = s;
  other.erase("epoch");
  expect_error([&] { l.restore(other); }, ErrorKind::kValue, "epoch");
  l.restore(s);  // the good one still works
}

TEST_F(DataTest, ChangingSeqLenKeepsThePositionInTokens) {
  const std::string d = make_stream_dir({1000}, 0);
  Loader l(d, 3);
  for (int i = 0; i < 5; ++i) l.next_batch(8);  // 40 tokens served
  EXPECT_EQ(l.state()["position"], 40);
  const Batch b = l.next_batch(16);  // re-cut: window ceil(40 / 16) = 3 of the 16-token permutation
  EXPECT_EQ(b.seq_len, 16);
  EXPECT_EQ(b.tokens.size(), 16u);
  EXPECT_EQ(b.tokens[0], int64_t(window_permutation(3, 0, l.windows_per_epoch(16))[3]) * 16);
  EXPECT_EQ(l.state()["position"], 64);
  EXPECT_EQ(l.state()["seq_len"], 16);
  for (int64_t t = 0; t < 16; ++t) EXPECT_EQ(b.targets[size_t(t)], b.tokens[size_t(t)] + 1);
  // Past the end of the epoch at the new length: a new epoch.
  Loader m(d, 3);
  for (int i = 0; i < 120; ++i) m.next_batch(8);  // 960 of 999 tokens
  m.next_batch(100);                              // ceil(960 / 100) = 10 > 9 windows: epoch 1
  EXPECT_EQ(m.epoch(), 1);
  EXPECT_EQ(m.state()["position"], 100);
}

TEST_F(DataTest, ValBatchesInOrder) {
  const std::string d = make_stream_dir({200}, 81);
  const Loader l(d, 0);
  EXPECT_EQ(l.val_tokens(), 81);
  const ValBatches vb = l.val_batches(10, 3);
  EXPECT_EQ(vb.windows(), 8);
  EXPECT_EQ(vb.size(), 3);
  int64_t w = 0;
  for (const Batch& b : vb) {
    for (int64_t r = 0; r < b.batch; ++r, ++w)
      for (int64_t t = 0; t < 10; ++t) {
        EXPECT_EQ(b.tokens[size_t(r * 10 + t)], 10000 + w * 10 + t);
        EXPECT_EQ(b.targets[size_t(r * 10 + t)], 10000 + w * 10 + t + 1);
      }
  }
  EXPECT_EQ(w, 8);
  EXPECT_EQ(l.val_batches(100).size(), 0) << "fewer than seq_len + 1 tokens: no windows";
}

TEST_F(DataTest, LoaderErrors) {
  expect_error([&] { Loader((dir_ / "nowhere").string()); }, ErrorKind::kIo, "nowhere");
  expect_error([&] { Loader(dir_.string()); }, ErrorKind::kIo, "no train shards");
  const std::string d = make_stream_dir({10, 10, 10}, 0);
  Loader small(d, 0);
  expect_error([&] { small.next_batch(30); }, ErrorKind::kValue, "needs at least 31 tokens");
  fs::remove(shard_path(d, "train", 1));
  expect_error([&] { Loader l(d); }, ErrorKind::kFormat, "train-00001.bin");
  std::string bytes = read_all(shard_path(d, "train", 0));
  write_all(shard_path(d, "train", 1), bytes.substr(0, bytes.size() - 2));
  expect_error([&] { Loader l(d); }, ErrorKind::kFormat, "train-00001.bin");
}

// ---- data prepare ----

TEST_F(DataTest, PrepareSplitsTextByPosition) {
  // 10000 bytes of lines; the val part is the last 1000 bytes.
  std::string text;
  std::mt19937_64 rng(1);
  const char* words[] = {"to", "be", "or", "not", "that", "is", "the", "question"};
  while (text.size() < 10000) text += std::string(words[rng() % 8]) + (rng() % 7 == 0 ? "\n" : " ");
  text.resize(10000);
  write_all(dir_ / "input.txt", text);
  PrepareOptions o;
  o.val_fraction = 0.1;
  o.progress = false;
  const std::string out = (dir_ / "out").string();
  const PrepareResult r = prepare_data(*tok_, {(dir_ / "input.txt").string()}, out, o);
  EXPECT_EQ(r.train.bytes, 9000u);
  EXPECT_EQ(r.val.bytes, 1000u);
  EXPECT_EQ(r.train.documents, 1);
  EXPECT_EQ(r.val.documents, 1);
  // The streams decode to exactly the two parts, each ended by <|endoftext|>.
  EXPECT_EQ(decode_stream(out, "train"), text.substr(0, 9000) + "<|endoftext|>");
  EXPECT_EQ(decode_stream(out, "val"), text.substr(9000) + "<|endoftext|>");
  EXPECT_EQ(stream_tokens(out, "train").back(), kEndOfTextId);

  const auto meta = nlohmann::json::parse(read_all(fs::path(out) / "meta.json"));
  EXPECT_EQ(meta["vocab_size"], tok_->vocab_size());
  EXPECT_EQ(meta["tokenizer_hash"], tok_->hash());
  EXPECT_EQ(meta["dtype"], "u16");
  EXPECT_EQ(meta["train"]["tokens"], r.train.tokens);
  EXPECT_EQ(meta["val"]["tokens"], r.val.tokens);
  EXPECT_EQ(meta["train"]["bytes"], 9000);
  EXPECT_EQ(meta["skipped_lines"], 0);
  const Loader l(out, 0);
  EXPECT_EQ(l.train_tokens(), r.train.tokens);
  EXPECT_EQ(l.vocab_size(), tok_->vocab_size());

  // The cut moves forward to a character boundary: 9 bytes of "日日日" (3 bytes each), f = 0.5 -> cut 4.5 -> 6.
  write_all(dir_ / "cjk.txt", "日日日");
  o.val_fraction = 0.5;
  const std::string out2 = (dir_ / "out2").string();
  prepare_data(*tok_, {(dir_ / "cjk.txt").string()}, out2, o);
  EXPECT_EQ(decode_stream(out2, "train"), "日日<|endoftext|>");
  EXPECT_EQ(decode_stream(out2, "val"), "日<|endoftext|>");
}

TEST_F(DataTest, TextChunksEndAtNewlinesSoTokenizationIsUnchanged) {
  std::string text;
  std::mt19937_64 rng(2);
  for (int i = 0; i < 300; ++i) text += std::string(size_t(rng() % 40), 'a' + char(rng() % 3)) + " be 日本\n";
  text += std::string(500, 'x') + "日本語日本語日本語";  // a last line longer than a chunk, multi-byte at the end
  write_all(dir_ / "t.txt", text);
  std::vector<std::string> chunks;
  read_text_chunks((dir_ / "t.txt").string(), 0, text.size(), 100, [&](std::string_view c) { chunks.emplace_back(c); });
  std::string joined;
  std::vector<int32_t> ids;
  for (const std::string& c : chunks) {
    joined += c;
    EXPECT_NE(static_cast<unsigned char>(c[0]) & 0xC0, 0x80) << "a chunk starts inside a character";
    const auto part = tok_->encode(c);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(chunks.size(), 50u);
  for (size_t i = 0; i + 1 < chunks.size() && chunks[i + 1][0] != 'x'; ++i) EXPECT_EQ(chunks[i].back(), '\n');
  // Up to the long last line, chunks end after a newline, and a newline is never inside a piece: the same ids.
  const size_t tail = text.find('x');
  const auto whole = tok_->encode(text.substr(0, tail));
  EXPECT_TRUE(std::equal(whole.begin(), whole.end(), ids.begin()));
  EXPECT_EQ(tok_->decode(ids), text);
  // A byte range.
  std::string part;
  read_text_chunks((dir_ / "t.txt").string(), 10, 250, 64, [&](std::string_view c) { part += c; });
  EXPECT_EQ(part, text.substr(10, 240));
}

TEST_F(DataTest, PrepareSkipsAndCountsBadJsonlLines) {
  write_all(dir_ / "d.jsonl",
            "{\"text\": \"to be or not\"}\n"
            "not json at all\n"
            "{\"no_text\": 1}\n"
            "\n"
            "{\"text\": 5}\n"
            "[1, 2]\n"
            "{\"text\": \"that is the question\", \"id\": 7}\n"
            "{\"text\": \"\"}\n");
  PrepareOptions o;
  o.val_fraction = 0;
  o.progress = false;
  const std::string out = (dir_ / "out").string();
  const PrepareResult r = prepare_data(*tok_, {(dir_ / "d.jsonl").string()}, out, o);
  EXPECT_EQ(r.train.documents, 2);
  EXPECT_EQ(r.skipped.count, 4);
  EXPECT_EQ(r.skipped.first_line, 2);
  EXPECT_EQ(r.empty_documents, 1);
  EXPECT_EQ(decode_stream(out, "train"), "to be or not<|endoftext|>that is the question<|endoftext|>");
  EXPECT_EQ(r.val.tokens, 0);
  EXPECT_FALSE(fs::exists(fs::path(out) / "val-00000.bin"));
  const auto meta = nlohmann::json::parse(read_all(fs::path(out) / "meta.json"));
  EXPECT_EQ(meta["skipped_lines"], 4);
  EXPECT_EQ(meta["first_skipped_line"]["line"], 2);
  EXPECT_NE(r.skipped.describe().find("line 2"), std::string::npos) << r.skipped.describe();

  // All lines bad: an error, and nothing written.
  write_all(dir_ / "bad.jsonl", "nope\n{\"x\":1}\n");
  const std::string out2 = (dir_ / "out2").string();
  expect_error([&] { prepare_data(*tok_, {(dir_ / "bad.jsonl").string()}, out2, o); }, ErrorKind::kValue,
               "no documents");
  EXPECT_FALSE(fs::exists(out2));
}

TEST_F(DataTest, PrepareSplitsByDocumentAndShards) {
  fs::create_directories(dir_ / "docs");
  std::string all;
  for (int i = 0; i < 20; ++i) {
    const std::string doc = "to be or not " + std::to_string(i) + " that is the question\n";
    write_all(dir_ / "docs" / ("d" + std::string(i < 10 ? "0" : "") + std::to_string(i) + ".txt"), doc);
  }
  PrepareOptions o;
  o.val_fraction = 0.1;
  o.split_by = SplitBy::kDocument;
  o.shard_tokens = 50;
  o.progress = false;
  const std::string out = (dir_ / "out").string();
  const PrepareResult r = prepare_data(*tok_, {(dir_ / "docs").string()}, out, o);
  EXPECT_EQ(r.train.documents, 18);
  EXPECT_EQ(r.val.documents, 2);
  EXPECT_GT(r.train.shards.size(), 1u);
  for (const auto& s : r.train.shards) EXPECT_LE(MappedShard::open((fs::path(out) / s).string()).size(), 50);
  // Documents 9 and 19 (floor((i+1)/10) steps) are the val ones, in order.
  EXPECT_EQ(decode_stream(out, "val"),
            "to be or not 9 that is the question\n<|endoftext|>to be or not 19 that is the question\n<|endoftext|>");
  EXPECT_EQ(Loader(out, 0).train_tokens(), r.train.tokens);
}

TEST_F(DataTest, PrepareErrorsLeaveNothingBehind) {
  PrepareOptions o;
  o.progress = false;
  const std::string out = (dir_ / "out").string();
  expect_error([&] { prepare_data(*tok_, {(dir_ / "missing.txt").string()}, out, o); }, ErrorKind::kIo, "missing.txt");
  write_all(dir_ / "empty.txt", "");
  expect_error([&] { prepare_data(*tok_, {(dir_ / "empty.txt").string()}, out, o); }, ErrorKind::kValue, "no data");
  fs::create_directories(dir_ / "nodocs");
  write_all(dir_ / "nodocs" / "x.bin", "binary");
  expect_error([&] { prepare_data(*tok_, {(dir_ / "nodocs").string()}, out, o); }, ErrorKind::kValue,
               "holds no text files");
  write_all(dir_ / "in.txt", "to be or not to be\n");
  write_all(dir_ / "afile", "x");
  expect_error([&] { prepare_data(*tok_, {(dir_ / "in.txt").string()}, (dir_ / "afile" / "out").string(), o); },
               ErrorKind::kIo, "afile");
  // Existing non-empty output: refused without force and untouched; replaced with force.
  fs::create_directories(out);
  write_all(fs::path(out) / "keep.txt", "old");
  expect_error([&] { prepare_data(*tok_, {(dir_ / "in.txt").string()}, out, o); }, ErrorKind::kIo, "--force");
  EXPECT_EQ(read_all(fs::path(out) / "keep.txt"), "old");
  o.force = true;
  prepare_data(*tok_, {(dir_ / "in.txt").string()}, out, o);
  EXPECT_FALSE(fs::exists(fs::path(out) / "keep.txt"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "meta.json"));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
  expect_error([&] { parse_split_by("bytes"); }, ErrorKind::kValue, "position");
  o.val_fraction = 1.0;
  expect_error([&] { prepare_data(*tok_, {(dir_ / "in.txt").string()}, out, o); }, ErrorKind::kValue, "val-fraction");
}

}  // namespace
}  // namespace myriad

// safetensors reader/writer and checkpoint directories: round trips of every dtype (incl. shapes [] and
// [2, 0]), one crafted bad file per validation rule (error kind, and a message naming the file and the tensor),
// zero-copy mapping, and sharded checkpoints with their index errors.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/checkpoint.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class IoTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) /
           (std::string("myriad_io_") + info->test_suite_name() + "_" + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a raw header text and data bytes.
std::string st_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs f, expects a myriad::Error of `kind` whose message contains every one of `needles`.
template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << error_kind_name(e.kind()) << ": " << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "expected an error (" << error_kind_name(kind) << ")";
}

// Writes a crafted file and expects opening it to fail with kFormat naming the file and the needles.
void expect_bad_file(const std::string& path, const std::string& bytes, std::vector<std::string> needles) {
  write_raw(path, bytes);
  needles.push_back(path);
  expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::kFormat, needles);
}

std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// A tensor of `shape` and `dtype` with distinct bit patterns in every byte.
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>((i * 37 + size_t(seed) * 11 + 5) & 0xff);
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Round trips.

TEST_F(IoTest, RoundTripEveryDtypeAndShape) {
  const NamedTensors tensors = {
      {"f32", patterned({2, 3}, DType::kF32, 1)},        {"bf16", patterned({4}, DType::kBF16, 2)},
      {"f16", patterned({3, 1}, DType::kF16, 3)},        {"i32", patterned({5}, DType::kI32, 4)},
      {"i64", patterned({2, 2}, DType::kI64, 5)},        {"u8", patterned({7}, DType::kU8, 6)},
      {"scalar", patterned({}, DType::kF32, 7)},         {"empty", patterned({2, 0}, DType::kBF16, 8)},
      {"empty_i64", patterned({0}, DType::kI64, 9)},     {"scalar_u8", patterned({}, DType::kU8, 10)},
      {"f16_3d", patterned({2, 1, 3}, DType::kF16, 11)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo \"quoted\""}};
  const std::string p = path("all.safetensors");
  save_safetensors(p, tensors, meta);

  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.header_bytes() % 8, 0u) << "header padded to a multiple of 8";
  ASSERT_EQ(f.entries().size(), tensors.size());
  // Entries come back in data order, which is the order given to the writer.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(f.entries()[i].name, name);
    ASSERT_TRUE(f.contains(name));
    const Tensor back = f.tensor(name);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(raw_bytes(back), raw_bytes(t));
    EXPECT_EQ(f.entry(name).bytes(), t.nbytes());
  }
  // The file ends exactly where the last tensor does.
  EXPECT_EQ(f.file_bytes(), 8 + f.header_bytes() + f.entries().back().end);
  // Header padding is spaces, as the reference writer does.
  const std::string bytes = read_raw(p);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.substr(8, f.header_bytes()).find_last_not_of(' '), bytes.substr(8, f.header_bytes()).rfind('}'));
}

TEST_F(IoTest, RoundTripNoTensorsNoMetadata) {
  save_safetensors(path("empty.safetensors"), NamedTensors{});
  const SafetensorsFile f = SafetensorsFile::open(path("empty.safetensors"));
  EXPECT_TRUE(f.entries().empty());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(read_raw(path("empty.safetensors")), st_file("{}      ", ""));
}

TEST_F(IoTest, NonContiguousTensorsAreWrittenContiguous) {
  Tensor base = patterned({3, 4}, DType::kF32, 1);
  Tensor tr = base.transpose(0, 1);  // [4, 3], strided
  Tensor sl = base.slice(1, 1, 3);   // [3, 2], strided
  ASSERT_FALSE(tr.is_contiguous());
  save_safetensors(path("nc.safetensors"), {{"tr", tr}, {"sl", sl}});
  const SafetensorsFile f = SafetensorsFile::open(path("nc.safetensors"));
  EXPECT_EQ(f.tensor("tr").shape(), (Shape{4, 3}));
  EXPECT_EQ(raw_bytes(f.tensor("tr")), raw_bytes(tr.contiguous()));
  EXPECT_EQ(raw_bytes(f.tensor("sl")), raw_bytes(sl.contiguous()));
}

TEST_F(IoTest, WriterRejectsBadInput) {
  const Tensor t = Tensor::zeros({2});
  expect_error(
      [&] {
        save_safetensors(path("dup.safetensors"), {{"a", t}, {"b", t}, {"a", t}});
      },
      ErrorKind::kValue, {"duplicate tensor name 'a'", path("dup.safetensors")});
  expect_error(
      [&] {
        save_safetensors(path("res.safetensors"), {{"__metadata__", t}});
      },
      ErrorKind::kValue, {"__metadata__"});
  expect_error(
      [&] {
        save_safetensors(path("undef.safetensors"), {{"u", Tensor()}});
      },
      ErrorKind::kValue, {"'u'", "undefined"});
  const Tensor q = Tensor::from_blob(nullptr, {32}, DType::kQ8_0, nullptr);
  expect_error([&] { save_safetensors(path("q.safetensors"), {{"q", q}}); }, ErrorKind::kUnsupported, {"'q'", "Q8_0"});
  // Nothing was written for any of them.
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A stand-in "cuda" allocator (plain host memory) so that a non-cpu tensor exists in a cpu-only build.
struct FakeDeviceAllocator final : DeviceAllocator {
  void* allocate(size_t bytes) override { return std::malloc(bytes ? bytes : 1); }
  void deallocate(void* p, size_t /*bytes*/) override { std::free(p); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void memset_zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
};

TEST_F(IoTest, WriterRejectsNonCpuTensors) {
  FakeDeviceAllocator fake;
  register_allocator(Device::kCUDA, &fake);
  {
    const Tensor g = Tensor::zeros({2}, DType::kF32, Device::kCUDA);
    expect_error(
        [&] {
          save_safetensors(path("gpu.safetensors"), {{"cpu", Tensor::zeros({1})}, {"gpu", g}});
        },
        ErrorKind::kUnsupported, {"'gpu'", "cuda", path("gpu.safetensors")});
    expect_error([&] { save_checkpoint(path("ck"), {{"gpu", g}}); }, ErrorKind::kUnsupported, {"'gpu'", "cuda"});
  }
  register_allocator(Device::kCUDA, nullptr);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(IoTest, WriteIsAtomicAndOldMappingsSurvive) {
  const std::string p = path("w.safetensors");
  save_safetensors(p, {{"x", Tensor::full({4}, 1.0f)}});
  const SafetensorsFile old = SafetensorsFile::open(p);
  const Tensor old_x = old.tensor("x");
  save_safetensors(p, {{"x", Tensor::full({4}, 2.0f)}, {"y", Tensor::zeros({1})}});
  // The replaced file's mapping still shows the old data (rename keeps the old inode alive).
  EXPECT_EQ(old_x.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(SafetensorsFile::open(p).tensor("x").to_vector(), std::vector<float>(4, 2.0f));
  // A failure mid-write leaves the destination untouched and no temporary file behind.
  const std::vector<TensorSpec> specs = {{"a", DType::kF32, {2}}, {"b", DType::kF32, {2}}};
  expect_error(
      [&] {
        save_safetensors(p, specs, [](size_t i) {
          if (i == 1) throw_error(ErrorKind::kValue, "producer failed");
          return Tensor::zeros({2});
        });
      },
      ErrorKind::kValue, {"producer failed"});
  // A produced tensor that differs from its declaration is an error too.
  expect_error([&] { save_safetensors(p, specs, [](size_t) { return Tensor::zeros({3}); }); }, ErrorKind::kValue,
               {"'a'", "declared"});
  EXPECT_EQ(SafetensorsFile::open(p).entries().size(), 2u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "temp files left behind";
}

// ---------------------------------------------------------------------------------------------------------
// Zero copy.

TEST_F(IoTest, TensorsAreZeroCopyViewsOfTheMapping) {
  const std::string p = path("z.safetensors");
  save_safetensors(p, {{"a", patterned({16}, DType::kF32, 1)}, {"b", patterned({3, 5}, DType::kBF16, 2)}});
  Tensor a, b;
  {
    const SafetensorsFile f = SafetensorsFile::open(p);
    const char* lo = static_cast<const char*>(f.mapping_data());
    const char* hi = lo + f.mapping_size();
    a = f.tensor("a");
    b = f.tensor("b");
    for (const Tensor* t : {&a, &b}) {
      const char* d = static_cast<const char*>(t->raw_data());
      EXPECT_GE(d, lo);
      EXPECT_LE(d + t->nbytes(), hi);
    }
    EXPECT_EQ(static_cast<const char*>(a.raw_data()), lo + 8 + f.header_bytes() + f.entry("a").begin);
  }
  // The SafetensorsFile is gone; the tensors keep the mapping alive.
  EXPECT_EQ(raw_bytes(a), raw_bytes(patterned({16}, DType::kF32, 1)));
  EXPECT_EQ(raw_bytes(b), raw_bytes(patterned({3, 5}, DType::kBF16, 2)));
  // Writing into a mapped tensor is private to this process (copy-on-write): the file is unchanged.
  const std::string before = read_raw(p);
  a.fill(0.0f);
  EXPECT_EQ(read_raw(p), before);
}

TEST_F(IoTest, MisalignedTensorsAreCopiedToAlignedMemory) {
  // U8 [3] then F32 [2]: the F32 data starts at an odd offset. The format allows it.
  const std::string header = R"({"u":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string data = "abc";
  const float vals[2] = {1.5f, -2.25f};
  data.append(reinterpret_cast<const char*>(vals), 8);
  write_raw(path("mis.safetensors"), st_file(padded, data));
  const SafetensorsFile f = SafetensorsFile::open(path("mis.safetensors"));
  const Tensor t = f.tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % alignof(float), 0u);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(raw_bytes(f.tensor("u")), "abc");
}

// ---------------------------------------------------------------------------------------------------------
// Crafted files that are legal.

TEST_F(IoTest, AcceptsLegalEdgeCases) {
  // Scalar, empty, unpadded header, whitespace, unknown extra keys, metadata; out-of-order offsets in the JSON.
  const std::string header =
      R"( { "__metadata__": {"a": "b"}, "s": {"dtype":"I32","shape":[],"data_offsets":[4,8], "extra": 1},)"
      R"( "e": {"shape":[2,0],"dtype":"F16","data_offsets":[0,0]}, "v": {"dtype":"I32","shape":[1],"data_offsets":[0,4]} }   )";
  std::string data(8, '\0');
  data[0] = 7;
  data[4] = 9;
  write_raw(path("ok.safetensors"), st_file(header, data));
  const SafetensorsFile f = SafetensorsFile::open(path("ok.safetensors"));
  EXPECT_EQ(f.metadata().at("a"), "b");
  EXPECT_EQ(f.tensor("s").shape(), Shape{});
  EXPECT_EQ(f.tensor("s").at({}), 9.0);
  EXPECT_EQ(f.tensor("v").at({0}), 7.0);
  EXPECT_EQ(f.tensor("e").shape(), (Shape{2, 0}));
  EXPECT_EQ(f.tensor("e").numel(), 0);
  expect_error([&] { f.tensor("nope"); }, ErrorKind::kFormat, {"'nope'", path("ok.safetensors")});
}

// ---------------------------------------------------------------------------------------------------------
// One test per validation rule.

TEST_F(IoTest, RejectsUnopenableFiles) {
  expect_error([&] { SafetensorsFile::open(path("missing.safetensors")); }, ErrorKind::kIo,
               {path("missing.safetensors"), "No such file"});
  expect_error([&] { SafetensorsFile::open(dir_.string()); }, ErrorKind::kIo, {dir_.string(), "directory"});
}

TEST_F(IoTest, RejectsFileShorterThan8Bytes) {
  expect_bad_file(path("short.safetensors"), std::string("\x02\0\0\0\0", 5), {"5 bytes", "shorter than"});
  expect_bad_file(path("zero.safetensors"), "", {"0 bytes"});
}

TEST_F(IoTest, RejectsHeaderLengthBeyondLimit) {
  expect_bad_file(path("huge.safetensors"), u64_le(100'000'001) + "{}", {"100000001", "exceeds"});
  expect_bad_file(path("max.safetensors"), u64_le(~uint64_t(0)) + "{}", {"exceeds"});
}

TEST_F(IoTest, RejectsHeaderPastEndOfFile) {
  expect_bad_file(path("past.safetensors"), u64_le(64) + "{}", {"header length 64", "past the end"});
}

TEST_F(IoTest, RejectsHeaderThatIsNotJson) {
  expect_bad_file(path("nj.safetensors"), st_file("{\"a\": oops}     ", ""), {"not valid JSON"});
  expect_bad_file(path("nj2.safetensors"), st_file("{\"a\": {\"dtype\": \"F32\"", ""), {"not valid JSON"});
}

TEST_F(IoTest, RejectsHeaderThatIsNotAnObject) {
  expect_bad_file(path("arr.safetensors"), st_file("[1, 2]  ", ""), {"must be a JSON object", "an array"});
  expect_bad_file(path("str.safetensors"), st_file("\"x\"     ", ""), {"must be a JSON object"});
}

TEST_F(IoTest, RejectsEntryMissingAField) {
  const std::map<std::string, std::string> cases = {
      {"dtype", R"({"w":{"shape":[1],"data_offsets":[0,4]}})"},
      {"shape", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})"},
      {"data_offsets", R"({"w":{"dtype":"F32","shape":[1]}})"},
  };
  for (const auto& [field, header] : cases) {
    SCOPED_TRACE(field);
    expect_bad_file(path("miss_" + field + ".safetensors"), st_file(header, "abcd"),
                    {"tensor 'w'", "missing \"" + field + "\""});
  }
}

TEST_F(IoTest, RejectsFieldsOfTheWrongJsonType) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":3})", "entry must be an object"},
      {R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", "\"dtype\" must be a string"},
      {R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "\"shape\" must be an array"},
      {R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "\"shape\" must be an array of integers"},
      {R"({"w":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}})", "\"shape\" must be an array of integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "two integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"a":0}}})", "two integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", "non-negative integers"},
  };
  int i = 0;
  for (const auto& [header, rule] : cases) {
    SCOPED_TRACE(header);
    expect_bad_file(path("type" + std::to_string(i++) + ".safetensors"), st_file(header, "abcd"), {"'w'", rule});
  }
}

TEST_F(IoTest, RejectsUnknownDtype) {
  for (const std::string dt : {"F64", "BOOL", "U16", "F8_E4M3", "f32", "Q8_0", ""}) {
    SCOPED_TRACE(dt);
    expect_bad_file(path("dt.safetensors"),
                    st_file(R"({"w":{"dtype":")" + dt + R"(","shape":[1],"data_offsets":[0,1]}})", "a"),
                    {"tensor 'w'", "unknown dtype \"" + dt + "\""});
  }
}

// A well-formed header of many entries (a hostile file from the internet, or a real checkpoint of 100,000 small
// tensors) opens in time linear in its size: 100,000 entries (a 6 MB header) within 2 seconds, and 10x the entries
// cost at most ~25x the time of 10,000 (linear: 10x; the quadratic callback parser this replaced took minutes).
// Under the sanitizers only the ratio is checked (their constant factors are large but still linear).
TEST_F(IoTest, HundredThousandEntryHeaderOpensInLinearTime) {
  auto make = [&](int64_t n) {
    std::string header = "{";
    for (int64_t i = 0; i < n; ++i) {
      header += (i ? ",\"t." : "\"t.") + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
                std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    }
    header += "}";
    const std::string file = path("many" + std::to_string(n) + ".safetensors");
    write_raw(file, st_file(header, std::string(size_t(4 * n), '\0')));
    return file;
  };
  auto seconds_to_open = [](const std::string& file, int64_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    const SafetensorsFile f = SafetensorsFile::open(file);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(int64_t(f.entries().size()), n);
    return s;
  };
  const std::string small = make(10000), big = make(100000);
  const double t_small = seconds_to_open(small, 10000), t_big = seconds_to_open(big, 100000);
  EXPECT_LT(t_big, 25 * std::max(t_small, 1e-3)) << "10,000 entries: " << t_small << " s, 100,000: " << t_big << " s";
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(t_big, 2.0) << "100,000 entries took " << t_big << " s";
#endif
}

// Nesting is bounded before parsing (nlohmann parses any depth, but copying or printing a value recurses once per
// level: 100,000 levels overflow the stack). A header whose metadata value is 100,001 levels deep is refused by
// name within the 2 s that bounds any input; 255 levels inside the top-level object still open (256 in all).
TEST_F(IoTest, RejectsHeaderNestedBeyondTheLimit) {
  const auto deep = [](int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); };
  const auto t0 = std::chrono::steady_clock::now();
  expect_bad_file(path("deep.safetensors"), st_file(R"({"w": )" + deep(100000) + "}", ""),
                  {path("deep.safetensors") + ": header", "nested 100001 levels deep", "at most 256"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // The deepest accepted header: 256 levels reach the parser, which then refuses the entry for what it is.
  expect_bad_file(path("edge.safetensors"), st_file(R"({"w": )" + deep(255) + "}", ""), {"tensor 'w'"});
}

TEST_F(IoTest, RejectsNegativeShapeDims) {
  expect_bad_file(path("neg.safetensors"), st_file(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})", ""),
                  {"tensor 'w'", "negative dimension -1", "[2, -1]"});
}

TEST_F(IoTest, RejectsShapeThatDoesNotMatchTheByteRange) {
  expect_bad_file(path("size.safetensors"),
                  st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
                  {"tensor 'w'", "[2] x F32 is 8 bytes", "span 4 bytes"});
  expect_bad_file(path("size0.safetensors"),
                  st_file(R"({"w":{"dtype":"BF16","shape":[2,0],"data_offsets":[0,2]}})", "ab"),
                  {"tensor 'w'", "is 0 bytes", "span 2 bytes"});
  // Element count overflows 64 bits: 2^32 * 2^32.
  expect_bad_file(path("ovf.safetensors"),
                  st_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                  {"tensor 'w'", "overflows"});
  // Element count fits, bytes do not: 2^62 * 4.
  expect_bad_file(path("ovf2.safetensors"),
                  st_file(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
                  {"tensor 'w'", "F32 overflows"});
  // A dimension beyond int64.
  expect_bad_file(path("big.safetensors"),
                  st_file(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""),
                  {"tensor 'w'", "too large"});
}

TEST_F(IoTest, RejectsOffsetsOutOfBounds) {
  expect_bad_file(path("oob.safetensors"),
                  st_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "abcdefgh"),
                  {"tensor 'w'", "out of bounds", "holds 8 bytes"});
}

TEST_F(IoTest, RejectsBeginAfterEnd) {
  expect_bad_file(path("rev.safetensors"),
                  st_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", "abcdefgh"),
                  {"tensor 'w'", "[8, 4] begin after end"});
}

TEST_F(IoTest, RejectsOverlappingTensors) {
  expect_bad_file(path("ovl.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, 'x')),
                  {"'a'", "'b'", "overlaps"});
  // The same range twice.
  expect_bad_file(path("same.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                          std::string(4, 'x')),
                  {"'a'", "'b'", "overlaps"});
  // An empty tensor inside another's range.
  expect_bad_file(path("inside.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"I32","shape":[0],"data_offsets":[4,4]}})",
                          std::string(8, 'x')),
                  {"'a'", "'b'", "overlaps"});
}

TEST_F(IoTest, RejectsGapsBetweenTensors) {
  expect_bad_file(path("gap.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          std::string(12, 'x')),
                  {"gap of 4 bytes", "'a'", "'b'"});
  expect_bad_file(path("gap0.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "abcdefgh"),
                  {"gap of 4 bytes before the first tensor 'a'"});
}

TEST_F(IoTest, RejectsTrailingBytes) {
  expect_bad_file(path("trail.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcdefgh"),
                  {"4 trailing bytes after the last tensor 'a'"});
  expect_bad_file(path("trail0.safetensors"), st_file("{}", "abc"), {"3 trailing bytes", "lists no tensors"});
}

TEST_F(IoTest, RejectsDuplicateTensorNames) {
  expect_bad_file(path("dup.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, 'x')),
                  {"duplicate tensor name 'a'"});
  expect_bad_file(path("dupkey.safetensors"),
                  st_file(R"({"a":{"dtype":"F32","shape":[1],"dtype":"I32","data_offsets":[0,4]}})", "abcd"),
                  {"duplicate key \"dtype\" inside \"a\""});
}

TEST_F(IoTest, RejectsMalformedMetadata) {
  const std::string w = R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  expect_bad_file(path("m1.safetensors"), st_file(R"({"__metadata__":["a"],)" + w + "}", "a"),
                  {"\"__metadata__\" must be an object", "an array"});
  expect_bad_file(path("m2.safetensors"), st_file(R"({"__metadata__":{"k":1},)" + w + "}", "a"),
                  {"\"__metadata__\" must map strings to strings", "key 'k'", "an integer"});
  expect_bad_file(path("m3.safetensors"), st_file(R"({"__metadata__":{"k":{"x":"y"}},)" + w + "}", "a"),
                  {"key 'k'", "an object"});
  expect_bad_file(path("m4.safetensors"), st_file(R"({"__metadata__":null,)" + w + "}", "a"),
                  {"\"__metadata__\" must be an object", "null"});
  expect_bad_file(path("m5.safetensors"), st_file(R"({"__metadata__":{},"__metadata__":{},)" + w + "}", "a"),
                  {"\"__metadata__\" appears twice"});
}

// ---------------------------------------------------------------------------------------------------------
// Checkpoints.

NamedTensors checkpoint_tensors() {
  return {
      {"embed.weight", patterned({8, 4}, DType::kBF16, 1)},     // 64 bytes
      {"layers.0.attn.wq", patterned({4, 4}, DType::kF32, 2)},  // 64
      {"layers.0.norm", patterned({4}, DType::kF16, 3)},        // 8
      {"layers.1.attn.wq", patterned({4, 4}, DType::kF32, 4)},  // 64
      {"layers.1.empty", patterned({2, 0}, DType::kF32, 5)},    // 0
      {"step", patterned({}, DType::kI64, 6)},                  // 8
      {"lm_head.weight", patterned({8, 4}, DType::kBF16, 7)},   // 64
  };
}

void expect_same_tensors(const Checkpoint& ck, const NamedTensors& tensors) {
  ASSERT_EQ(ck.names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(ck.names()[i], name) << "order is preserved";
    ASSERT_TRUE(ck.contains(name));
    EXPECT_EQ(ck.dtype(name), t.dtype());
    EXPECT_EQ(ck.shape(name), t.shape());
    EXPECT_EQ(raw_bytes(ck.tensor(name)), raw_bytes(t));
  }
}

TEST_F(IoTest, CheckpointTwoShardRoundTrip) {
  const NamedTensors tensors = checkpoint_tensors();
  const std::string dir = path("ck");
  const auto files = save_checkpoint(dir, tensors, {{"format", "pt"}}, /*max_shard_bytes=*/150);
  // Greedy in order: [embed 64, wq0 64, norm 8] = 136 (+ wq1 would be 200 > 150), [wq1 64, empty 0, step 8,
  // lm_head 64] = 136.
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], "model-00001-of-00002.safetensors");
  EXPECT_EQ(files[1], "model-00002-of-00002.safetensors");
  EXPECT_EQ(files[2], kCheckpointIndexFile);
  EXPECT_FALSE(fs::exists(fs::path(dir) / kCheckpointSingleFile));

  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.metadata().at("format"), "pt");
  EXPECT_EQ(ck.total_bytes(), 272u);
  expect_same_tensors(ck, tensors);
  EXPECT_EQ(ck.file_of("layers.0.norm").path(), (fs::path(dir) / files[0]).string());
  EXPECT_EQ(ck.file_of("layers.1.attn.wq").path(), (fs::path(dir) / files[1]).string());
  expect_error([&] { ck.tensor("missing"); }, ErrorKind::kFormat, {"'missing'", dir});

  // The index is what Hugging Face writes: metadata.total_size and a weight_map.
  const auto index = nlohmann::json::parse(read_raw((fs::path(dir) / kCheckpointIndexFile).string()));
  EXPECT_EQ(index["metadata"]["total_size"], 272);
  EXPECT_EQ(index["weight_map"]["step"], files[1]);
  EXPECT_EQ(index["weight_map"].size(), tensors.size());

  // Saving again unsharded replaces the layout: model.safetensors, and the stale index is gone.
  EXPECT_EQ(save_checkpoint(dir, tensors), std::vector<std::string>{kCheckpointSingleFile});
  EXPECT_FALSE(fs::exists(fs::path(dir) / kCheckpointIndexFile));
  const Checkpoint single = Checkpoint::open(dir);
  EXPECT_FALSE(single.sharded());
  expect_same_tensors(single, tensors);
  // A single file opens as a checkpoint too.
  expect_same_tensors(Checkpoint::open((fs::path(dir) / kCheckpointSingleFile).string()), tensors);
}

// Views (how foreign layouts are read under myriad's names): renames, reshapes and slices share the stored bytes;
// a view that makes another shape or dtype than it declared is one error naming it; views have no file; the
// metadata given wins over the checkpoint's.
TEST_F(IoTest, CheckpointViewsAreZeroCopyAndChecked) {
  const std::string dir = path("ck");
  save_checkpoint(dir, {{"a", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})}}, {{"k", "base"}});
  const Checkpoint base = Checkpoint::open(dir);
  const Checkpoint v =
      base.with_views({{"renamed", DType::kF32, {2, 3}, [](const Checkpoint& b) { return b.tensor("a"); }},
                       {"flat", DType::kF32, {6}, [](const Checkpoint& b) { return b.tensor("a").view({6}); }},
                       {"row1", DType::kF32, {3}, [](const Checkpoint& b) { return b.tensor("a").select(0, 1); }},
                       {"liar", DType::kF32, {4}, [](const Checkpoint& b) { return b.tensor("a").view({6}); }}},
                      {{"k", "view"}, {"extra", "1"}});
  EXPECT_TRUE(v.is_view());
  EXPECT_EQ(v.names(), (std::vector<std::string>{"renamed", "flat", "row1", "liar"}));
  EXPECT_TRUE(v.contains("flat") && !v.contains("a"));
  EXPECT_EQ(v.tensor("row1").to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(v.tensor("flat").raw_data(), base.tensor("a").raw_data());  // the same bytes: no copy
  EXPECT_EQ(v.shape("flat"), (Shape{6}));
  EXPECT_EQ(v.entry("renamed").bytes(), 24u);
  EXPECT_EQ(v.metadata().at("k"), "view");
  EXPECT_EQ(v.metadata().at("extra"), "1");
  expect_error([&] { v.tensor("liar"); }, ErrorKind::kFormat, {"view liar", "[6]", "declared", "[4]"});
  expect_error([&] { v.file_of("flat"); }, ErrorKind::kFormat, {"flat", "no single file"});
  expect_error([&] { v.tensor("a"); }, ErrorKind::kFormat, {"'a'"});
  expect_error(
      [&] {
        base.with_views({{"x", DType::kF32, {1}, nullptr}, {"x", DType::kF32, {1}, nullptr}}, {});
      },
      ErrorKind::kFormat, {"two views named x"});
}

TEST_F(IoTest, CheckpointShardLargerThanLimitGetsItsOwnShard) {
  const NamedTensors tensors = {{"a", patterned({4}, DType::kU8, 1)},
                                {"big", patterned({100}, DType::kU8, 2)},
                                {"b", patterned({4}, DType::kU8, 3)}};
  const auto files = save_checkpoint(path("ck"), tensors, {}, 10);
  EXPECT_EQ(files.size(), 4u);  // a | big | b | index
  expect_same_tensors(Checkpoint::open(path("ck")), tensors);
}

TEST_F(IoTest, CheckpointWriterRejectsDuplicates) {
  const Tensor t = Tensor::zeros({1});
  expect_error(
      [&] {
        save_checkpoint(path("ck"), {{"a", t}, {"a", t}}, {}, 1);
      },
      ErrorKind::kValue, {"duplicate tensor name 'a'"});
  EXPECT_FALSE(fs::exists(path("ck")));
}

// Builds a sharded checkpoint by hand: shards[file] = tensors, plus an index with the given weight_map text.
void write_shards(const fs::path& dir, const std::map<std::string, NamedTensors>& shards,
                  const std::string& weight_map) {
  fs::create_directories(dir);
  for (const auto& [file, tensors] : shards) save_safetensors((dir / file).string(), tensors);
  write_raw((dir / kCheckpointIndexFile).string(),
            R"({"metadata": {"total_size": 0}, "weight_map": )" + weight_map + "}");
}

TEST_F(IoTest, CheckpointIndexErrors) {
  const Tensor t = Tensor::zeros({2});
  const fs::path d = dir_;
  auto case_dir = [&](const std::string& name) { return d / name; };

  // A mapped file that does not exist.
  write_shards(case_dir("missing"), {{"s1.safetensors", {{"a", t}}}},
               R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  expect_error(
      [&] { Checkpoint::open(case_dir("missing").string()); }, ErrorKind::kIo,
      {(case_dir("missing") / kCheckpointIndexFile).string(), "tensor 'b'", "s2.safetensors", "does not exist"});

  // A tensor missing from the file it is mapped to.
  write_shards(case_dir("absent"), {{"s1.safetensors", {{"a", t}}}, {"s2.safetensors", {{"c", t}}}},
               R"({"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"})");
  expect_error(
      [&] { Checkpoint::open(case_dir("absent").string()); }, ErrorKind::kFormat,
      {(case_dir("absent") / kCheckpointIndexFile).string(), "tensor 'b'", "'s2.safetensors'", "does not contain it"});

  // A name listed twice in the weight_map (to two files).
  write_shards(case_dir("dupkey"), {{"s1.safetensors", {{"a", t}}}, {"s2.safetensors", {{"b", t}}}},
               R"({"a": "s1.safetensors", "b": "s2.safetensors", "a": "s2.safetensors"})");
  expect_error([&] { Checkpoint::open(case_dir("dupkey").string()); }, ErrorKind::kFormat,
               {(case_dir("dupkey") / kCheckpointIndexFile).string(), "tensor 'a'", "listed twice"});

  // An index nested beyond the limit is refused by name before it is parsed.
  write_shards(case_dir("deep"), {{"s1.safetensors", {{"a", t}}}},
               R"({"a": "s1.safetensors", "b": )" + std::string(300, '[') + std::string(300, ']') + "}");
  expect_error([&] { Checkpoint::open(case_dir("deep").string()); }, ErrorKind::kFormat,
               {(case_dir("deep") / kCheckpointIndexFile).string(), "nested 302 levels deep", "at most 256"});

  // One tensor present in two files.
  write_shards(case_dir("twofiles"), {{"s1.safetensors", {{"a", t}}}, {"s2.safetensors", {{"a", t}, {"b", t}}}},
               R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  expect_error([&] { Checkpoint::open(case_dir("twofiles").string()); }, ErrorKind::kFormat,
               {"tensor 'a'", "in both", "s1.safetensors", "s2.safetensors"});

  // A tensor in a shard that the index does not list.
  write_shards(case_dir("unlisted"), {{"s1.safetensors", {{"a", t}, {"z", t}}}}, R"({"a": "s1.safetensors"})");
  expect_error([&] { Checkpoint::open(case_dir("unlisted").string()); }, ErrorKind::kFormat,
               {"tensor 'z'", "not listed"});

  // File names must stay inside the directory.
  write_shards(case_dir("escape"), {}, R"({"a": "../s1.safetensors"})");
  expect_error([&] { Checkpoint::open(case_dir("escape").string()); }, ErrorKind::kFormat,
               {"tensor 'a'", "../s1.safetensors", "not a file name inside"});
  write_shards(case_dir("abs"), {}, R"({"a": "/etc/passwd"})");
  expect_error([&] { Checkpoint::open(case_dir("abs").string()); }, ErrorKind::kFormat, {"/etc/passwd"});

  // Malformed indexes.
  write_shards(case_dir("notmap"), {}, R"(["a"])");
  expect_error([&] { Checkpoint::open(case_dir("notmap").string()); }, ErrorKind::kFormat, {"\"weight_map\""});
  write_shards(case_dir("notstr"), {}, R"({"a": 3})");
  expect_error([&] { Checkpoint::open(case_dir("notstr").string()); }, ErrorKind::kFormat, {"tensor 'a'", "string"});
  fs::create_directories(case_dir("badjson"));
  write_raw((case_dir("badjson") / kCheckpointIndexFile).string(), "{\"weight_map\": ");
  expect_error([&] { Checkpoint::open(case_dir("badjson").string()); }, ErrorKind::kFormat, {"not valid JSON"});

  // A broken shard reports the shard's own validation error.
  write_shards(case_dir("badshard"), {{"s1.safetensors", {{"a", t}}}}, R"({"a": "s1.safetensors"})");
  write_raw((case_dir("badshard") / "s1.safetensors").string(), "abc");
  expect_error([&] { Checkpoint::open(case_dir("badshard").string()); }, ErrorKind::kFormat,
               {(case_dir("badshard") / "s1.safetensors").string(), "shorter than"});

  // Both layouts at once is ambiguous; neither is an open failure; nothing there at all too.
  write_shards(case_dir("both"), {{"s1.safetensors", {{"a", t}}}}, R"({"a": "s1.safetensors"})");
  save_safetensors((case_dir("both") / kCheckpointSingleFile).string(), {{"a", t}});
  expect_error([&] { Checkpoint::open(case_dir("both").string()); }, ErrorKind::kFormat, {"ambiguous"});
  fs::create_directories(case_dir("none"));
  expect_error([&] { Checkpoint::open(case_dir("none").string()); }, ErrorKind::kIo, {"holds neither"});
  expect_error([&] { Checkpoint::open(case_dir("nowhere").string()); }, ErrorKind::kIo, {"nowhere"});
}

}  // namespace
}  // namespace myriad

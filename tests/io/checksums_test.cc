// Checkpoint checksums: the manifest lists every file, a damaged, truncated or missing file is refused naming the
// file and the rule, unlisted files and directories without a manifest are accepted, and the safetensors reader
// checks a listed file before trusting it.
#include "io/checksums.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

class ChecksumsTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) / (std::string("myriad_sums_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tokenizer");
    save_safetensors(path("model.safetensors"), {{"w", Tensor::full({4, 4}, 0.5f)}});
    write_file_atomic(path("trainer_state.json"), R"({"step": 3})");
    write_file_atomic(path("tokenizer/tokenizer.model"), std::string(1000, 'x'));
    write_checksums(dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Flips one bit of byte `at` in place (as a disk or a copy would).
  void flip(const std::string& name, uint64_t at) {
    std::fstream f(path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    char c = 0;
    f.get(c);
    f.seekp(std::streamoff(at));
    f.put(char(c ^ 0x10));
  }
  static std::string error_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// The empty input's xxh3-64 is the reference implementation's published sanity value (xxhash's tests).
TEST_F(ChecksumsTest, MatchesTheReferenceValueAndListsEveryFile) {
  write_file_atomic(path("empty"), "");
  EXPECT_EQ(file_checksum(path("empty")), "2d06800538d394c2");
  const nlohmann::json m = nlohmann::json::parse(read_file(path(kChecksumFile)));
  EXPECT_EQ(m["algorithm"], "xxh3-64");
  ASSERT_EQ(m["files"].size(), 3u) << m.dump();
  uint64_t bytes = 0;
  EXPECT_EQ(m["files"]["model.safetensors"]["xxh3"], file_checksum(path("model.safetensors"), &bytes));
  EXPECT_EQ(m["files"]["model.safetensors"]["bytes"], bytes);
  EXPECT_TRUE(m["files"].contains("tokenizer/tokenizer.model"));
  EXPECT_TRUE(verify_directory_checksums(dir_.string()));
  EXPECT_NO_THROW(verify_checksum(path("tokenizer/tokenizer.model")));
  EXPECT_NO_THROW(SafetensorsFile::open(path("model.safetensors")));
}

TEST_F(ChecksumsTest, EveryFlippedBitIsRefusedNamingTheFile) {
  // One bit in the data section of the weights (still a well-formed file: only the checksum can tell).
  const uint64_t size = fs::file_size(path("model.safetensors"));
  flip("model.safetensors", size - 3);
  std::string e = error_of([&] { SafetensorsFile::open(path("model.safetensors")); });
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  EXPECT_FALSE(error_of([&] { verify_directory_checksums(dir_.string()); }).empty());
  flip("model.safetensors", size - 3);  // restored
  EXPECT_NO_THROW(SafetensorsFile::open(path("model.safetensors")));

  flip("tokenizer/tokenizer.model", 10);  // found through the manifest one directory up
  e = error_of([&] { verify_checksum(path("tokenizer/tokenizer.model")); });
  EXPECT_NE(e.find("tokenizer.model"), std::string::npos) << e;
}

TEST_F(ChecksumsTest, TruncatedMissingAndDamagedManifestAreRefused) {
  fs::resize_file(path("trainer_state.json"), 4);
  std::string e = error_of([&] { verify_checksum(path("trainer_state.json")); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  fs::remove(path("trainer_state.json"));
  e = error_of([&] { verify_directory_checksums(dir_.string()); });
  EXPECT_NE(e.find("missing"), std::string::npos) << e;

  write_file_atomic(path(kChecksumFile), R"({"algorithm": "xxh3-64", "files": {"model.safetensors": {"bytes": 1}}})");
  e = error_of([&] { SafetensorsFile::open(path("model.safetensors")); });
  EXPECT_NE(e.find(kChecksumFile), std::string::npos) << e;
  write_file_atomic(path(kChecksumFile), "{\"algorithm\": \"xxh3-64\", \"fi");
  e = error_of([&] { verify_checksum(path("model.safetensors")); });
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
}

TEST_F(ChecksumsTest, UnlistedFilesAndDirectoriesWithoutAManifestAreUnchecked) {
  write_file_atomic(path("notes.txt"), "written after the manifest");
  EXPECT_NO_THROW(verify_checksum(path("notes.txt")));
  fs::remove(path(kChecksumFile));
  flip("model.safetensors", fs::file_size(path("model.safetensors")) - 3);
  EXPECT_FALSE(verify_directory_checksums(dir_.string()));
  EXPECT_NO_THROW(SafetensorsFile::open(path("model.safetensors")));  // nothing to check against: as before
}

}  // namespace
}  // namespace myriad

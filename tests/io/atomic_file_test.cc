// Atomic file writes: content, replacement, and that failures leave neither a torn destination nor temp files.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(testing::TempDir()) / (std::string("myriad_atomic_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  size_t entries() const { return size_t(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); }

  fs::path dir_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(AtomicFileTest, WritesAndReplaces) {
  write_file_atomic(path("a.txt"), "first");
  EXPECT_EQ(read_all(path("a.txt")), "first");
  write_file_atomic(path("a.txt"), std::string("second\0with nul", 15));
  EXPECT_EQ(read_all(path("a.txt")), std::string("second\0with nul", 15));
  write_file_atomic(path("empty.txt"), "");
  EXPECT_EQ(fs::file_size(path("empty.txt")), 0u);
  EXPECT_EQ(entries(), 2u) << "no temporary files left";
}

TEST_F(AtomicFileTest, NewFilesGetTheUsualPermissions) {
  const mode_t old = ::umask(022);
  write_file_atomic(path("p.txt"), "x");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(path("p.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(AtomicFileTest, StreamingWriterCommitsOnlyOnCommit) {
  write_file_atomic(path("s.bin"), "old");
  {
    AtomicFileWriter w(path("s.bin"));
    w.write("new ");
    w.write(std::string(100000, 'z'));
    EXPECT_EQ(w.bytes_written(), 100004u);
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(fs::path(w.temp_path()).parent_path(), dir_) << "temp file is a sibling (same file system)";
    EXPECT_EQ(read_all(path("s.bin")), "old") << "destination untouched before commit";
    w.commit();
  }
  EXPECT_EQ(read_all(path("s.bin")).size(), 100004u);
  {
    AtomicFileWriter w(path("s.bin"));
    w.write("abandoned");
  }  // destroyed without commit (e.g. an exception): temp removed, destination untouched
  EXPECT_EQ(read_all(path("s.bin")).size(), 100004u);
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFileTest, ErrorsNameThePath) {
  try {
    write_file_atomic(path("no/such/dir/f.txt"), "x");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(path("no/such/dir/f.txt")), std::string::npos) << e.what();
  }
  // Renaming over a directory fails at commit; the temp file is cleaned up.
  fs::create_directories(path("d"));
  try {
    write_file_atomic(path("d"), "x");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(path("d")), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(), 1u);
}

}  // namespace
}  // namespace myriad

// Atomic writes: temp sibling file, fsync, rename, fsync directory. See atomic_file.h.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace myriad {

namespace {

std::string errno_str(int err) {
  return std::strerror(err);
}

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MYRIAD_REQUIRE(fd >= 0, kIo, "cannot open directory '", dir, "' to fsync it: ", errno_str(errno));
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories (EINVAL); the rename is then as durable as it gets.
  MYRIAD_REQUIRE(rc == 0 || err == EINVAL, kIo, "fsync of directory '", dir, "' failed: ", errno_str(err));
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  MYRIAD_REQUIRE(!path_.empty(), kIo, "cannot write a file with an empty path");
  const std::filesystem::path p(path_);
  const std::string base = p.filename().string();
  MYRIAD_REQUIRE(!base.empty() && base != "." && base != "..", kIo, "cannot write '", path_, "': not a file name");
  const std::string dir = parent_dir(path_);
  for (int attempt = 0;; ++attempt) {
    temp_path_ = dir + "/." + base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter++);
    // 0666 & ~umask, like any other new file (mkstemp would give 0600).
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int err = errno;
    MYRIAD_REQUIRE(err == EEXIST && attempt < 100, kIo, "cannot create a temporary file for '", path_, "' (",
                   temp_path_, "): ", errno_str(err));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  abort();
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  MYRIAD_CHECK(!done_ && fd_ >= 0, "write after commit/abort of ", path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      abort();
      throw_error(ErrorKind::kIo, "writing '", path_, "' failed after ", written_, " bytes: ", errno_str(err));
    }
    p += n;
    bytes -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFileWriter::commit() {
  MYRIAD_CHECK(!done_ && fd_ >= 0, "commit after commit/abort of ", path_);
  int rc;
  do {
    rc = ::fsync(fd_);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    abort();
    throw_error(ErrorKind::kIo, "fsync of '", temp_path_, "' failed: ", errno_str(err));
  }
  rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    abort();
    throw_error(ErrorKind::kIo, "closing '", temp_path_, "' failed: ", errno_str(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abort();
    throw_error(ErrorKind::kIo, "cannot rename '", temp_path_, "' to '", path_, "': ", errno_str(err));
  }
  done_ = true;
  fsync_directory(parent_dir(path_));
}

void AtomicFileWriter::abort() noexcept {
  if (done_) return;
  done_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  MYRIAD_REQUIRE(fd >= 0, kIo, "cannot open ", path, " to sync it: ", errno_str(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  MYRIAD_REQUIRE(rc == 0, kIo, "fsync failed for ", path, ": ", errno_str(err));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  MYRIAD_REQUIRE(!in.bad(), kIo, "cannot read '", path, "'");
  return ss.str();
}

bool directory_is_empty(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::directory_iterator(dir, ec) == std::filesystem::directory_iterator();
}

StagedDirectory::StagedDirectory(std::string out) : out_(std::move(out)) {
  namespace fs = std::filesystem;
  const std::string parent = parent_dir(out_);
  std::error_code ec;
  fs::create_directories(parent, ec);
  MYRIAD_REQUIRE(fs::is_directory(parent), kIo, "cannot create output directory '", parent,
                 "': ", ec ? ec.message() : "not a directory");
  std::string tmpl = out_ + ".tmp-XXXXXX";
  MYRIAD_REQUIRE(::mkdtemp(tmpl.data()) != nullptr, kIo, "cannot write output directory '", out_,
                 "': cannot create a temporary directory in '", parent, "': ", errno_str(errno));
  tmp_ = tmpl;
  const mode_t mask = ::umask(0);  // mkdtemp makes 0700; the output gets the usual 0777 & ~umask
  ::umask(mask);
  MYRIAD_REQUIRE(::chmod(tmp_.c_str(), 0777 & ~mask) == 0, kIo, "cannot chmod '", tmp_, "': ", errno_str(errno));
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(tmp_, ec);
}

void StagedDirectory::commit() {
  namespace fs = std::filesystem;
  MYRIAD_REQUIRE(!committed_, kIo, "output directory '", out_, "' was committed already");
  fsync_directory(tmp_);
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(out_, ec));
  if (!exists || directory_is_empty(out_)) {
    if (exists) fs::remove(out_, ec);
    MYRIAD_REQUIRE(::rename(tmp_.c_str(), out_.c_str()) == 0, kIo, "cannot rename '", tmp_, "' to '", out_,
                   "': ", errno_str(errno));
  } else if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp_, ec);  // now the old output
  } else {
    const std::string old = tmp_ + ".old";
    MYRIAD_REQUIRE(::rename(out_.c_str(), old.c_str()) == 0, kIo, "cannot move the old '", out_,
                   "' aside: ", errno_str(errno));
    if (::rename(tmp_.c_str(), out_.c_str()) != 0) {
      const int err = errno;
      ::rename(old.c_str(), out_.c_str());
      throw_error(ErrorKind::kIo, "cannot rename '", tmp_, "' to '", out_, "': ", errno_str(err));
    }
    fs::remove_all(old, ec);
  }
  committed_ = true;
  fsync_directory(parent_dir(out_));
}

}  // namespace myriad

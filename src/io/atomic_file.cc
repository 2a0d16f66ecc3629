// Atomic writes: temp sibling file, fsync, rename, fsync directory. See atomic_file.h.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

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

}  // namespace myriad

// Atomic file writes (docs/design.md §5): the bytes go to a temporary file in the destination's directory, which is
// fsync'ed, renamed over the destination, and the directory fsync'ed. A reader therefore sees either the old
// file or the complete new one, never a torn one, even after a crash; a process that has the old file mmap'ed
// keeps its (unlinked) inode intact.
//
// Leaves out: cross-directory moves (the temp file is always a sibling of the destination) and preserving the
// old file's owner/permissions (the new file gets 0666 & ~umask, as with open(O_CREAT)).
// All failures throw myriad::Error kIo naming the path and the system error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace myriad {

// Streaming form, for files too large to hold in memory (safetensors shards):
//   AtomicFileWriter w(path);  w.write(...); ...;  w.commit();
// Until commit() the destination is untouched; destroying an uncommitted writer (e.g. while an exception
// unwinds) removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync the temp file, rename it over the destination, fsync the directory. Call once.
  void commit();
  // Drops the temporary file; the destination is untouched. Idempotent; also done by the destructor.
  void abort() noexcept;

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool done_ = false;
};

// Whole-buffer form: write_file_atomic("dir/config.json", text).
void write_file_atomic(const std::string& path, std::string_view bytes);

// fsync a directory so that a rename/creation inside it is durable. Throws kIo.
void fsync_directory(const std::string& dir);
// fsync a file by its path. Throws kIo.
void fsync_path(const std::string& path);

// The whole of a file's bytes. Throws kIo naming the path.
std::string read_file(const std::string& path);

// True for an empty directory (or one that cannot be listed).
bool directory_is_empty(const std::string& dir);

// Directory outputs written atomically (a tokenizer, prepared shards, a pruned or quantized model): everything
// goes into a temporary directory beside the destination, which commit() then puts in place. Creating one makes
// the parent directories, then `<out>.tmp-XXXXXX` (mkdtemp) with the usual 0777 & ~umask permissions; the
// destructor removes it unless committed, so an error leaves no debris.
//   commit(): fsyncs the temporary directory, then a plain rename when `out` is missing or an empty directory,
//   else an atomic swap (renameat2 RENAME_EXCHANGE) and removal of the old output; where the file system has no
//   RENAME_EXCHANGE the old output is moved aside first (and back if the rename fails).
// Files inside are the caller's to write and fsync (write_file_atomic does both). Throws kIo.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::string out);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  const std::string& path() const { return tmp_; }  // where to write
  void commit();

 private:
  std::string out_, tmp_;
  bool committed_ = false;
};

}  // namespace myriad

// See checksums.h.
#include "io/checksums.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/json_fields.h"
#include "io/atomic_file.h"

namespace myriad {

namespace fs = std::filesystem;

std::string file_checksum(const std::string& path, uint64_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MYRIAD_REQUIRE(fd >= 0, kIo, "cannot open '", path, "' to checksum it: ", std::strerror(errno));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  MYRIAD_CHECK(state != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(state.get());
  std::vector<char> buf(size_t(1) << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw_error(ErrorKind::kIo, "cannot read '", path, "': ", std::strerror(err));
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buf.data(), size_t(n));
    total += uint64_t(n);
  }
  ::close(fd);
  if (bytes) *bytes = total;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state.get())));
  return hex;
}

void write_checksums(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::map<std::string, std::string> sorted;  // relative name -> path: the manifest lists files in name order
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel == kChecksumFile) continue;
    sorted[rel] = e.path().string();
  }
  for (const auto& [rel, path] : sorted) {
    uint64_t bytes = 0;
    const std::string sum = file_checksum(path, &bytes);
    files[rel] = {{"bytes", bytes}, {"xxh3", sum}};
  }
  const nlohmann::json manifest = {{"algorithm", "xxh3-64"}, {"files", files}};
  write_file_atomic((fs::path(dir) / kChecksumFile).string(), manifest.dump(1) + "\n");
}

namespace {

// The manifest at `manifest_path`, validated; kFormat naming it when damaged.
nlohmann::json read_manifest(const std::string& manifest_path) {
  const nlohmann::json m = parse_json_or_discarded(read_file(manifest_path));
  MYRIAD_REQUIRE(!m.is_discarded() && m.is_object(), kFormat, manifest_path,
                 ": not a JSON object (the checksum manifest is damaged)");
  const auto alg = m.find("algorithm");
  MYRIAD_REQUIRE(alg != m.end() && *alg == "xxh3-64", kFormat, manifest_path,
                 ": \"algorithm\" must be \"xxh3-64\" (the only one myriad writes)");
  const auto files = m.find("files");
  MYRIAD_REQUIRE(files != m.end() && files->is_object(), kFormat, manifest_path, ": \"files\" must be an object");
  for (const auto& [name, entry] : files->items()) {
    const auto b = entry.is_object() ? entry.find("bytes") : entry.end();
    const auto x = entry.is_object() ? entry.find("xxh3") : entry.end();
    MYRIAD_REQUIRE(b != entry.end() && b->is_number_unsigned() && x != entry.end() && x->is_string() &&
                       x->get<std::string>().size() == 16,
                   kFormat, manifest_path, ": files[\"", name,
                   "\"] must be {\"bytes\": a non-negative integer, \"xxh3\": 16 hex digits}");
  }
  return m;
}

// Files this process has verified, by identity and change times: a checkpoint verified as a whole (resume, inspect)
// is not hashed again when each of its files is opened. A file rewritten since has another inode (myriad's writers
// rename) or newer times, and is hashed again.
using FileKey = std::tuple<dev_t, ino_t, off_t, int64_t, int64_t, std::string>;
std::mutex verified_mu;
std::set<FileKey> verified;

std::optional<FileKey> file_key(const std::string& path, const std::string& sum) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileKey{st.st_dev,
                 st.st_ino,
                 st.st_size,
                 int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                 int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec,
                 sum};
}

void check_entry(const std::string& path, const nlohmann::json& entry, const std::string& manifest_path) {
  std::error_code ec;
  MYRIAD_REQUIRE(fs::is_regular_file(path, ec), kFormat, path, ": listed in ", manifest_path,
                 " but missing (the checkpoint is incomplete)");
  const std::optional<FileKey> key = file_key(path, entry["xxh3"].get<std::string>());
  {
    std::lock_guard<std::mutex> lock(verified_mu);
    if (key && verified.count(*key)) return;
  }
  uint64_t bytes = 0;
  const std::string sum = file_checksum(path, &bytes);
  const uint64_t want = entry["bytes"].get<uint64_t>();
  MYRIAD_REQUIRE(bytes == want, kFormat, path, ": ", bytes, " bytes where ", manifest_path, " records ", want,
                 " (the file was truncated or replaced)");
  MYRIAD_REQUIRE(sum == entry["xxh3"].get<std::string>(), kFormat, path, ": checksum ", sum, " does not match ",
                 entry["xxh3"].get<std::string>(), " in ", manifest_path,
                 " (the file is damaged; restore it or use an earlier checkpoint)");
  std::lock_guard<std::mutex> lock(verified_mu);
  if (key) verified.insert(*key);
}

}  // namespace

void verify_checksum(const std::string& path) {
  const fs::path p = fs::absolute(path).lexically_normal();
  // The manifest of the file's directory, then of the one above (tokenizer/ inside a checkpoint).
  fs::path dir = p.parent_path();
  for (int up = 0; up < 2 && !dir.empty(); ++up, dir = dir.parent_path()) {
    const fs::path manifest = dir / kChecksumFile;
    std::error_code ec;
    if (!fs::is_regular_file(manifest, ec)) continue;
    const nlohmann::json m = read_manifest(manifest.string());
    const std::string rel = p.lexically_relative(dir).generic_string();
    const auto it = m["files"].find(rel);
    if (it == m["files"].end()) return;  // not listed: unchecked
    check_entry(p.string(), *it, manifest.string());
    return;
  }
}

bool verify_directory_checksums(const std::string& dir) {
  const fs::path manifest = fs::path(dir) / kChecksumFile;
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return false;
  const nlohmann::json m = read_manifest(manifest.string());
  for (const auto& [name, entry] : m["files"].items()) {
    const fs::path rel(name);
    MYRIAD_REQUIRE(rel.is_relative() && rel.lexically_normal().generic_string().rfind("..", 0) != 0, kFormat,
                   manifest.string(), ": files[\"", name, "\"] leaves the directory");
    check_entry((fs::path(dir) / rel).string(), entry, manifest.string());
  }
  return true;
}

}  // namespace myriad

// safetensors reader (mmap, full validation, zero-copy tensors) and writer (atomic). See safetensors.h.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_set>

#include "core/json_fields.h"
#include "io/atomic_file.h"
#include "io/checksums.h"

namespace myriad {

namespace {

using nlohmann::json;

// The dtypes the reader accepts and the writer emits (the safetensors spelling is dtype_name()).
constexpr DType kFileDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                                 DType::kI64, DType::kU8,   DType::kI8,  DType::kF8E8M0};

std::optional<DType> file_dtype(const std::string& name) {
  const auto d = dtype_from_name(name);
  if (!d) return std::nullopt;
  for (DType ok : kFileDTypes)
    if (*d == ok) return d;
  return std::nullopt;
}

bool is_file_dtype(DType dtype) {
  for (DType ok : kFileDTypes)
    if (dtype == ok) return true;
  return false;
}

std::string json_type(const json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a float";
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  return j.type_name();
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

namespace {

// A SAX pass over valid JSON that records the first key repeated within one object. Why not nlohmann's callback
// parser: its DOM callback made parsing quadratic in the number of entries (a 100,000-entry safetensors header:
// 380 s instead of ~0.1 s); the plain DOM parse and this pass are both linear.
struct DuplicateKeyFinder {
  using json_t = json;
  struct Frame {
    std::set<std::string> keys;  // ordered: no hash a crafted file could flood
    std::string name;
    bool object = false;
  };
  std::vector<Frame> stack;
  std::string last_key;
  std::optional<JsonDuplicateKey>* dup;

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    stack.push_back({{}, stack.empty() ? std::string() : last_key, true});
    return true;
  }
  bool key(json::string_t& k) {
    Frame& f = stack.back();
    int depth = 0;
    for (const Frame& g : stack) depth += g.object;
    if (!f.keys.insert(k).second && !dup->has_value()) *dup = JsonDuplicateKey{k, f.name, depth};
    last_key = k;
    return true;
  }
  bool end_object() {
    stack.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    stack.push_back({{}, last_key, false});
    return true;
  }
  bool end_array() {
    stack.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};

}  // namespace

json parse_json_checking_duplicates(std::string_view text, const std::string& source,
                                    std::optional<JsonDuplicateKey>* dup) {
  require_json_nesting(text, source, ErrorKind::kFormat);  // before any parse: copies and dump() recurse per level
  json j = json::parse(text.begin(), text.end());          // throws json::exception on invalid JSON
  DuplicateKeyFinder finder{{}, {}, dup};
  json::sax_parse(text.begin(), text.end(), &finder);
  return j;
}

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

int64_t SafetensorsEntry::numel() const {
  return shape_numel(shape);
}

uint64_t SafetensorsFile::file_bytes() const {
  return map_ ? uint64_t(map_->size) : 0;
}

const void* SafetensorsFile::mapping_data() const {
  return map_ ? map_->addr : nullptr;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  verify_checksum(path);  // a myriad checkpoint's file against its manifest (io/checksums.h); else unchecked

  // Open and map.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MYRIAD_REQUIRE(fd >= 0, kIo, "cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_error(ErrorKind::kIo, "cannot stat '", path, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(ErrorKind::kIo, "'", path, "' is not a regular file",
                S_ISDIR(st.st_mode) ? " (it is a directory)" : "");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw_error(ErrorKind::kFormat, path, ": file is ", size,
                " bytes, shorter than the 8-byte header length that starts a safetensors file");
  }
  // NOTE: private + writable + no swap reservation: copy-on-write pages for anyone who writes into a tensor,
  // the file itself is never modified, and mapping a file larger than RAM does not fail on accounting.
  void* addr = ::mmap(nullptr, size_t(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  MYRIAD_REQUIRE(addr != MAP_FAILED, kIo, "cannot mmap '", path, "' (", size, " bytes): ", std::strerror(map_err));
  f.map_ = std::make_shared<Mapping>();
  f.map_->addr = addr;
  f.map_->size = size_t(size);
  const auto* base = static_cast<const unsigned char*>(addr);

  // Header length and bounds.
  const uint64_t n = read_u64_le(base);
  MYRIAD_REQUIRE(n <= kSafetensorsMaxHeaderBytes, kFormat, path, ": header length ", n, " exceeds the limit of ",
                 kSafetensorsMaxHeaderBytes, " bytes");
  MYRIAD_REQUIRE(8 + n <= size, kFormat, path, ": header length ", n, " runs past the end of the file (", size,
                 " bytes, so at most ", size - 8, " bytes of header)");
  f.header_bytes_ = n;
  const uint64_t data_size = size - 8 - n;

  // Parse the JSON header.
  json header;
  std::optional<JsonDuplicateKey> dup;
  try {
    header = parse_json_checking_duplicates(std::string_view(reinterpret_cast<const char*>(base + 8), size_t(n)),
                                            path + ": header", &dup);
  } catch (const json::exception& e) {
    throw_error(ErrorKind::kFormat, path, ": header is not valid JSON: ", e.what());
  }
  if (dup) {
    if (dup->depth == 1 && dup->key == "__metadata__")
      throw_error(ErrorKind::kFormat, path, ": \"__metadata__\" appears twice in the header");
    if (dup->depth == 1)
      throw_error(ErrorKind::kFormat, path, ": duplicate tensor name '", dup->key, "' in the header");
    throw_error(ErrorKind::kFormat, path, ": duplicate key \"", dup->key, "\" inside \"", dup->parent,
                "\" in the header");
  }
  MYRIAD_REQUIRE(header.is_object(), kFormat, path, ": header must be a JSON object, got ", json_type(header));

  // Entries.
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      MYRIAD_REQUIRE(value.is_object(), kFormat, path, ": \"__metadata__\" must be an object of string -> string, got ",
                     json_type(value));
      for (const auto& [k, v] : value.items()) {
        MYRIAD_REQUIRE(v.is_string(), kFormat, path, ": \"__metadata__\" must map strings to strings, but key '", k,
                       "' holds ", json_type(v));
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = str(path, ": tensor '", name, "': ");
    MYRIAD_REQUIRE(value.is_object(), kFormat, where,
                   "entry must be an object with dtype, shape and data_offsets, got ", json_type(value));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      MYRIAD_REQUIRE(value.contains(key), kFormat, where, "missing \"", key, "\"");
    SafetensorsEntry e;
    e.name = name;

    const json& jd = value["dtype"];
    MYRIAD_REQUIRE(jd.is_string(), kFormat, where, "\"dtype\" must be a string, got ", json_type(jd));
    const auto dt = file_dtype(jd.get<std::string>());
    MYRIAD_REQUIRE(dt.has_value(), kFormat, where, "unknown dtype \"", jd.get<std::string>(),
                   "\" (supported: F32, BF16, F16, I32, I64, U8)");
    e.dtype = *dt;

    const json& js = value["shape"];
    MYRIAD_REQUIRE(js.is_array(), kFormat, where, "\"shape\" must be an array of integers, got ", json_type(js));
    for (const json& d : js) {
      MYRIAD_REQUIRE(d.is_number_integer(), kFormat, where, "\"shape\" must be an array of integers, but holds ",
                     json_type(d), " (", d.dump(), ")");
      if (d.is_number_unsigned()) {
        const uint64_t u = d.get<uint64_t>();
        MYRIAD_REQUIRE(u <= uint64_t(std::numeric_limits<int64_t>::max()), kFormat, where, "shape dimension ", u,
                       " is too large");
        e.shape.push_back(int64_t(u));
      } else {
        e.shape.push_back(d.get<int64_t>());
      }
    }
    for (int64_t d : e.shape)
      MYRIAD_REQUIRE(d >= 0, kFormat, where, "negative dimension ", d, " in shape ", shape_str(e.shape));

    const json& jo = value["data_offsets"];
    MYRIAD_REQUIRE(jo.is_array() && jo.size() == 2, kFormat, where,
                   "\"data_offsets\" must be an array of two integers [begin, end], got ", jo.dump());
    for (const json& o : jo)
      MYRIAD_REQUIRE(o.is_number_unsigned(), kFormat, where,
                     "\"data_offsets\" must hold two non-negative integers, got ", jo.dump());
    e.begin = jo[0].get<uint64_t>();
    e.end = jo[1].get<uint64_t>();
    MYRIAD_REQUIRE(e.begin <= e.end, kFormat, where, "data_offsets [", e.begin, ", ", e.end, "] begin after end");
    MYRIAD_REQUIRE(e.end <= data_size, kFormat, where, "data_offsets [", e.begin, ", ", e.end,
                   "] out of bounds: the data section holds ", data_size, " bytes");

    std::optional<uint64_t> numel = 1;
    for (int64_t d : e.shape) numel = numel ? checked_mul(*numel, uint64_t(d)) : std::nullopt;
    MYRIAD_REQUIRE(numel.has_value(), kFormat, where, "shape ", shape_str(e.shape), " overflows 64 bits");
    const auto bytes = dtype_bytes(e.dtype, *numel);
    MYRIAD_REQUIRE(bytes.has_value(), kFormat, where, "shape ", shape_str(e.shape), " x ", dtype_name(e.dtype),
                   " overflows 64 bits");
    MYRIAD_REQUIRE(*bytes == e.bytes(), kFormat, where, "shape ", shape_str(e.shape), " x ", dtype_name(e.dtype),
                   " is ", *bytes, " bytes, but data_offsets [", e.begin, ", ", e.end, "] span ", e.bytes(), " bytes");
    f.entries_.push_back(std::move(e));
  }

  // The byte ranges must tile the data section: sorted by offset, each begins where the previous ended.
  std::sort(f.entries_.begin(), f.entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t expect = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : f.entries_) {
    if (e.begin < expect)
      throw_error(ErrorKind::kFormat, path, ": tensor '", e.name, "' (data_offsets [", e.begin, ", ", e.end,
                  "]) overlaps tensor '", prev->name, "' (data_offsets [", prev->begin, ", ", prev->end, "])");
    if (e.begin > expect) {
      if (prev)
        throw_error(ErrorKind::kFormat, path, ": gap of ", e.begin - expect, " bytes between tensor '", prev->name,
                    "' (ends at ", expect, ") and tensor '", e.name, "' (begins at ", e.begin,
                    "); tensors must be packed");
      throw_error(ErrorKind::kFormat, path, ": gap of ", e.begin, " bytes before the first tensor '", e.name,
                  "' (begins at ", e.begin, "); tensors must be packed from offset 0");
    }
    expect = e.end;
    prev = &e;
  }
  if (expect != data_size) {
    if (prev)
      throw_error(ErrorKind::kFormat, path, ": ", data_size - expect, " trailing bytes after the last tensor '",
                  prev->name, "' (ends at ", expect, "; the data section holds ", data_size, " bytes)");
    throw_error(ErrorKind::kFormat, path, ": ", data_size, " trailing bytes after the header, which lists no tensors");
  }
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  return f;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  MYRIAD_REQUIRE(it != index_.end(), kFormat, path_, ": no tensor named '", name, "'");
  return entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  char* p = static_cast<char*>(map_->addr) + 8 + header_bytes_ + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % uintptr_t(dtype_block_bytes(e.dtype)) != 0) {
    // NOTE: misaligned for its element type (no alignment rule in the format): copy, see safetensors.h.
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.bytes() > 0) std::memcpy(t.raw_data(), p, size_t(e.bytes()));
    return t;
  }
  return Tensor::from_blob(p, e.shape, e.dtype, std::shared_ptr<const void>(map_));
}

std::string safetensors_header(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = j["__metadata__"];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorSpec& s : specs) {
    MYRIAD_REQUIRE(s.name != "__metadata__", kValue,
                   "safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    MYRIAD_REQUIRE(seen.insert(s.name).second, kValue, "safetensors: duplicate tensor name '", s.name, "'");
    MYRIAD_REQUIRE(is_file_dtype(s.dtype), kUnsupported, "safetensors: tensor '", s.name, "' has dtype ",
                   dtype_name(s.dtype), ", which safetensors files cannot hold (F32 BF16 F16 I32 I64 U8)");
    const int64_t numel = shape_numel(s.shape);
    const auto bytes = dtype_bytes(s.dtype, uint64_t(numel));
    MYRIAD_REQUIRE(bytes.has_value(), kShape, "safetensors: tensor '", s.name, "' of shape ", shape_str(s.shape),
                   " overflows");
    auto& t = j[s.name];
    t["dtype"] = dtype_name(s.dtype);
    t["shape"] = s.shape;
    t["data_offsets"] = {offset, offset + *bytes};
    offset += *bytes;
  }
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw_error(ErrorKind::kValue, "safetensors: a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void save_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                      const std::function<Tensor(size_t)>& produce,
                      const std::map<std::string, std::string>& metadata) {
  std::string header;
  try {
    header = safetensors_header(specs, metadata);
  } catch (const Error& e) {
    throw Error(e.kind(), str(path, ": ", e.what()));
  }
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));

  AtomicFileWriter w(path);
  w.write(len, 8);
  w.write(header);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    Tensor t = produce(i);
    MYRIAD_REQUIRE(t.defined(), kValue, path, ": tensor '", s.name, "' is undefined");
    MYRIAD_REQUIRE(t.device() == Device::kCPU, kUnsupported, path, ": tensor '", s.name, "' is on ",
                   device_name(t.device()), "; copy it to the cpu before saving");
    MYRIAD_REQUIRE(t.dtype() == s.dtype && t.shape() == s.shape, kValue, path, ": tensor '", s.name, "' is ",
                   dtype_name(t.dtype()), " ", shape_str(t.shape()), " but was declared ", dtype_name(s.dtype), " ",
                   shape_str(s.shape));
    t = t.contiguous();
    if (t.nbytes() > 0) w.write(t.raw_data(), t.nbytes());
  }
  w.commit();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    MYRIAD_REQUIRE(t.defined(), kValue, path, ": tensor '", name, "' is undefined");
    MYRIAD_REQUIRE(t.device() == Device::kCPU, kUnsupported, path, ": tensor '", name, "' is on ",
                   device_name(t.device()), "; copy it to the cpu before saving");
    specs.push_back({name, t.dtype(), t.shape()});
  }
  save_safetensors(
      path, specs, [&](size_t i) { return tensors[i].second; }, metadata);
}

}  // namespace myriad

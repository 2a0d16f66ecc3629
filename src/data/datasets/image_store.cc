// Prepared image-text data: see image_store.h.
#include "data/datasets/image_store.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/datasets/image_text_records.h"
#include "io/atomic_file.h"

namespace myriad {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string image_name(int64_t i) {
  return "image." + std::to_string(i);
}

// An image reference's encoded bytes: a data: URI's payload, or a file's bytes.
std::string reference_bytes(const std::string& ref, const std::string& what, const ImageLimits& limits) {
  if (ref.rfind("data:", 0) == 0) return image_bytes_from_url(ref, what, limits);
  return read_image_bytes(ref, limits);
}

}  // namespace

ImageStore ImageStore::open(const std::string& dir) {
  ImageStore s;
  s.file_ = SafetensorsFile::open((fs::path(dir) / kImageStoreFile).string());
  const auto& meta = s.file_.metadata();
  const auto f = meta.find("format");
  MYRIAD_REQUIRE(f != meta.end() && f->second == "myriad-image-store", kFormat, s.file_.path(),
                 ": not an image store (its metadata has no \"format\": \"myriad-image-store\")");
  for (int64_t i = 0; i < s.size(); ++i) {
    const SafetensorsEntry& e = s.file_.entries()[size_t(i)];
    MYRIAD_REQUIRE(e.name == image_name(i), kFormat, s.file_.path(), ": tensor ", i, " is '", e.name, "', expected '",
                   image_name(i), "' (images are stored in order)");
    MYRIAD_REQUIRE(e.dtype == DType::kU8 && e.shape.size() == 3 && e.shape[0] > 0 && e.shape[1] > 0 && e.shape[2] == 3,
                   kFormat, s.file_.path(), ": ", e.name, " must be u8 [height, width, 3], got ", dtype_name(e.dtype),
                   " ", shape_str(e.shape));
  }
  return s;
}

ImageSize ImageStore::size_of(int64_t index, const std::string& what) const {
  MYRIAD_REQUIRE(index >= 0 && index < size(), kValue, what, ": stored image ", index, " is not in ", file_.path(),
                 " (", size(), " images)");
  const SafetensorsEntry& e = file_.entries()[size_t(index)];
  return {e.shape[1], e.shape[0], "stored"};
}

Image ImageStore::image(int64_t index, const std::string& what) const {
  size_of(index, what);  // the index checked
  const SafetensorsEntry& e = file_.entries()[size_t(index)];
  Image im;
  im.height = e.shape[0];
  im.width = e.shape[1];
  const Tensor t = file_.tensor(e.name);  // a view of the mapping
  im.rgb.assign(t.data<uint8_t>(), t.data<uint8_t>() + e.bytes());
  return im;
}

bool is_prepared_image_text(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / kImageStoreFile, ec) &&
         fs::is_regular_file(fs::path(dir) / kImageTextRecordsFile, ec);
}

int64_t stored_image_index(const std::string& ref, const std::string& what) {
  const size_t n = std::strlen(kStoredImagePrefix);
  if (ref.compare(0, n, kStoredImagePrefix) != 0) return -1;
  const std::string digits = ref.substr(n);
  MYRIAD_REQUIRE(!digits.empty() && digits.size() <= 12 && digits.find_first_not_of("0123456789") == std::string::npos,
                 kFormat, what, ": '", ref, "' is not a stored image reference (stored:N)");
  return std::stoll(digits);
}

ImageTextPrepareResult prepare_image_text(const std::string& records_path, const std::string& dir, bool force,
                                          const ImageLimits& limits) {
  // Every record checked before anything is read or written.
  const std::vector<ImageTextRecord> records = read_image_text_records(records_path);
  for (const ImageTextRecord& rec : records)
    MYRIAD_REQUIRE(rec.videos.empty(), kFormat, rec.where,
                   ": a record with videos: data prepare stores images only; train on the records file itself");
  ImageTextPrepareResult r;
  r.records = int64_t(records.size());
  // Each distinct reference once, in order of first use; its size from its header (decoded once, while writing).
  std::map<std::string, int64_t> index_of;
  std::vector<std::string> refs, whats;
  std::vector<TensorSpec> specs;
  std::vector<std::vector<int64_t>> record_images(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    for (size_t k = 0; k < records[i].images.size(); ++k) {
      const std::string& ref = records[i].images[k];
      const std::string what = str(records[i].where, ": image ", k);
      MYRIAD_REQUIRE(stored_image_index(ref, what) < 0, kFormat, what, ": '", ref,
                     "' is already a stored image: prepare the original records");
      ++r.references;
      auto [it, added] = index_of.emplace(ref, int64_t(refs.size()));
      if (added) {
        ImageSize size;
        try {
          size = probe_image(reference_bytes(ref, what, limits), what, limits);
        } catch (const Error& e) {
          throw_error(ErrorKind::kFormat, what, ": ", e.what());
        }
        refs.push_back(ref);
        whats.push_back(what);
        specs.push_back({image_name(it->second), DType::kU8, {size.height, size.width, 3}});
        r.pixel_bytes += uint64_t(size.height * size.width * 3);
      }
      record_images[i].push_back(it->second);
    }
  }
  r.images = int64_t(refs.size());
  // The records with their references replaced, line by line as the reader numbers them.
  std::string out_records;
  {
    std::ifstream in(records_path, std::ios::binary);
    MYRIAD_REQUIRE(in, kIo, "cannot read the image-text file ", records_path);
    std::string line;
    size_t i = 0;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      MYRIAD_CHECK(i < records.size(), "more record lines than records in ", records_path);
      json j = json::parse(line);
      size_t k = 0;
      auto stored = [&] { return kStoredImagePrefix + std::to_string(record_images[i][k++]); };
      if (j.contains("messages")) {
        for (json& m : j["messages"])
          if (m.contains("content") && m["content"].is_array())
            for (json& part : m["content"])
              if (string_member(part, "type") == "image_url") part["image_url"]["url"] = stored();
      } else if (const auto images = j.find("images"); images != j.end()) {
        // A record of "videos": [] and no "images" has none to rewrite (j["images"] would write "images": null).
        for (json& im : *images) im = stored();
      }
      MYRIAD_CHECK(k == record_images[i].size(), records[i].where, ": ", k, " image references rewritten of ",
                   record_images[i].size());
      out_records += j.dump(-1, ' ', false, json::error_handler_t::strict) + "\n";
      ++i;
    }
    MYRIAD_CHECK(i == records.size(), "record lines and records of ", records_path, " differ");
  }
  // The directory: new or empty (or --force), removed again when anything below fails and it was made here.
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    MYRIAD_REQUIRE(force, kIo, "the output directory ", dir, " exists and is not empty (use --force to replace it)");
    MYRIAD_REQUIRE(fs::is_directory(dir, ec), kIo, dir, " is not a directory");
  }
  const bool made = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create ", dir, ": ", ec.message());
  try {
    save_safetensors((fs::path(dir) / kImageStoreFile).string(), specs,
                     [&](size_t i) {
                       Image im;
                       try {
                         im = decode_image(reference_bytes(refs[i], whats[i], limits), whats[i], limits);
                       } catch (const Error& e) {
                         throw_error(ErrorKind::kFormat, whats[i], ": ", e.what());
                       }
                       MYRIAD_REQUIRE(im.height == specs[i].shape[0] && im.width == specs[i].shape[1], kFormat,
                                      whats[i], ": decoded as ", im.width, " x ", im.height, " but its header says ",
                                      specs[i].shape[1], " x ", specs[i].shape[0]);
                       Tensor t = Tensor::empty(specs[i].shape, DType::kU8);
                       std::memcpy(t.data<uint8_t>(), im.rgb.data(), im.rgb.size());
                       return t;
                     },
                     {{"format", "myriad-image-store"}, {"images", std::to_string(specs.size())}});
    write_file_atomic((fs::path(dir) / kImageTextRecordsFile).string(), out_records);
  } catch (...) {
    if (made) fs::remove_all(dir, ec);
    throw;
  }
  return r;
}

}  // namespace myriad

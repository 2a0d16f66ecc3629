// Image-text data prepared for training (issue 14): `myriad data prepare --data RECORDS.jsonl --out DIR` decodes
// every image of the records once and writes
//
//   DIR/images.safetensors   the decoded images, one u8 tensor [height, width, 3] (RGB) per image, named
//                            "image.N" in order; metadata {"format": "myriad-image-store", "images": "COUNT"}
//   DIR/image_text.jsonl     the records as given, each image reference replaced by "stored:N" (the same file or
//                            data: URI given twice is stored once)
//
// Training on DIR (`myriad train --data DIR`) memory-maps the store: no image is decoded, and the training images'
// patches are made from the mapped pixels when an example is drawn (resizing and patching are the model's, so the
// store does not depend on it), which keeps their memory at the mapping's pages rather than every patch of the
// dataset. Both files are written atomically; `myriad inspect DIR/images.safetensors` lists the images.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/media/image.h"
#include "io/safetensors.h"

namespace myriad {

inline constexpr const char* kImageStoreFile = "images.safetensors";
inline constexpr const char* kImageTextRecordsFile = "image_text.jsonl";
inline constexpr const char* kStoredImagePrefix = "stored:";

class ImageStore {
 public:
  // Opens DIR/images.safetensors (kIo / kFormat naming the file; kFormat for a tensor that is not u8 [h, w, 3] or
  // a name out of order).
  static ImageStore open(const std::string& dir);
  int64_t size() const { return int64_t(file_.entries().size()); }
  // Image `index` (copied out of the mapping); kValue naming `what` for an index outside the store.
  Image image(int64_t index, const std::string& what) const;
  // Its size alone (read from the header; nothing copied).
  ImageSize size_of(int64_t index, const std::string& what) const;

 private:
  SafetensorsFile file_;
};

// Whether DIR holds prepared image-text data (both files above).
bool is_prepared_image_text(const std::string& dir);

// The index of a "stored:N" reference, or -1 for any other reference; kFormat naming `what` for a malformed one.
int64_t stored_image_index(const std::string& ref, const std::string& what);

struct ImageTextPrepareResult {
  int64_t records = 0, images = 0, references = 0;  // references: image references in the records
  uint64_t pixel_bytes = 0;
};

// Reads `records_path` (data/datasets/image_text_records.h; every record checked first), decodes its images under
// `limits` (kFormat naming the record and image for a bad one) and writes DIR as above. DIR must be new or empty unless
// `force`. Nothing is left in DIR when it fails.
ImageTextPrepareResult prepare_image_text(const std::string& records_path, const std::string& dir, bool force,
                                          const ImageLimits& limits = {});

}  // namespace myriad

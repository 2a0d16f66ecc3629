// IDX arrays (the format of MNIST: big-endian header, magic 0 0 TYPE NDIM, NDIM 32-bit sizes, then the
// values), plain or gzip-compressed (read through zlib, which passes plain files through). Unsigned-byte arrays
// only (type 0x08), which is what MNIST's images and labels are. And MNIST's pair of files as labelled images.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/media/image.h"

namespace myriad {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;  // row-major, prod(dims) of them
};

// One kFormat error naming the file for a bad magic, a type other than unsigned byte, a size over max_bytes, or
// fewer values than the header promises (a truncated file); kIo when it cannot be read.
IdxArray read_idx(const std::string& path, int64_t max_bytes = int64_t(1) << 30);

struct LabeledImages {
  std::vector<Image> images;  // grey expanded to RGB
  std::vector<int> labels;
};

// MNIST's images ([n, rows, cols]) and labels ([n], each 0..9) files; their counts must agree.
LabeledImages read_mnist(const std::string& images_path, const std::string& labels_path);

}  // namespace myriad

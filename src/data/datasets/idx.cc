// IDX reading (see idx.h), through zlib's gz* calls (Debian's zlib).
#include "data/datasets/idx.h"

#include <zlib.h>

#include <memory>

#include "core/error.h"

namespace myriad {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly n bytes or reports how many there were.
int64_t read_bytes(gzFile f, uint8_t* dst, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    const int chunk = int(std::min<int64_t>(n - got, int64_t(1) << 30));
    const int r = gzread(f, dst + got, unsigned(chunk));
    if (r <= 0) break;
    got += r;
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path, int64_t max_bytes) {
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  MYRIAD_REQUIRE(f != nullptr, kIo, path, ": cannot open IDX file");
  uint8_t head[4];
  MYRIAD_REQUIRE(read_bytes(f.get(), head, 4) == 4, kFormat, path, ": truncated IDX header (fewer than 4 bytes)");
  MYRIAD_REQUIRE(head[0] == 0 && head[1] == 0, kFormat, path, ": not an IDX file (magic starts ", int(head[0]), " ",
                 int(head[1]), ", expected 0 0)");
  MYRIAD_REQUIRE(head[2] == 0x08, kFormat, path, ": IDX value type 0x", std::hex, int(head[2]), std::dec,
                 " is not supported (unsigned byte, 0x08, only)");
  const int ndim = head[3];
  MYRIAD_REQUIRE(ndim >= 1, kFormat, path, ": IDX array with no dimensions");
  IdxArray a;
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    uint8_t b[4];
    MYRIAD_REQUIRE(read_bytes(f.get(), b, 4) == 4, kFormat, path, ": truncated IDX header (size of dimension ", d, ")");
    const int64_t n = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    a.dims.push_back(n);
    MYRIAD_REQUIRE(n == 0 || total <= max_bytes / n, kFormat, path, ": IDX array of more than ", max_bytes,
                   " bytes (the limit)");
    total *= n;
  }
  a.values.resize(size_t(total));
  const int64_t got = read_bytes(f.get(), a.values.data(), total);
  MYRIAD_REQUIRE(got == total, kFormat, path, ": truncated IDX file: the header promises ", total, " values, found ",
                 got);
  return a;
}

LabeledImages read_mnist(const std::string& images_path, const std::string& labels_path) {
  const IdxArray img = read_idx(images_path), lab = read_idx(labels_path);
  MYRIAD_REQUIRE(img.dims.size() == 3, kFormat, images_path, ": MNIST images must be [n, rows, cols], got ",
                 img.dims.size(), " dimensions");
  MYRIAD_REQUIRE(lab.dims.size() == 1, kFormat, labels_path, ": MNIST labels must be [n], got ", lab.dims.size(),
                 " dimensions");
  MYRIAD_REQUIRE(img.dims[0] == lab.dims[0], kFormat, images_path, " holds ", img.dims[0], " images but ", labels_path,
                 " ", lab.dims[0], " labels");
  const int64_t n = img.dims[0], h = img.dims[1], w = img.dims[2];
  LabeledImages out;
  out.images.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    MYRIAD_REQUIRE(lab.values[size_t(i)] <= 9, kFormat, labels_path, ": label ", i, " is ", int(lab.values[size_t(i)]),
                   ", not a digit 0..9");
    Image im;
    im.width = w;
    im.height = h;
    im.rgb.resize(size_t(w * h * 3));
    for (int64_t p = 0; p < w * h; ++p)
      for (int c = 0; c < 3; ++c) im.rgb[size_t(p * 3 + c)] = img.values[size_t(i * w * h + p)];
    out.images.push_back(std::move(im));
    out.labels.push_back(lab.values[size_t(i)]);
  }
  return out;
}

}  // namespace myriad

// Fuzz target: an IDX file (any bytes, plain or gzip) as MNIST's reader opens it, with a 1 MB cap; an accepted
// array must hold exactly the product of its dimensions in values.
#include <cstdint>

#include "data/datasets/idx.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("input.idx", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    const IdxArray a = read_idx(path, int64_t(1) << 20);
    int64_t n = 1;
    for (int64_t d : a.dims) n *= d;
    MYRIAD_CHECK(int64_t(a.values.size()) == n, "values ", a.values.size(), " for ", n);
  });
  return 0;
}

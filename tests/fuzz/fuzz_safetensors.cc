// Fuzz target: a safetensors file (any bytes), opened as a file and as a one-file checkpoint; every tensor of an
// accepted file is read to its last byte (so a range the validation let through that lies outside the mapping
// is an ASan report, not a silent read).
#include <cstdint>

#include "fuzz/support.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("input.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    const SafetensorsFile f = SafetensorsFile::open(path);
    uint64_t sum = 0;
    for (const SafetensorsEntry& e : f.entries()) {
      const Tensor t = f.tensor(e.name);
      const auto* bytes = static_cast<const uint8_t*>(t.raw_data());
      for (uint64_t i = 0; i < t.nbytes(); ++i) sum += bytes[i];
    }
    MYRIAD_CHECK(f.header_bytes() + 8 <= f.file_bytes(), "header past the file");
    (void)sum;
  });
  fuzz::expect_accept_or_error([&] {
    const Checkpoint c = Checkpoint::open(path);
    for (const std::string& name : c.names()) (void)c.shape(name);
  });
  return 0;
}

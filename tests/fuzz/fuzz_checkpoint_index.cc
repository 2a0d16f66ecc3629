// Fuzz target: model.safetensors.index.json (any bytes) in a directory that holds two valid shards, so that an
// index which parses is checked against real files (names mapped to the wrong shard, missing or extra tensors,
// paths leaving the directory, duplicate keys).
#include <cstdint>
#include <filesystem>

#include "fuzz/support.h"
#include "io/checkpoint.h"

using namespace myriad;

namespace {

const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/sharded";
    // Four small tensors, 48-byte shards: the writer splits them into model-0000i-of-00002 plus an index, which
    // each input then replaces.
    NamedTensors t{{"a.weight", Tensor::full({2, 3}, 1.0f)},
                   {"b.weight", Tensor::full({3}, 2.0f)},
                   {"c.weight", Tensor::full({2, 2}, 3.0f)},
                   {"d.bias", Tensor::full({1}, 4.0f)}};
    save_checkpoint(d, t, {{"format", "pt"}}, 40);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)checkpoint_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  fuzz::write_scratch("sharded/model.safetensors.index.json",
                      std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    const Checkpoint c = Checkpoint::open(dir);
    for (const std::string& name : c.names()) {
      const Tensor t = c.tensor(name);
      MYRIAD_CHECK(int64_t(t.nbytes()) == c.entry(name).numel() * 4, "tensor ", name, " has the wrong size");
    }
  });
  return 0;
}

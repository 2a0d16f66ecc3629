// `myriad bench longctx --config F [--context N] [--chunk T] [--cache q8] [--decode N] [--at LIST] [--dense]`: one
// synthetic prompt of N tokens (default 1,048,576) prefilled into a random-init model in chunks of T, with a
// progress line (tokens/s, ETA, cache bytes, RSS); at each length of LIST (default 1K,32K,256K,1M, those <= N) the
// time per decoded token (the median of `decode` steps on the same sequence, which then holds them too), with the
// steps of a fresh sequence of the first length interleaved with them (the ratio to it, measured over the same
// seconds: the target's "decode at 1M <= 2x decode at 1K") and, with --dense, the same steps by the same weights
// with dense MLA over the same caches (the decode cost dense attention would have at that context; its numbers
// differ, its work does not). Reported beside this machine's own limits:
// the STREAM triad bandwidth, and the time reading the whole latent cache once would take at it (the floor of any
// dense decode step). Then the prefill time, peak RSS and bytes per cached token. The prompt's tokens are a fixed
// pseudo-random stream: the costs do not depend on what the tokens say. A benchmark, not a test.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/machine_limits.h"

namespace myriad::bench {

struct LongctxBenchOptions {
  std::string config_path = "configs/tiny-longctx.json";
  int64_t context = int64_t(1) << 20;
  int64_t chunk = 4096;
  DType cache = DType::kQ8_0;
  int64_t decode = 16;      // decode steps timed at each length
  std::vector<int64_t> at;  // lengths where decode is timed (empty: 1K, 32K, 256K, 1M up to context)
  bool dense = false;       // also time dense MLA decode at each length
  double progress_every_s = 30.0;
};

nlohmann::ordered_json run_longctx_bench(const LongctxBenchOptions& opt, const MachineLimits& limits, std::FILE* out);

}  // namespace myriad::bench

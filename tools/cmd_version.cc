// `myriad version`: build facts a bug report needs.
#include <cstdio>

#include "cli.h"
#include "core/threads.h"
#include "ops/gemm_backend.h"

namespace {
int run_version(const myriad::cli::Args&) {
#ifdef MYRIAD_WITH_CUDA
  const char* cuda = "cuda backend compiled in";
#else
  const char* cuda = "cpu only";
#endif
  std::printf("myriad 0.1.0 (%s, %d threads)\n%s", cuda, myriad::num_threads(),
              myriad::ops::compute_paths("  ").c_str());
  return 0;
}
}  // namespace

MYRIAD_COMMAND("version", "print the version and build facts", "myriad version", {}, run_version);

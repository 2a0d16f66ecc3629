#include "core/threads.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

extern "C" void openblas_set_num_threads(int);

namespace myriad {

namespace {
int g_threads = 0;

// omp_get_num_procs() asks the kernel for the affinity mask on every call (a sched_getaffinity syscall, ~2% of a
// decode step, which asks for the thread count per product); the mask is read once.
int cores() {
  static const int n = omp_get_num_procs();
  return n;
}
}  // namespace

int num_threads() {
  return g_threads > 0 ? g_threads : cores();
}

void set_num_threads(int n) {
  g_threads = n > 0 ? n : cores();
  omp_set_num_threads(g_threads);
  openblas_set_num_threads(g_threads);
}

void init_threads_from_env() {
  const char* env = std::getenv("MYRIAD_THREADS");
  int n = 0;
  if (env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    MYRIAD_REQUIRE(end && *end == '\0' && v >= 0 && v <= 4096, kValue, "MYRIAD_THREADS=", env,
                   ": must be a whole number of threads (0 = all cores)");
    n = int(v);
  }
  set_num_threads(n);
}

}  // namespace myriad

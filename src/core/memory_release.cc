#include "core/memory_release.h"

#include <malloc.h>

#include "core/block_cache.h"

#if defined(MYRIAD_JEMALLOC)
#include <jemalloc/jemalloc.h>

#include <string>
// Weak: the executables link jemalloc; the Python module (python/) does not (a dlopen-ed libjemalloc cannot get its
// static TLS), and there mallctl is null and the process's own allocator is used.
#pragma weak mallctl

// jemalloc's options for every executable that links it (it reads this symbol at its start; a MALLOC_CONF
// environment variable still overrides them):
// - no purging by decay (dirty_decay_ms / muzzy_decay_ms -1). By default jemalloc returns freed pages over ~10 s and
//   large (>= 8 MiB) allocations at once, so each training step faulted its big tensors' pages back in (forward +
//   backward of configs/small.json: 53% -> 39% of sgemm). Freed memory is kept for reuse and given back where the
//   program chooses (release_free_memory: the serving engine when it goes idle).
// - thp:always: transparent huge pages on every mapping it makes (MADV_HUGEPAGE; Debian's kernels give them only
//   on request). Streaming weights through 4 KiB pages costs a page walk every 4 KiB: `bench serve` on
//   configs/small.json (Xeon model 167, 2 threads, two interleaved pairs of runs) decoded batch-1 f32 11-31% and
//   q8 18-34% faster with them (q4 unchanged), f32 prefill 9-20%.
extern "C" {
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,thp:always";
}
#endif

namespace myriad {

#if defined(MYRIAD_JEMALLOC)
namespace {
bool jemalloc_linked() {
  int (*const fn)(const char*, void*, size_t*, void*, size_t) = &mallctl;
  return fn != nullptr;
}
}  // namespace
#endif

void release_free_memory() {
  HostBlockCache::global().release_all();
  purge_allocator();
}

void purge_allocator() {
#if defined(MYRIAD_JEMALLOC)
  if (jemalloc_linked()) {
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty pages back to the system.
    const std::string purge = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
    mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
    return;
  }
#endif
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void release_thread_cache() {
#if defined(MYRIAD_JEMALLOC)
  if (jemalloc_linked()) mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
#endif
}

}  // namespace myriad

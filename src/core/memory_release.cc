#include "core/memory_release.h"

#include "core/block_cache.h"

#include <malloc.h>

#if defined(MYRIAD_JEMALLOC)
#include <jemalloc/jemalloc.h>

#include <string>
// Weak: the executables link jemalloc; the Python module (python/) does not (a dlopen-ed libjemalloc cannot get its
// static TLS), and there mallctl is null and the process's own allocator is used.
#pragma weak mallctl
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

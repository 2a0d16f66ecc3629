#include "core/memory_release.h"

#include "core/block_cache.h"

#if defined(MYRIAD_JEMALLOC)
#include <jemalloc/jemalloc.h>

#include <string>
#else
#include <malloc.h>
#endif

namespace myriad {

void release_free_memory() {
  HostBlockCache::global().release_all();
  purge_allocator();
}

void purge_allocator() {
#if defined(MYRIAD_JEMALLOC)
  // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty pages back to the system.
  const std::string purge = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
#elif defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void release_thread_cache() {
#if defined(MYRIAD_JEMALLOC)
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
#endif
}

}  // namespace myriad

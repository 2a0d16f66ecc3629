// Giving freed heap memory back to the operating system.
//
// The binaries link jemalloc (CMakeLists.txt) configured by `myriad` never to purge on its own
// (tools/myriad.cc: purging by decay made a training step fault its large tensors' pages back in every step,
// forward + backward 53% -> 39% of sgemm). A long-running process returns what it freed at moments it chooses
// instead: the serving engine when it goes idle after work, so that a server's memory returns to its idle level
// after a burst of requests.
#pragma once

namespace myriad {

// Releases the host tensor-block cache (core/block_cache.h) and purges the allocator's free pages (jemalloc:
// every arena; glibc: malloc_trim). Thread-safe; costs a few milliseconds after a large burst, nothing when idle.
void release_free_memory();

// Only the allocator part of release_free_memory(): purges the free pages of every arena, leaving the tensor-block
// cache to its owner (a thread that is not the engine's must not empty the cache the engine is reusing).
void purge_allocator();

// Gives the calling thread's allocator cache back to the shared arenas (jemalloc: thread.tcache.flush), so that a
// following release_free_memory() can return it. For threads about to end: what a thread caches is otherwise
// returned to the arenas at its exit, after any purge it could do.
void release_thread_cache();

}  // namespace myriad

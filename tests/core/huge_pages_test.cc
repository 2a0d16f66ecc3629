// The executables' allocator backs large buffers with transparent huge pages (core/memory_release.cc: jemalloc's
// thp:always), which the weight streams of decoding need; Debian's kernels give them only on request.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/memory_release.h"
#include "core/tensor.h"

namespace myriad {
namespace {

// AnonHugePages of this process, kB (-1 when the kernel does not report it).
int64_t anon_huge_kb() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream fields(line.substr(14));
      int64_t kb = -1;
      fields >> kb;
      return kb;
    }
  return -1;
}

TEST(HugePages, LargeTensorsGetThem) {
#if !defined(MYRIAD_JEMALLOC)
  GTEST_SKIP() << "built without jemalloc (the sanitizer builds bring their own allocator)";
#else
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (mode.empty() || mode.find("[never]") != std::string::npos) GTEST_SKIP() << "transparent huge pages are off";
  if (anon_huge_kb() < 0) GTEST_SKIP() << "the kernel does not report AnonHugePages";
  purge_allocator();  // also keeps memory_release.cc, which carries the allocator's options, in this binary
  const int64_t before = anon_huge_kb();
  const Tensor t = Tensor::zeros({int64_t(64) << 20});  // 256 MiB, every page touched by the zeroing
  const int64_t after = anon_huge_kb();
  // Most of it: the ends of the block need not fall on 2 MiB boundaries.
  EXPECT_GE(after - before, 200 * 1024) << "AnonHugePages " << before << " kB -> " << after << " kB";
#endif
}

}  // namespace
}  // namespace myriad

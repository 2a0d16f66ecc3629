// The op-case table (src/ops/op_cases.cc, what `myriad selfcheck` prints) on every device this machine has: each
// case passes on the CPU (no skips: the CPU has every kernel), and on CUDA where a GPU is present each case passes
// or is skipped for want of a kernel. Without a GPU the CUDA run is skipped.
#include "ops/op_cases.h"

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "ops/devices.h"

namespace myriad {
namespace {

void expect_all_pass(Device device, bool skips_allowed) {
  const std::vector<ops::SelfcheckLine> lines = ops::run_op_cases(device, nullptr);
  EXPECT_GE(lines.size(), 18u);
  for (const ops::SelfcheckLine& l : lines) {
    EXPECT_TRUE(l.ok) << device_name(device) << " " << l.op << ": " << l.failure;
    if (!skips_allowed) {
      EXPECT_FALSE(l.skipped) << l.op << ": " << l.failure;
    }
    if (l.ok && !l.skipped) {
      EXPECT_TRUE(l.fwd.present || l.bwd.present) << l.op << " compared nothing";
    }
  }
}

TEST(OpCases, EveryCaseOnTheCpuPasses) {
  expect_all_pass(Device::kCPU, false);
}

TEST(OpCases, EveryCaseOnCudaPassesOrHasNoKernel) {
  if (!ops::device_available(Device::kCUDA)) GTEST_SKIP() << "no usable CUDA device";
  ops::init_device(Device::kCUDA);
  expect_all_pass(Device::kCUDA, true);
}

}  // namespace
}  // namespace myriad

// `myriad selfcheck`: the quick kernel self-check (`make demo` runs it first). The op-case table of
// src/ops/op_cases.cc: every op of the kernel table on one moderate random shape, forward and backward, through the
// dispatched entry points on the chosen device, against the double-precision reference; one line per op; exit 1 if any
// op fails. The thorough harness is tests/ops.
#include <cstdio>

#include "cli.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timing.h"
#include "ops/devices.h"
#include "ops/gemm_backend.h"
#include "ops/op_cases.h"

namespace {

int run_selfcheck(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::ops;
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "selfcheck takes no arguments, got '", args.positional()[0], "'");
  const Device device = args.get_choice("device", "cpu", {"cpu", "cuda"}) == "cuda" ? Device::kCUDA : Device::kCPU;
  init_device(device);  // kUnsupported with the reason when there is no usable GPU
  std::printf(
      "myriad selfcheck: %s kernels (f32) against the double reference, %d threads\n"
      "  |err| = max |kernel - ref|; rel = max |kernel - ref| / max |ref|; pass: every element within atol + rtol "
      "|ref|,\n"
      "  finite, and no write past the output buffers; skip: no kernel for this device\n\n",
      device_name(device), myriad::num_threads());
  if (device == Device::kCPU) std::printf("%s\n", compute_paths("  ").c_str());
  print_selfcheck_header(stdout);
  const double t0 = now_seconds();
  const auto lines = run_op_cases(device, [](const SelfcheckLine& l) { print_selfcheck_line(stdout, l); });
  int failed = 0, skipped = 0;
  for (const auto& l : lines) failed += !l.ok, skipped += l.skipped;
  std::printf("\n%s: %zu ops, %d failed, %d skipped (%.2f s)\n", failed ? "FAIL" : "OK", lines.size(), failed, skipped,
              now_seconds() - t0);
  return failed ? 1 : 0;
}

}  // namespace

MYRIAD_COMMAND("selfcheck", "check every kernel of a device against the double-precision reference (a few seconds)",
               "myriad selfcheck [--device cpu|cuda]",
               {{"device", "cpu|cuda",
                 "the device whose kernels to check (default cpu; cuda needs a GPU build and a GPU)"}},
               run_selfcheck);

// `myriad selfcheck`: the quick kernel self-check (`make demo` runs it first). Every CPU op on one moderate
// random shape, forward and backward, against the double-precision reference; one line per op; exit 1 if
// any op fails. The checks live in src/bench/kernel_selfcheck.cc; the thorough harness is tests/ops.
#include <cstdio>

#include "bench/kernel_selfcheck.h"
#include "cli.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timing.h"

namespace {

int run_selfcheck(const myriad::cli::Args& args) {
  using namespace myriad;
  using namespace myriad::bench;
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "selfcheck takes no arguments, got '", args.positional()[0], "'");
  std::printf(
      "myriad selfcheck: CPU kernels (f32) against the double reference, %d threads\n"
      "  |err| = max |cpu - ref|; rel = max |cpu - ref| / max |ref|; pass: every element within atol + rtol |ref|,\n"
      "  finite, and no write past the output buffers\n\n",
      myriad::num_threads());
  print_selfcheck_header(stdout);
  const double t0 = now_seconds();
  const auto lines = run_kernel_selfcheck([](const SelfcheckLine& l) { print_selfcheck_line(stdout, l); });
  int failed = 0;
  for (const auto& l : lines) failed += !l.ok;
  std::printf("\n%s: %zu ops, %d failed (%.2f s)\n", failed ? "FAIL" : "OK", lines.size(), failed, now_seconds() - t0);
  return failed ? 1 : 0;
}

}  // namespace

MYRIAD_COMMAND("selfcheck", "check every CPU kernel against the double-precision reference (a few seconds)",
               "myriad selfcheck", {}, run_selfcheck);

// The quick kernel self-check (`myriad selfcheck`, run first by `make demo`): every CPU op of the kernel
// table on one moderate random shape, forward and backward (backward into non-zero gradients, so the
// accumulate convention is checked too), against the double-precision reference (ref::, templated on
// double), with sentinels around the outputs. One line per op: the largest absolute error, the relative
// error (largest absolute error / largest |reference| value), and the verdict against the op's stated
// tolerance, applied elementwise as |got - ref| <= atol + rtol |ref|.
// What it leaves out: odd and degenerate shapes, finite differences of the reference, error paths. Those
// are in the thorough harness, tests/ops/ops_test.cc, whose tolerances these repeat.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace myriad::bench {

struct SelfcheckLine {
  struct Side {
    bool present = false;
    double max_abs = 0.0;  // max |got - ref|
    double max_ref = 0.0;  // max |ref|
    double rel() const { return max_ref > 0.0 ? max_abs / max_ref : max_abs; }
  };
  std::string op;
  std::string shape;
  double rtol = 0.0, atol = 0.0;
  std::string reason;  // why this tolerance
  Side fwd, bwd;
  bool ok = true;
  std::string failure;  // the first failing output, when !ok
};

// Runs every op; on_line is called as each completes.
std::vector<SelfcheckLine> run_kernel_selfcheck(const std::function<void(const SelfcheckLine&)>& on_line);

void print_selfcheck_header(std::FILE* out);
void print_selfcheck_line(std::FILE* out, const SelfcheckLine& l);

}  // namespace myriad::bench

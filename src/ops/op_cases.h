// The op-case table: the ops of the kernel table (ops/kernels.h), each on one moderate random shape, run through
// the dispatched entry points on a given device (`myriad selfcheck [--device cuda]`, run first by `make demo`;
// tests/ops/op_cases_test.cc runs it on every device present), forward and backward (backward into non-zero gradients,
// so the accumulate convention is checked too), against the double-precision reference (ref::, templated on double),
// with sentinels around the outputs. One line per op: the largest absolute error, the relative error (largest absolute
// error / largest |reference| value), and the verdict against the op's stated tolerance, applied elementwise as |got -
// ref| <= atol + rtol |ref|. An op without a kernel for the device is reported as skipped, not failed. What the table
// leaves out: odd and degenerate shapes, finite differences of the reference, error paths; those are in the thorough
// harness, tests/ops/ops_test.cc, which uses the tolerances defined here.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace myriad::ops {

// Tolerances of a CPU f32 kernel against the double reference (|got - ref| <= atol + rtol |ref| elementwise):
//   kElem: elementwise ops: one f32 rounding plus fast_exp / fast_tanh error (< 2e-7 relative, amplified at most
//          ~10x through compositions such as SiTU-GLU) -> rtol 2e-6, atol 1e-6.
//   kRed:  ops with reductions over N (norms, softmax, GEMM, attention): f32 accumulation error grows like
//          sqrt(N) * 6e-8 with N up to ~4k, plus BLAS blocking order -> rtol 1e-4, atol 1e-4 on O(1) values.
constexpr double kElemRtol = 2e-6, kElemAtol = 1e-6;
constexpr double kRedRtol = 1e-4, kRedAtol = 1e-4;

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
  bool skipped = false;  // the device has no kernel for this op (ok stays true)
  std::string failure;   // the first failing output, when !ok; the reason when skipped
};

// Runs every case on `device` (its buffers allocated there); on_line is called as each completes.
std::vector<SelfcheckLine> run_op_cases(Device device, const std::function<void(const SelfcheckLine&)>& on_line);

void print_selfcheck_header(std::FILE* out);
void print_selfcheck_line(std::FILE* out, const SelfcheckLine& l);

}  // namespace myriad::ops

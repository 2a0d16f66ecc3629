// The op harness: for every op of src/ops/kernels.h, random shapes (odd and degenerate included), the CPU
// kernel (through its dispatched entry point ops::NAME(Device::kCPU, ...)) against the double-precision reference
// (forward and backward, with accumulation into non-zero gradients), sentinels around every output, and the
// reference backward against central finite differences. The one-shape-per-op table that `myriad selfcheck` runs
// on any device is src/ops/op_cases.cc (tests/ops/op_cases_test.cc).
//
// Tolerances (CPU f32 vs double reference): kElem and kRed, defined with their reasons in ops/op_cases.h, which
// the selfcheck table uses too; repeated at each use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "harness.h"
#include "ops/devices.h"
#include "ops/kernels.h"
#include "ops/op_cases.h"
#include "ops/ref/elementwise.h"
#include "ops/ref/linalg.h"
#include "ops/ref/misc.h"
#include "ops/ref/norm.h"
#include "ops/ref/sequence.h"
#include "ops/ref/softmax.h"

namespace myriad {
namespace {

using test::dot;
using test::expect_close;
using test::expect_grad_fd;
using test::f32_round;
using test::Guarded;
using test::random_vec;
using test::sz;
using test::to_f;
using test::Vec;

constexpr double kElemR = ops::kElemRtol, kElemA = ops::kElemAtol;  // the op-case table's (ops/op_cases.h)
constexpr double kRedR = ops::kRedRtol, kRedA = ops::kRedAtol;

// ---------------------------------------------------------------------------------------------- GEMM
TEST(OpGemm, MatchesReferenceAllTransposesBatchedAndDegenerate) {
  std::mt19937 rng(11);
  struct Case {
    int64_t M, N, K, batch;
  };
  for (Case c : {Case{1, 1, 1, 1}, Case{7, 5, 3, 1}, Case{33, 17, 65, 3}, Case{0, 4, 4, 1}, Case{4, 0, 4, 2},
                 Case{3, 4, 0, 1}, Case{64, 128, 96, 2}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N, ldc = c.N;
        const int64_t sa = c.M * c.K, sb = c.K * c.N, sc = c.M * c.N;
        Vec A = f32_round(random_vec(rng, sa * c.batch)), B = f32_round(random_vec(rng, sb * c.batch));
        Vec C0 = f32_round(random_vec(rng, sc * c.batch));
        Vec want = C0;
        ref::gemm<double>(ta, tb, c.M, c.N, c.K, 0.5, A.data(), lda, B.data(), ldb, 2.0, want.data(), ldc, c.batch, sa,
                          sb, sc);
        Guarded Ag(to_f(A)), Bg(to_f(B)), Cg(to_f(C0));
        ops::gemm(Device::kCPU, ta, tb, c.M, c.N, c.K, 0.5f, Ag.data(), lda, Bg.data(), ldb, 2.0f, Cg.data(), ldc,
                  c.batch, sa, sb, sc);
        // kRed: K-long f32 dot products.
        expect_close(Cg.values(), want, kRedR, kRedA, "gemm");
        EXPECT_TRUE(Cg.intact());
      }
  }
}

// ---------------------------------------------------------------------------------------------- unary
// The online-softmax pieces of MLA decode against plain loops: lengths around the two-register step, NaNs
// skipped by the max (as std::max skips them) wherever they sit, and the shifted exponentials with their sum.
TEST(OpOnlineSoftmax, MaxOfAndExpShiftedSumMatchPlainLoops) {
  std::mt19937 rng(12);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  for (int64_t n : {0, 1, 15, 16, 31, 32, 33, 64, 100, 257}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = n01(rng);
    for (int nan_at : {-1, 0, int(n) / 2}) {
      std::vector<float> y = x;
      if (nan_at >= 0 && nan_at < n) y[size_t(nan_at)] = std::numeric_limits<float>::quiet_NaN();
      float ref = -std::numeric_limits<float>::infinity();
      for (float v : y) ref = std::max(ref, v);
      EXPECT_EQ(ops::max_of(Device::kCPU, y.data(), n), ref) << "n " << n << " NaN at " << nan_at;
    }
    if (n == 0) continue;
    const float shift = *std::max_element(x.begin(), x.end());
    std::vector<float> e = x;
    const float sum = ops::exp_shifted_sum(Device::kCPU, e.data(), n, shift);
    double ref_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double r = std::exp(double(x[size_t(j)]) - shift);
      // fast_exp's own error (< 2e-7 relative) plus the rounding of its f32 argument x - shift (half an ulp of it,
      // which exp turns into a relative error of |x - shift| 2^-24).
      const double arg = std::abs(double(x[size_t(j)]) - shift);
      EXPECT_NEAR(e[size_t(j)], r, (2e-7 + arg * 0x1p-24 * 1.01) * r + 1e-30);
      ref_sum += r;
    }
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
  }
}

TEST(OpUnary, ForwardBackwardAllActivations) {
  std::mt19937 rng(12);
  for (Unary op : {Unary::kSiLU, Unary::kSigmoid, Unary::kTanh, Unary::kSoftplus}) {
    for (int64_t n : {0, 1, 7, 1000, 70001}) {
      // wide range, including saturation of sigmoid/tanh and the softplus switch at 20
      Vec x = f32_round(random_vec(rng, n, -30.0, 30.0)), dy = f32_round(random_vec(rng, n));
      Vec y(x.size()), dx0 = f32_round(random_vec(rng, n)), dx = dx0;
      ref::unary_forward<double>(op, y.data(), x.data(), n);
      ref::unary_backward<double>(op, dx.data(), dy.data(), x.data(), n);
      Guarded xg(to_f(x)), yg(sz(n)), dyg(to_f(dy)), dxg(to_f(dx0));
      ops::unary_forward(Device::kCPU, op, yg.data(), xg.data(), n);
      ops::unary_backward(Device::kCPU, op, dxg.data(), dyg.data(), xg.data(), n);
      // kElem; absolute floor scaled by |x| for SiLU/softplus whose outputs reach 30.
      expect_close(yg.values(), y, kElemR, 4 * kElemA, "unary forward");
      expect_close(dxg.values(), dx, kElemR, 4 * kElemA, "unary backward (accumulated)");
      EXPECT_TRUE(yg.intact() && dxg.intact());
    }
    // finite differences of the reference on moderate inputs
    Vec x = random_vec(rng, 40, -6.0, 6.0), dy = random_vec(rng, 40), dx(40, 0.0);
    ref::unary_backward<double>(op, dx.data(), dy.data(), x.data(), 40);
    expect_grad_fd(
        [&](const Vec& xx) {
          Vec yy(xx.size());
          ref::unary_forward<double>(op, yy.data(), xx.data(), 40);
          return dot(yy, dy);
        },
        x, dx, "unary d/dx");
  }
}

// ---------------------------------------------------------------------------------------------- binary
TEST(OpBinary, BroadcastingAddMul) {
  std::mt19937 rng(13);
  struct Case {
    std::vector<int64_t> shape, a_str, b_str;
    int64_t na, nb;
  };
  // [2,3,5] with b broadcast over rows ([5]), over the middle axis ([2,1,5]), a scalar, and a column ([2,3,1]).
  const std::vector<Case> cases = {{{2, 3, 5}, {15, 5, 1}, {15, 5, 1}, 30, 30},
                                   {{2, 3, 5}, {15, 5, 1}, {0, 0, 1}, 30, 5},
                                   {{2, 3, 5}, {15, 5, 1}, {5, 0, 1}, 30, 10},
                                   {{2, 3, 5}, {0, 0, 0}, {15, 5, 1}, 1, 30},
                                   {{2, 3, 5}, {15, 5, 1}, {3, 1, 0}, 30, 6},
                                   {{4, 0}, {0, 1}, {0, 1}, 0, 0},
                                   {{}, {}, {}, 1, 1}};
  for (const auto& c : cases)
    for (Binary op : {Binary::kAdd, Binary::kMul}) {
      Vec a = f32_round(random_vec(rng, c.na)), b = f32_round(random_vec(rng, c.nb));
      int64_t n = 1;
      for (auto d : c.shape) n *= d;
      Vec want(sz(n));
      ref::binary_forward<double>(op, want.data(), a.data(), c.a_str.data(), b.data(), c.b_str.data(), c.shape.data(),
                                  int(c.shape.size()));
      Guarded ag(to_f(a)), bg(to_f(b)), out(sz(n));
      ops::binary_forward(Device::kCPU, op, out.data(), ag.data(), c.a_str.data(), bg.data(), c.b_str.data(),
                          c.shape.data(), int(c.shape.size()));
      expect_close(out.values(), want, kElemR, kElemA, "binary");  // kElem: one f32 rounding
      EXPECT_TRUE(out.intact());
    }
}

// The backward of a broadcast against explicit nested loops over a [2, 3, 5] output: g of each broadcast shape
// receives every element of d whose coordinates it was broadcast to. Sums of at most 30 f32 values of O(1):
// rtol 1e-5 covers the f32 accumulation (the kernel sums in f32 in index order).
TEST(OpBroadcastReduce, SumsOverTheBroadcastAxesOnly) {
  std::mt19937 rng(14);
  const std::vector<int64_t> shape = {2, 3, 5};
  struct Case {
    std::vector<int64_t> g_shape, g_str;  // g at its own shape, and its strides at the output shape
  };
  for (const Case& c : {Case{{2, 3, 5}, {15, 5, 1}}, Case{{5}, {0, 0, 1}}, Case{{2, 1, 5}, {5, 0, 1}},
                        Case{{1}, {0, 0, 0}}, Case{{2, 3, 1}, {3, 1, 0}}, Case{{3, 1}, {0, 1, 0}}}) {
    int64_t ng = 1;
    for (int64_t d : c.g_shape) ng *= d;
    const Vec d = f32_round(random_vec(rng, 30)), g0 = f32_round(random_vec(rng, ng));
    Vec want = g0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 5; ++k)
          want[sz(i * c.g_str[0] + j * c.g_str[1] + k * c.g_str[2])] += d[sz(i * 15 + j * 5 + k)];
    Guarded g(to_f(g0)), dg(to_f(d));
    ops::broadcast_reduce_accumulate(Device::kCPU, g.data(), c.g_str.data(), dg.data(), shape.data(), 3);
    expect_close(g.values(), want, 1e-5, 1e-6, "broadcast_reduce_accumulate");
    EXPECT_TRUE(g.intact());
  }
}

// Strided rows copied or added exactly (no arithmetic but one f32 addition per element: exact comparison with the
// same f32 addition), the columns outside [0, cols) of the destination untouched.
TEST(OpCopyRows, CopiesAndAccumulatesAColumnBlock) {
  std::mt19937 rng(15);
  for (int64_t rows : {0, 1, 7, 300})
    for (bool accumulate : {false, true}) {
      const int64_t lds = 9, ldd = 13, cols = 4, c0 = 3;  // src columns [c0, c0 + cols) -> dst columns [5, 9)
      const Vec src = f32_round(random_vec(rng, rows * lds)), dst0 = f32_round(random_vec(rng, rows * ldd));
      std::vector<float> want = to_f(dst0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
          float& w = want[sz(r * ldd + 5 + j)];
          w = (accumulate ? w : 0.0f) + float(src[sz(r * lds + c0 + j)]);
        }
      Guarded s(to_f(src)), d(to_f(dst0));
      ops::copy_rows(Device::kCPU, d.data() + 5, ldd, s.data() + c0, lds, rows, cols, accumulate);
      EXPECT_EQ(d.values(), want) << "rows " << rows << " accumulate " << accumulate;
      EXPECT_TRUE(d.intact());
    }
}

// The dispatcher: an op without a kernel for the device names the op and the device (kUnsupported); an op with a
// CUDA kernel in a build or on a machine without CUDA is refused by the backend, never run on a host pointer.
TEST(OpDispatch, AMissingKernelNamesTheOpAndTheDevice) {
  std::vector<float> x(8, 1.0f), v(2);
  std::vector<int32_t> idx(2);
  try {
    ops::topk(Device::kCUDA, idx.data(), v.data(), x.data(), 1, 8, 2);
    ADD_FAILURE() << "topk on cuda did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("op 'topk' has no kernel for device cuda"), std::string::npos) << e.what();
  }
  if (!ops::device_available(Device::kCUDA)) {
    EXPECT_THROW(ops::scale(Device::kCUDA, x.data(), x.data(), 2.0f, 8), Error);
    EXPECT_EQ(x, std::vector<float>(8, 1.0f));  // nothing ran on the host buffer
  }
}

// ---------------------------------------------------------------------------------------------- RMSNorm
TEST(OpRmsNorm, PlainAndGatedMatchReferenceAndFiniteDifferences) {
  std::mt19937 rng(14);
  struct Case {
    int64_t rows, N;
  };
  for (bool gated : {false, true})
    for (Case c : {Case{0, 8}, Case{1, 1}, Case{3, 7}, Case{17, 64}, Case{5, 4097}, Case{300, 33}}) {
      const int64_t n = c.rows * c.N;
      Vec x = f32_round(random_vec(rng, n, -2, 2)), w = f32_round(random_vec(rng, c.N, 0.5, 1.5));
      Vec g = f32_round(random_vec(rng, n, -3, 3)), dy = f32_round(random_vec(rng, n));
      const double eps = 1e-6;
      const double* gp = gated ? g.data() : nullptr;
      Vec y(sz(n)), rstd(sz(c.rows));
      ref::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), gp, c.rows, c.N, eps);
      Vec dx0 = f32_round(random_vec(rng, n)), dw0 = f32_round(random_vec(rng, c.N)),
          dg0 = f32_round(random_vec(rng, n));
      Vec dx = dx0, dw = dw0, dg = dg0;
      ref::rmsnorm_backward<double>(dx.data(), dw.data(), dg.data(), dy.data(), x.data(), w.data(), gp, rstd.data(),
                                    c.rows, c.N);
      Guarded xg(to_f(x)), wg(to_f(w)), gg(to_f(g)), dyg(to_f(dy)), yg(sz(n)), rg(sz(c.rows));
      Guarded dxg(to_f(dx0)), dwg(to_f(dw0)), dgg(to_f(dg0));
      float* gf = gated ? gg.data() : nullptr;
      ops::rmsnorm_forward(Device::kCPU, yg.data(), rg.data(), xg.data(), wg.data(), gf, c.rows, c.N, float(eps));
      ops::rmsnorm_backward(Device::kCPU, dxg.data(), dwg.data(), gated ? dgg.data() : nullptr, dyg.data(), xg.data(),
                            wg.data(), gf, rg.data(), c.rows, c.N);
      // kRed: sum of squares over N; dw sums over rows.
      expect_close(yg.values(), y, kRedR, kRedA, "rmsnorm forward");
      expect_close(dxg.values(), dx, kRedR, kRedA, "rmsnorm dx");
      expect_close(dwg.values(), dw, kRedR, kRedA * 10, "rmsnorm dw");  // sums up to 300 rows of O(1) terms
      if (gated) expect_close(dgg.values(), dg, kRedR, kRedA, "rmsnorm dg");
      EXPECT_TRUE(yg.intact() && dxg.intact() && dwg.intact() && dgg.intact() && rg.intact());
      if (n == 0 || n > 600) continue;
      // finite differences of the reference, w.r.t. x, w and g
      Vec gx(sz(n), 0.0), gw(sz(c.N), 0.0), ggate(sz(n), 0.0);
      ref::rmsnorm_backward<double>(gx.data(), gw.data(), ggate.data(), dy.data(), x.data(), w.data(), gp, rstd.data(),
                                    c.rows, c.N);
      auto loss = [&](const Vec& xx, const Vec& ww, const Vec& gg2) {
        Vec yy(sz(n)), rr(sz(c.rows));
        ref::rmsnorm_forward<double>(yy.data(), rr.data(), xx.data(), ww.data(), gated ? gg2.data() : nullptr, c.rows,
                                     c.N, eps);
        return dot(yy, dy);
      };
      expect_grad_fd([&](const Vec& v) { return loss(v, w, g); }, x, gx, "rmsnorm d/dx");
      expect_grad_fd([&](const Vec& v) { return loss(x, v, g); }, w, gw, "rmsnorm d/dw");
      if (gated) expect_grad_fd([&](const Vec& v) { return loss(x, w, v); }, g, ggate, "rmsnorm d/dg");
    }
}

// ---------------------------------------------------------------------------------------------- L2 norm
TEST(OpL2Norm, MatchesReferenceAndFiniteDifferences) {
  std::mt19937 rng(15);
  for (auto [rows, N] : std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {1, 1}, {9, 64}, {4, 129}}) {
    const int64_t n = rows * N;
    Vec x = f32_round(random_vec(rng, n)), dy = f32_round(random_vec(rng, n));
    Vec y(sz(n)), rn(sz(rows)), dx(sz(n), 0.0);
    ref::l2norm_forward<double>(y.data(), rn.data(), x.data(), rows, N, 1e-6);
    ref::l2norm_backward<double>(dx.data(), dy.data(), y.data(), rn.data(), rows, N);
    Guarded xg(to_f(x)), yg(sz(n)), rg(sz(rows)), dyg(to_f(dy)), dxg(sz(n));
    ops::l2norm_forward(Device::kCPU, yg.data(), rg.data(), xg.data(), rows, N, 1e-6f);
    ops::l2norm_backward(Device::kCPU, dxg.data(), dyg.data(), yg.data(), rg.data(), rows, N);
    expect_close(yg.values(), y, kRedR, kRedA, "l2norm forward");  // kRed
    expect_close(dxg.values(), dx, kRedR, kRedA, "l2norm backward");
    EXPECT_TRUE(yg.intact() && dxg.intact());
    expect_grad_fd(
        [&](const Vec& xx) {
          Vec yy(sz(n)), rr(sz(rows));
          ref::l2norm_forward<double>(yy.data(), rr.data(), xx.data(), rows, N, 1e-6);
          return dot(yy, dy);
        },
        x, dx, "l2norm d/dx");
  }
}

// The AttnRes read: the reference's backward against central finite differences of its forward, w.r.t. every
// candidate and u (the op-case table checks the CPU kernel against this reference); one and four candidates, a
// row count that leaves threads uneven.
TEST(OpAttnResRead, ReferenceBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(16);
  for (auto [C, rows, N] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 3, 8}, {4, 5, 24}}) {
    const int64_t n = rows * N;
    std::vector<Vec> v;
    for (int64_t c = 0; c < C; ++c) v.push_back(f32_round(random_vec(rng, n)));
    Vec u = f32_round(random_vec(rng, N)), dout = f32_round(random_vec(rng, n)), du(sz(N), 0.0);
    std::vector<Vec> dv(sz(C), Vec(sz(n), 0.0));
    auto forward = [&](const std::vector<Vec>& vv, const Vec& uu) {
      std::vector<const double*> vp;
      for (const Vec& x : vv) vp.push_back(x.data());
      Vec out(sz(n)), p(sz(rows * C)), r(sz(rows * C));
      ref::attn_res_read_forward<double>(out.data(), p.data(), r.data(), vp.data(), C, rows, N, uu.data(), 1e-5);
      return std::make_tuple(out, p, r);
    };
    const auto [out, p, r] = forward(v, u);
    std::vector<const double*> vp;
    std::vector<double*> dvp;
    for (int64_t c = 0; c < C; ++c) vp.push_back(v[sz(c)].data()), dvp.push_back(dv[sz(c)].data());
    ref::attn_res_read_backward<double>(dvp.data(), du.data(), dout.data(), vp.data(), p.data(), r.data(), C, rows, N,
                                        u.data());
    for (int64_t c = 0; c < C; ++c)
      expect_grad_fd(
          [&](const Vec& x) {
            std::vector<Vec> vv = v;
            vv[sz(c)] = x;
            return dot(std::get<0>(forward(vv, u)), dout);
          },
          v[sz(c)], dv[sz(c)], "attn_res_read d/dv" + std::to_string(c));
    expect_grad_fd([&](const Vec& x) { return dot(std::get<0>(forward(v, x)), dout); }, u, du, "attn_res_read d/du");
  }
}

// ---------------------------------------------------------------------------------------------- SiTU-GLU
TEST(OpSituGlu, StridedForwardBackwardAndFiniteDifferences) {
  std::mt19937 rng(16);
  const SituParams p{4.0f, 25.0f};
  for (auto [rows, F] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {1, 1}, {5, 7}, {33, 130}}) {
    // g and u are the two halves of one fused [rows, 2F] projection (ld = 2F), as a model would lay them out.
    const int64_t ld = 2 * F;
    Vec gu = f32_round(random_vec(rng, rows * ld, -40, 40)), dy = f32_round(random_vec(rng, rows * F));
    Vec y(sz(rows * F)), dgu0 = f32_round(random_vec(rng, rows * ld)), dgu = dgu0;
    ref::situ_glu_forward<double>(y.data(), F, gu.data(), ld, gu.data() + F, ld, rows, F, p);
    ref::situ_glu_backward<double>(dgu.data(), ld, dgu.data() + F, ld, dy.data(), F, gu.data(), ld, gu.data() + F, ld,
                                   rows, F, p);
    Guarded gug(to_f(gu)), yg(sz(rows * F)), dyg(to_f(dy)), dgug(to_f(dgu0));
    ops::situ_glu_forward(Device::kCPU, yg.data(), F, gug.data(), ld, gug.data() + F, ld, rows, F, p);
    ops::situ_glu_backward(Device::kCPU, dgug.data(), ld, dgug.data() + F, ld, dyg.data(), F, gug.data(), ld,
                           gug.data() + F, ld, rows, F, p);
    // kElem, with atol scaled by the output bound b1*b2 = 100.
    expect_close(yg.values(), y, 1e-5, 1e-4, "situ forward");
    expect_close(dgug.values(), dgu, 1e-5, 1e-4, "situ backward");
    EXPECT_TRUE(yg.intact() && dgug.intact());
    // Bound: |y| <= b1 * b2 for any input (docs/design.md §1.5); inputs x1000.
    for (auto& v : gu) v *= 1000.0;
    ref::situ_glu_forward<double>(y.data(), F, gu.data(), ld, gu.data() + F, ld, rows, F, p);
    for (double v : y) EXPECT_LE(std::abs(v), 100.0 + 1e-9);
  }
  Vec gu = random_vec(rng, 2 * 12, -6, 6), dy = random_vec(rng, 12), dgu(24, 0.0);
  ref::situ_glu_backward<double>(dgu.data(), 12, dgu.data() + 6, 12, dy.data(), 6, gu.data(), 12, gu.data() + 6, 12, 2,
                                 6, p);
  expect_grad_fd(
      [&](const Vec& v) {
        Vec yy(12);
        ref::situ_glu_forward<double>(yy.data(), 6, v.data(), 12, v.data() + 6, 12, 2, 6, p);
        return dot(yy, dy);
      },
      gu, dgu, "situ d/d(g,u)");
}

// SiTU-GLU's SwiGLU limit (docs/design.md §1.5): as b1, b2 -> infinity, b1 tanh(g/b1) sigmoid(g) b2 tanh(u/b2) ->
// silu(g) u. activation_situ_linear_beta null (b2 = +infinity): the up projection unclamped, h(u) = u. Forward and both
// gradients against the formulas written out in double (not the reference kernel); a naive b2 tanh(u / b2) would
// give inf * 0 = NaN. kElem: one f32 evaluation of fast_tanh / fast_exp compositions.
TEST(OpSituGlu, InfiniteLinearBetaLeavesTheUpProjectionUnclamped) {
  std::mt19937 rng(27);
  const int64_t rows = 7, F = 33, n = rows * F;
  const double b1 = 4.0;
  const SituParams p{float(b1), std::numeric_limits<float>::infinity()};
  Vec g = f32_round(random_vec(rng, n, -8, 8)), u = f32_round(random_vec(rng, n, -30, 30));
  Vec dy = f32_round(random_vec(rng, n)), dg0 = f32_round(random_vec(rng, n)), du0 = f32_round(random_vec(rng, n));
  Vec y(sz(n)), dg = dg0, du = du0;
  for (int64_t i = 0; i < n; ++i) {
    const double gv = g[sz(i)], uv = u[sz(i)], t = std::tanh(gv / b1), s = 1.0 / (1.0 + std::exp(-gv));
    const double f = b1 * t * s, fprime = (1 - t * t) * s + b1 * t * s * (1 - s);
    y[sz(i)] = f * uv;
    dg[sz(i)] += dy[sz(i)] * fprime * uv;
    du[sz(i)] += dy[sz(i)] * f;
  }
  Guarded gg(to_f(g)), ug(to_f(u)), yg(sz(n)), dyg(to_f(dy)), dgg(to_f(dg0)), dug(to_f(du0));
  ops::situ_glu_forward(Device::kCPU, yg.data(), F, gg.data(), F, ug.data(), F, rows, F, p);
  ops::situ_glu_backward(Device::kCPU, dgg.data(), F, dug.data(), F, dyg.data(), F, gg.data(), F, ug.data(), F, rows, F,
                         p);
  // u reaches 30 and f ~ b1 = 4: outputs of O(100), so the absolute floor scales with them (kElem relative).
  expect_close(yg.values(), y, kElemR, 100 * kElemA, "situ(b2 = inf) forward");
  expect_close(dgg.values(), dg, kElemR, 100 * kElemA, "situ(b2 = inf) dg");
  expect_close(dug.values(), du, kElemR, 10 * kElemA, "situ(b2 = inf) du");
  // The double reference agrees with the formulas (it is what the op-case table and the model tests use).
  Vec yr(sz(n)), dgr = dg0, dur = du0;
  ref::situ_glu_forward<double>(yr.data(), F, g.data(), F, u.data(), F, rows, F, p);
  ref::situ_glu_backward<double>(dgr.data(), F, dur.data(), F, dy.data(), F, g.data(), F, u.data(), F, rows, F, p);
  for (int64_t i = 0; i < n; ++i) {  // in double: the same formulas, a few ulps apart
    EXPECT_NEAR(yr[sz(i)], y[sz(i)], 1e-12 * (1 + std::abs(y[sz(i)]))) << i;
    EXPECT_NEAR(dgr[sz(i)], dg[sz(i)], 1e-12 * (1 + std::abs(dg[sz(i)]))) << i;
    EXPECT_NEAR(dur[sz(i)], du[sz(i)], 1e-12 * (1 + std::abs(du[sz(i)]))) << i;
  }
}

// The GLU op (the FFNs of inference, the routed experts): SiTU-GLU against the double reference, SwiGLU against
// silu(g) u written out in double, both in place (y = g) as the inference model runs them. kElem: f32 rounding
// plus fast_exp / fast_tanh.
TEST(OpGlu, SituAndSwiGluInPlace) {
  std::mt19937 rng(28);
  const int64_t rows = 5, F = 37, n = rows * F;
  const Vec g = f32_round(random_vec(rng, n, -8, 8)), u = f32_round(random_vec(rng, n, -8, 8));
  const SituParams situ{4.0f, 25.0f};
  Vec want_situ(sz(n)), want_swiglu(sz(n));
  ref::situ_glu_forward<double>(want_situ.data(), F, g.data(), F, u.data(), F, rows, F, situ);
  for (int64_t i = 0; i < n; ++i) want_swiglu[sz(i)] = g[sz(i)] / (1.0 + std::exp(-g[sz(i)])) * u[sz(i)];
  for (GluKind kind : {GluKind::kSitu, GluKind::kSwiGlu}) {
    Guarded y(to_f(g)), ug(to_f(u));
    ops::glu_forward(Device::kCPU, GluParams{kind, situ}, y.data(), y.data(), ug.data(), rows, F);
    expect_close(y.values(), kind == GluKind::kSitu ? want_situ : want_swiglu, kElemR, 10 * kElemA, "glu_forward");
    EXPECT_TRUE(y.intact());
  }
}

TEST(OpSituGlu, LargeBetasGiveSwiGlu) {
  std::mt19937 rng(26);
  const int64_t n = 1000;
  Vec g = f32_round(random_vec(rng, n, -8, 8)), u = f32_round(random_vec(rng, n, -8, 8));
  Vec want(sz(n));
  for (int64_t i = 0; i < n; ++i) want[sz(i)] = g[sz(i)] / (1.0 + std::exp(-g[sz(i)])) * u[sz(i)];
  Guarded gg(to_f(g)), ug(to_f(u)), y(sz(n));
  ops::situ_glu_forward(Device::kCPU, y.data(), n, gg.data(), n, ug.data(), n, 1, n, SituParams{1e6f, 1e6f});
  // b = 1e6: the SiTU-SwiGLU gap is O(x^3 / b^2) ~ 1e-10; what remains is f32 rounding and fast_exp (kElem).
  expect_close(y.values(), want, 1e-5, 1e-5, "situ(b=1e6) vs swiglu");
}

// ---------------------------------------------------------------------------------------------- softmax
TEST(OpSoftmax, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(17);
  for (bool log : {false, true})
    for (auto [rows, N] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {1, 1}, {3, 17}, {8, 5000}}) {
      const int64_t n = rows * N;
      Vec x = f32_round(random_vec(rng, n, -20, 20)), dy = f32_round(random_vec(rng, n));
      Vec y(sz(n)), dx0 = f32_round(random_vec(rng, n)), dx = dx0;
      (log ? ref::log_softmax_forward<double> : ref::softmax_forward<double>)(y.data(), x.data(), rows, N);
      (log ? ref::log_softmax_backward<double> : ref::softmax_backward<double>)(dx.data(), dy.data(), y.data(), rows,
                                                                                N);
      Guarded xg(to_f(x)), yg(sz(n)), dyg(to_f(dy)), dxg(to_f(dx0));
      (log ? ops::log_softmax_forward : ops::softmax_forward)(Device::kCPU, yg.data(), xg.data(), rows, N);
      (log ? ops::log_softmax_backward : ops::softmax_backward)(Device::kCPU, dxg.data(), dyg.data(), yg.data(), rows,
                                                                N);
      expect_close(yg.values(), y, kRedR, kRedA, "softmax forward");  // kRed: sum of exps over N
      expect_close(dxg.values(), dx, kRedR, kRedA, "softmax backward");
      EXPECT_TRUE(yg.intact() && dxg.intact());
      if (n == 0 || n > 200) continue;
      Vec g(sz(n), 0.0);
      (log ? ref::log_softmax_backward<double> : ref::softmax_backward<double>)(g.data(), dy.data(), y.data(), rows, N);
      expect_grad_fd(
          [&](const Vec& xx) {
            Vec yy(sz(n));
            (log ? ref::log_softmax_forward<double> : ref::softmax_forward<double>)(yy.data(), xx.data(), rows, N);
            return dot(yy, dy);
          },
          x, g, "softmax d/dx");
    }
}

// ---------------------------------------------------------------------------------------------- conv1d
TEST(OpConv1d, CarriedStateForwardBackwardAndSplitEqualsWhole) {
  std::mt19937 rng(18);
  struct Case {
    int64_t B, T, C, W;
  };
  for (Case c : {Case{1, 1, 1, 1}, Case{2, 5, 3, 4}, Case{1, 3, 70, 4}, Case{3, 17, 130, 4}, Case{1, 2, 5, 10},
                 Case{1, 0, 4, 4}}) {
    const int64_t S = c.W - 1, nx = c.B * c.T * c.C, ns = c.B * S * c.C;
    Vec x = f32_round(random_vec(rng, nx)), w = f32_round(random_vec(rng, c.C * c.W)),
        st = f32_round(random_vec(rng, ns));
    Vec dy = f32_round(random_vec(rng, nx));
    for (bool with_state : {false, true}) {
      const double* sp = with_state ? st.data() : nullptr;
      Vec y(sz(nx)), so(sz(ns)), dx(sz(nx), 0.0), dw(sz(c.C * c.W), 0.0), ds(sz(ns), 0.0);
      ref::conv1d_forward<double>(y.data(), so.data(), x.data(), w.data(), sp, c.B, c.T, c.C, c.W);
      ref::conv1d_backward<double>(dx.data(), dw.data(), ds.data(), dy.data(), x.data(), w.data(), sp, c.B, c.T, c.C,
                                   c.W);
      Guarded xg(to_f(x)), wg(to_f(w)), sg(to_f(st)), yg(sz(nx)), sog(sz(ns)), dyg(to_f(dy));
      Guarded dxg(sz(nx)), dwg(sz(c.C * c.W)), dsg(sz(ns));
      float* spf = with_state ? sg.data() : nullptr;
      ops::conv1d_forward(Device::kCPU, yg.data(), sog.data(), xg.data(), wg.data(), spf, c.B, c.T, c.C, c.W);
      ops::conv1d_backward(Device::kCPU, dxg.data(), dwg.data(), dsg.data(), dyg.data(), xg.data(), wg.data(), spf, c.B,
                           c.T, c.C, c.W);
      expect_close(yg.values(), y, kElemR * 10, kElemA * 10, "conv forward");  // W-term sums
      expect_close(sog.values(), so, 0, 0, "conv state out");                  // a copy: exact
      expect_close(dxg.values(), dx, kElemR * 10, kElemA * 10, "conv dx");
      expect_close(dwg.values(), dw, kRedR, kRedA, "conv dw");  // kRed: sums over B*T
      if (with_state) expect_close(dsg.values(), ds, kElemR * 10, kElemA * 10, "conv dstate");
      EXPECT_TRUE(yg.intact() && sog.intact() && dxg.intact() && dwg.intact() && dsg.intact());
      if (nx > 400 || nx == 0) continue;
      auto loss = [&](const Vec& xx, const Vec& ww, const Vec& ss) {
        Vec yy(sz(nx));
        ref::conv1d_forward<double>(yy.data(), nullptr, xx.data(), ww.data(), with_state ? ss.data() : nullptr, c.B,
                                    c.T, c.C, c.W);
        return dot(yy, dy);
      };
      expect_grad_fd([&](const Vec& v) { return loss(v, w, st); }, x, dx, "conv d/dx");
      expect_grad_fd([&](const Vec& v) { return loss(x, v, st); }, w, dw, "conv d/dw");
      if (with_state) expect_grad_fd([&](const Vec& v) { return loss(x, w, v); }, st, ds, "conv d/dstate");
    }
    // Two pieces with the carried state = one piece (the decode/prefill invariant).
    if (c.T >= 2 && c.B == 1) {
      const int64_t t1 = c.T / 2;
      Guarded xg(to_f(x)), wg(to_f(w)), whole(sz(nx)), split(sz(nx)), mid(sz(ns));
      ops::conv1d_forward(Device::kCPU, whole.data(), nullptr, xg.data(), wg.data(), nullptr, 1, c.T, c.C, c.W);
      ops::conv1d_forward(Device::kCPU, split.data(), mid.data(), xg.data(), wg.data(), nullptr, 1, t1, c.C, c.W);
      ops::conv1d_forward(Device::kCPU, split.data() + t1 * c.C, nullptr, xg.data() + t1 * c.C, wg.data(), mid.data(),
                          1, c.T - t1, c.C, c.W);
      const auto a = whole.values(), b = split.values();
      expect_close(b, Vec(a.begin(), a.end()), 0, 1e-6, "conv split = whole");  // same sums, same order
    }
  }
}

// ---------------------------------------------------------------------------------------------- RoPE
TEST(OpRope, RotatedColumnsOnlyBothPairingsAndInverse) {
  std::mt19937 rng(19);
  struct Case {
    int64_t T, heads, N;
    RopeLayout l;
  };
  for (Case c : {Case{1, 1, 2, {0, 2, false}}, Case{5, 3, 24, {16, 8, false}}, Case{4, 2, 24, {16, 8, true}},
                 Case{7, 1, 64, {0, 64, false}}, Case{0, 2, 8, {0, 8, false}}}) {
    const int64_t n = c.T * c.heads * c.N, half = c.l.rot / 2;
    Vec x = f32_round(random_vec(rng, n)), dy = f32_round(random_vec(rng, n));
    Vec cs(sz(c.T * half)), sn(sz(c.T * half));
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double ang = double(t) * std::pow(10000.0, -2.0 * double(j) / double(c.l.rot));
        cs[sz(t * half + j)] = double(float(std::cos(ang)));
        sn[sz(t * half + j)] = double(float(std::sin(ang)));
      }
    Vec y(sz(n)), dx(sz(n), 0.0);
    ref::rope_forward<double>(y.data(), x.data(), cs.data(), sn.data(), c.T, c.heads, c.N, c.l);
    ref::rope_backward<double>(dx.data(), dy.data(), cs.data(), sn.data(), c.T, c.heads, c.N, c.l);
    Guarded xg(to_f(x)), yg(sz(n)), dyg(to_f(dy)), dxg(sz(n)), cg(to_f(cs)), sg(to_f(sn));
    ops::rope_forward(Device::kCPU, yg.data(), xg.data(), cg.data(), sg.data(), c.T, c.heads, c.N, c.l);
    ops::rope_backward(Device::kCPU, dxg.data(), dyg.data(), cg.data(), sg.data(), c.T, c.heads, c.N, c.l);
    expect_close(yg.values(), y, kElemR, kElemA, "rope forward");  // kElem
    expect_close(dxg.values(), dx, kElemR, kElemA, "rope backward");
    EXPECT_TRUE(yg.intact() && dxg.intact());
    // columns outside the rotated range pass through unchanged
    for (int64_t r = 0; r < c.T * c.heads; ++r)
      for (int64_t j = 0; j < c.N; ++j)
        if (j < c.l.col0 || j >= c.l.col0 + c.l.rot) {
          EXPECT_EQ(y[sz(r * c.N + j)], x[sz(r * c.N + j)]);
        }
    if (n > 0 && n <= 400)
      expect_grad_fd(
          [&](const Vec& xx) {
            Vec yy(sz(n));
            ref::rope_forward<double>(yy.data(), xx.data(), cs.data(), sn.data(), c.T, c.heads, c.N, c.l);
            return dot(yy, dy);
          },
          x, dx, "rope d/dx");
  }
}

// ---------------------------------------------------------------------------------------------- attention
TEST(OpAttention, TiledMatchesFullMatrixReferenceWithDifferentVWidthAndGqa) {
  std::mt19937 rng(20);
  for (AttentionShape s : {AttentionShape{1, 1, 1, 1, 1, 1, 1.0f}, AttentionShape{2, 7, 2, 2, 5, 3, 0.4f},
                           AttentionShape{1, 130, 4, 2, 24, 16, 0.2f}, AttentionShape{1, 200, 2, 1, 8, 12, 0.35f},
                           AttentionShape{1, 0, 2, 2, 4, 4, 0.5f}}) {
    const int64_t nq = s.B * s.T * s.H * s.Dk, nk = s.B * s.T * s.Hk * s.Dk, nv = s.B * s.T * s.Hk * s.Dv;
    const int64_t no = s.B * s.T * s.H * s.Dv, nl = s.B * s.H * s.T;
    Vec q = f32_round(random_vec(rng, nq, -2, 2)), k = f32_round(random_vec(rng, nk, -2, 2));
    Vec v = f32_round(random_vec(rng, nv)), dout = f32_round(random_vec(rng, no));
    Vec out(sz(no)), lse(sz(nl)), dq(sz(nq), 0.0), dk(sz(nk), 0.0), dv(sz(nv), 0.0);
    ref::attention_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    ref::attention_backward<double>(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                                    k.data(), v.data(), s);
    Guarded qg(to_f(q)), kg(to_f(k)), vg(to_f(v)), og(sz(no)), lg(sz(nl)), dog(to_f(dout));
    Guarded dqg(sz(nq)), dkg(sz(nk)), dvg(sz(nv));
    ops::attention_forward(Device::kCPU, og.data(), lg.data(), qg.data(), kg.data(), vg.data(), s);
    ops::attention_backward(Device::kCPU, dqg.data(), dkg.data(), dvg.data(), dog.data(), og.data(), lg.data(),
                            qg.data(), kg.data(), vg.data(), s);
    // kRed: T-long softmax sums and Dk/Dv dot products in f32.
    expect_close(og.values(), out, kRedR, kRedA, "attention out");
    expect_close(lg.values(), lse, kRedR, kRedA, "attention lse");
    expect_close(dqg.values(), dq, kRedR, kRedA, "attention dq");
    expect_close(dkg.values(), dk, kRedR, kRedA, "attention dk");
    expect_close(dvg.values(), dv, kRedR, kRedA, "attention dv");
    EXPECT_TRUE(og.intact() && lg.intact() && dqg.intact() && dkg.intact() && dvg.intact());
    if (s.T > 10 || s.T == 0) continue;
    auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
      Vec o(sz(no)), l(sz(nl));
      ref::attention_forward<double>(o.data(), l.data(), qq.data(), kk.data(), vv.data(), s);
      return dot(o, dout);
    };
    expect_grad_fd([&](const Vec& x) { return loss(x, k, v); }, q, dq, "attention d/dq");
    expect_grad_fd([&](const Vec& x) { return loss(q, x, v); }, k, dk, "attention d/dk");
    expect_grad_fd([&](const Vec& x) { return loss(q, k, x); }, v, dv, "attention d/dv");
  }
}

// ---------------------------------------------------------------------------------------------- cross-entropy
TEST(OpCrossEntropy, FusedChunkedMatchesFullLogitsWithIgnoreIndex) {
  std::mt19937 rng(21);
  struct Case {
    int64_t T, D, V;
  };
  for (Case c : {Case{1, 1, 1}, Case{5, 8, 11}, Case{37, 16, 3000}, Case{3, 4, 70000}, Case{0, 4, 5}}) {
    Vec h = f32_round(random_vec(rng, c.T * c.D)), W = f32_round(random_vec(rng, c.V * c.D));
    std::vector<int64_t> tgt(sz(c.T));
    std::uniform_int_distribution<int64_t> pick(0, c.V - 1);
    for (auto& t : tgt) t = pick(rng);
    if (c.T > 2) tgt[1] = -100;  // ignored position
    double loss = 0;
    Vec lse(sz(c.T)), dh(sz(c.T * c.D), 0.0), dW(sz(c.V * c.D), 0.0);
    const int64_t count =
        ref::cross_entropy_forward<double>(&loss, lse.data(), h.data(), W.data(), tgt.data(), c.T, c.D, c.V, -100);
    ref::cross_entropy_backward<double>(dh.data(), dW.data(), 1.5, h.data(), W.data(), tgt.data(), lse.data(), c.T, c.D,
                                        c.V, -100);
    Guarded hg(to_f(h)), Wg(to_f(W)), lg(sz(c.T)), dhg(sz(c.T * c.D)), dWg(sz(c.V * c.D));
    float lossf = -1;
    EXPECT_EQ(ops::cross_entropy_forward(Device::kCPU, &lossf, lg.data(), hg.data(), Wg.data(), tgt.data(), c.T, c.D,
                                         c.V, -100),
              count);
    ops::cross_entropy_backward(Device::kCPU, dhg.data(), dWg.data(), 1.5f, hg.data(), Wg.data(), tgt.data(), lg.data(),
                                c.T, c.D, c.V, -100);
    EXPECT_NEAR(lossf, loss, 1e-4 * std::max(1.0, std::abs(loss)));  // kRed: V-long sums of exps
    expect_close(lg.values(), lse, kRedR, kRedA, "ce lse");
    expect_close(dhg.values(), dh, kRedR, kRedA, "ce dh");
    expect_close(dWg.values(), dW, kRedR, kRedA, "ce dW");
    EXPECT_TRUE(lg.intact() && dhg.intact() && dWg.intact());
    if (c.T * c.D > 64 || c.V > 100 || c.T == 0) continue;
    auto f = [&](const Vec& hh, const Vec& ww) {
      double l;
      Vec ls(sz(c.T));
      ref::cross_entropy_forward<double>(&l, ls.data(), hh.data(), ww.data(), tgt.data(), c.T, c.D, c.V, -100);
      return 1.5 * l;
    };
    expect_grad_fd([&](const Vec& x) { return f(x, W); }, h, dh, "ce d/dh");
    expect_grad_fd([&](const Vec& x) { return f(h, x); }, W, dW, "ce d/dW");
  }
  // A target outside the vocabulary is an error naming the position, not a crash.
  std::vector<float> h(4, 0.1f), W(12, 0.1f), lse(1);
  std::vector<int64_t> bad = {7};
  float l;
  EXPECT_THROW(ops::cross_entropy_forward(Device::kCPU, &l, lse.data(), h.data(), W.data(), bad.data(), 1, 4, 3, -100),
               Error);
}

// ---------------------------------------------------------------------------------------------- top-k
TEST(OpTopK, ValuesMatchAsSetsAndTiesGoToLowerIndex) {
  std::mt19937 rng(22);
  for (auto [rows, N, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {4, 10, 3}, {16, 896, 16}, {3, 5, 0}, {3, 5, 5}, {0, 8, 2}}) {
    Vec x = f32_round(random_vec(rng, rows * N));
    // Heavy ties: round to a coarse grid in half of the rows.
    for (int64_t r = 0; r < rows; r += 2)
      for (int64_t j = 0; j < N; ++j) x[sz(r * N + j)] = double(float(std::round(x[sz(r * N + j)] * 3) / 3));
    std::vector<int32_t> idx_ref(sz(rows * k)), idx(sz(rows * k));
    Vec val_ref(sz(rows * k));
    std::vector<float> val(sz(rows * k));
    ref::topk<double>(idx_ref.data(), val_ref.data(), x.data(), rows, N, k);
    const auto xf = to_f(x);
    ops::topk(Device::kCPU, idx.data(), val.data(), xf.data(), rows, N, k);
    for (int64_t r = 0; r < rows; ++r) {
      // as sets (ties are legal in any order in general) ...
      std::set<int32_t> a(idx.begin() + r * k, idx.begin() + (r + 1) * k),
          b(idx_ref.begin() + r * k, idx_ref.begin() + (r + 1) * k);
      EXPECT_EQ(a, b) << "row " << r;
      // ... and, by myriad's documented rule (lower index wins a tie, descending order), exactly.
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(idx[sz(r * k + j)], idx_ref[sz(r * k + j)]);
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(double(val[sz(r * k + j)]), val_ref[sz(r * k + j)]);
    }
  }
  std::vector<float> x(4);
  std::vector<int32_t> i(8);
  EXPECT_THROW(ops::topk(Device::kCPU, i.data(), x.data(), x.data(), 1, 4, 5), Error);  // k > N
}

// ---------------------------------------------------------------------------------------------- gather/scatter
TEST(OpGatherScatter, PermutationRoundTripRepeatedIndicesAndWeights) {
  std::mt19937 rng(23);
  for (auto [m, n, N] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {10, 25, 7}, {64, 300, 130}, {5, 0, 4}, {3, 4000, 16}}) {
    Vec src = f32_round(random_vec(rng, m * N)), upd = f32_round(random_vec(rng, n * N)),
        w = f32_round(random_vec(rng, n));
    std::vector<int32_t> idx(sz(n));
    std::uniform_int_distribution<int32_t> pick(0, int32_t(m - 1));
    for (auto& i : idx) i = pick(rng);  // repeats are likely: they must be summed
    Vec g(sz(n * N));
    ref::gather_rows<double>(g.data(), src.data(), idx.data(), n, m, N);
    Guarded sg(to_f(src)), gg(sz(n * N));
    ops::gather_rows(Device::kCPU, gg.data(), sg.data(), idx.data(), n, m, N);
    expect_close(gg.values(), g, 0, 0, "gather");  // a copy: exact
    for (bool weighted : {false, true}) {
      Vec dst0 = f32_round(random_vec(rng, m * N)), dst = dst0;
      ref::scatter_add_rows<double>(dst.data(), upd.data(), idx.data(), weighted ? w.data() : nullptr, n, m, N);
      Guarded dg(to_f(dst0)), ug(to_f(upd)), wg(to_f(w));
      ops::scatter_add_rows(Device::kCPU, dg.data(), ug.data(), idx.data(), weighted ? wg.data() : nullptr, n, m, N);
      expect_close(dg.values(), dst, kRedR, kRedA, "scatter_add");  // sums of up to ~1300 repeats
      // backward of the weighted scatter
      Vec ddst = f32_round(random_vec(rng, m * N)), dsrc(sz(n * N), 0.0), dw(sz(n), 0.0);
      ref::scatter_add_rows_backward<double>(dsrc.data(), dw.data(), ddst.data(), upd.data(), idx.data(),
                                             weighted ? w.data() : nullptr, n, m, N);
      Guarded ddg(to_f(ddst)), dsg(sz(n * N)), dwg(sz(n));
      ops::scatter_add_rows_backward(Device::kCPU, dsg.data(), dwg.data(), ddg.data(), ug.data(), idx.data(),
                                     weighted ? wg.data() : nullptr, n, m, N);
      expect_close(dsg.values(), dsrc, kElemR, kElemA, "scatter dsrc");
      expect_close(dwg.values(), dw, kRedR, kRedA, "scatter dw");
      EXPECT_TRUE(dg.intact() && dsg.intact() && dwg.intact());
      if (n * N > 300 || n == 0) continue;
      auto loss = [&](const Vec& u, const Vec& ww) {
        Vec d = dst0;
        ref::scatter_add_rows<double>(d.data(), u.data(), idx.data(), weighted ? ww.data() : nullptr, n, m, N);
        return dot(d, ddst);
      };
      expect_grad_fd([&](const Vec& x) { return loss(x, w); }, upd, dsrc, "scatter d/dsrc");
      if (weighted) expect_grad_fd([&](const Vec& x) { return loss(upd, x); }, w, dw, "scatter d/dw");
    }
  }
  std::vector<float> a(8), b(8);
  std::vector<int32_t> bad = {0, 2};
  EXPECT_THROW(ops::gather_rows(Device::kCPU, a.data(), b.data(), bad.data(), 2, 2, 4), Error);  // index 2 of 2 rows
  EXPECT_THROW(ops::scatter_add_rows(Device::kCPU, a.data(), b.data(), bad.data(), nullptr, 2, 2, 4), Error);
}

// ---------------------------------------------------------------------------------------------- embedding
TEST(OpEmbedding, LookupAndScatterBackward) {
  std::mt19937 rng(24);
  const int64_t V = 50, D = 9, T = 40;
  Vec table = f32_round(random_vec(rng, V * D)), dout = f32_round(random_vec(rng, T * D));
  std::vector<int64_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[sz(t)] = (t * 7) % 13;  // repeated ids
  Vec out(sz(T * D)), dt(sz(V * D), 0.0);
  ref::embedding_forward<double>(out.data(), table.data(), ids.data(), T, V, D);
  ref::embedding_backward<double>(dt.data(), dout.data(), ids.data(), T, V, D);
  Guarded tg(to_f(table)), og(sz(T * D)), dog(to_f(dout)), dtg(sz(V * D));
  ops::embedding_forward(Device::kCPU, og.data(), tg.data(), ids.data(), T, V, D);
  ops::embedding_backward(Device::kCPU, dtg.data(), dog.data(), ids.data(), T, V, D);
  expect_close(og.values(), out, 0, 0, "embedding");  // a copy: exact
  expect_close(dtg.values(), dt, kElemR, kElemA, "embedding backward");
  EXPECT_TRUE(og.intact() && dtg.intact());
  expect_grad_fd(
      [&](const Vec& tab) {
        Vec o(sz(T * D));
        ref::embedding_forward<double>(o.data(), tab.data(), ids.data(), T, V, D);
        return dot(o, dout);
      },
      table, dt, "embedding d/dtable");
  std::vector<int64_t> bad = {V};
  EXPECT_THROW(ops::embedding_forward(Device::kCPU, og.data(), tg.data(), bad.data(), 1, V, D), Error);
}

// ---------------------------------------------------------------------------------------------- AdamW
TEST(OpAdamW, MatchesReferenceOverSeveralSteps) {
  std::mt19937 rng(25);
  for (int64_t n : {0, 1, 33, 100000}) {
    Vec p = f32_round(random_vec(rng, n)), m(sz(n), 0.0), v(sz(n), 0.0);
    Guarded pg(to_f(p)), mg(sz(n)), vg(sz(n));
    for (int64_t step = 1; step <= 5; ++step) {
      Vec g = f32_round(random_vec(rng, n));
      const AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
      ref::adamw_update<double>(p.data(), g.data(), m.data(), v.data(), n, hp);
      const auto gf = to_f(g);
      ops::adamw_update(Device::kCPU, pg.data(), gf.data(), mg.data(), vg.data(), n, hp);
    }
    // f32 state over 5 steps; the update divides by sqrt(v), so relative error ~1e-6 per step.
    expect_close(pg.values(), p, 1e-5, 1e-6, "adamw p");
    expect_close(mg.values(), m, 1e-5, 1e-7, "adamw m");
    expect_close(vg.values(), v, 1e-5, 1e-8, "adamw v");
    EXPECT_TRUE(pg.intact() && mg.intact() && vg.intact());
  }
}

}  // namespace
}  // namespace myriad

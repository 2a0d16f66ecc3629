#include "ops/op_cases.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/block_quant.h"
#include "ops/kernels.h"
#include "ops/ref/elementwise.h"
#include "ops/ref/kda.h"
#include "ops/ref/linalg.h"
#include "ops/ref/misc.h"
#include "ops/ref/norm.h"
#include "ops/ref/sequence.h"
#include "ops/ref/softmax.h"

namespace myriad::ops {

namespace {

constexpr double kElemR = kElemRtol, kElemA = kElemAtol;
constexpr double kRedR = kRedRtol, kRedA = kRedAtol;

using Vec = std::vector<double>;

size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

// Random inputs rounded to f32, so the reference (double) and the kernel (float) see the same numbers.
Vec rnd(std::mt19937& rng, int64_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(sz(n));
  for (auto& x : v) x = double(float(d(rng)));
  return v;
}

// A sentinel-guarded f32 buffer on the device under test: a kernel writing past either end of its output is a
// failure. On the CPU the host vector itself; elsewhere a device copy of it (sentinels included), read back by
// download() before a comparison.
class Buf {
 public:
  Buf(const Vec& v, Device device) : b_(v.size() + 2 * kPad, kSentinel) {
    std::transform(v.begin(), v.end(), b_.begin() + kPad, [](double x) { return float(x); });
    upload(device);
  }
  Buf(int64_t n, Device device) : b_(sz(n) + 2 * kPad, kSentinel) {
    std::fill(b_.begin() + kPad, b_.end() - kPad, 0.0f);
    upload(device);
  }
  float* data() { return (on_device_.defined() ? static_cast<float*>(on_device_.raw_data()) : b_.data()) + kPad; }
  size_t size() const { return b_.size() - 2 * kPad; }
  float operator[](size_t i) const { return b_[kPad + i]; }
  void download() const {
    if (!on_device_.defined()) return;
    const Tensor host = on_device_.to(Device::kCPU);
    std::copy(host.data<float>(), host.data<float>() + b_.size(), b_.begin());
  }
  bool intact() const {
    for (size_t i = 0; i < kPad; ++i)
      if (b_[i] != kSentinel || b_[b_.size() - 1 - i] != kSentinel) return false;
    return true;
  }

 private:
  void upload(Device device) {
    if (device != Device::kCPU) on_device_ = Tensor::from_vector(b_, {int64_t(b_.size())}).to(device);
  }
  static constexpr size_t kPad = 16;
  static constexpr float kSentinel = -12345.678f;
  mutable std::vector<float> b_;
  Tensor on_device_;
};

class Check {
 public:
  Check(std::string op, std::string shape, double rtol, double atol, std::string reason) {
    l_.op = std::move(op);
    l_.shape = std::move(shape);
    l_.rtol = rtol;
    l_.atol = atol;
    l_.reason = std::move(reason);
  }
  void fwd(const std::string& what, const Buf& got, const Vec& want) { compare(l_.fwd, what, got, want); }
  void bwd(const std::string& what, const Buf& got, const Vec& want) { compare(l_.bwd, what, got, want); }
  void fail(const std::string& why) {
    if (l_.ok) l_.failure = why;
    l_.ok = false;
  }
  SelfcheckLine line() const { return l_; }

 private:
  void compare(SelfcheckLine::Side& side, const std::string& what, const Buf& got, const Vec& want) {
    side.present = true;
    got.download();
    if (got.size() != want.size()) return fail(what + ": size mismatch");
    if (!got.intact()) fail(what + ": wrote past its buffer");
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = double(got[i]), d = std::abs(g - want[i]);
      if (!std::isfinite(g)) return fail(what + ": non-finite value at element " + std::to_string(i));
      side.max_abs = std::max(side.max_abs, d);
      side.max_ref = std::max(side.max_ref, std::abs(want[i]));
      if (d > l_.atol + l_.rtol * std::abs(want[i]))
        fail(what + ": element " + std::to_string(i) + " got " + std::to_string(g) + " want " +
             std::to_string(want[i]));
    }
  }
  SelfcheckLine l_;
};

// ------------------------------------------------------------------------------------------------ ops

Check check_gemm(Device d, std::mt19937& rng) {
  // Forward C = alpha A B + beta C (all four transpose pairs); backward products dA += dC B^T, dB += A^T dC.
  const int64_t M = 64, N = 80, K = 96;
  Check c("gemm", "M64 N80 K96, 4 transposes", kRedR, kRedA, "kRed: K-long f32 dots, BLAS order");
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      Vec A = rnd(rng, M * K), B = rnd(rng, K * N), C0 = rnd(rng, M * N), want = C0;
      ref::gemm<double>(ta, tb, M, N, K, 0.5, A.data(), lda, B.data(), ldb, 2.0, want.data(), N);
      Buf Ab(A, d), Bb(B, d), Cb(C0, d);
      ops::gemm(d, ta, tb, M, N, K, 0.5f, Ab.data(), lda, Bb.data(), ldb, 2.0f, Cb.data(), N);
      c.fwd("C", Cb, want);
    }
  Vec A = rnd(rng, M * K), B = rnd(rng, K * N), dC = rnd(rng, M * N), dA0 = rnd(rng, M * K), dB0 = rnd(rng, K * N);
  Vec dA = dA0, dB = dB0;
  ref::gemm<double>(false, true, M, K, N, 1.0, dC.data(), N, B.data(), N, 1.0, dA.data(), K);
  ref::gemm<double>(true, false, K, N, M, 1.0, A.data(), K, dC.data(), N, 1.0, dB.data(), N);
  Buf Ab(A, d), Bb(B, d), dCb(dC, d), dAb(dA0, d), dBb(dB0, d);
  ops::gemm(d, false, true, M, K, N, 1.0f, dCb.data(), N, Bb.data(), N, 1.0f, dAb.data(), K);
  ops::gemm(d, true, false, K, N, M, 1.0f, Ab.data(), K, dCb.data(), N, 1.0f, dBb.data(), N);
  c.bwd("dA", dAb, dA);
  c.bwd("dB", dBb, dB);
  return c;
}

Check check_unary(Device d, std::mt19937& rng) {
  const int64_t n = 4099;
  Check c("unary", "silu sigmoid tanh softplus gelu_tanh gelu, n4099", kElemR, 4 * kElemA,
          "kElem; atol x4: silu/softplus/gelu outputs reach 30");
  for (Unary op : {Unary::kSiLU, Unary::kSigmoid, Unary::kTanh, Unary::kSoftplus, Unary::kGeluTanh, Unary::kGelu}) {
    // a wide range: saturation of sigmoid / tanh, and softplus's switch at 20
    Vec x = rnd(rng, n, -30, 30), dy = rnd(rng, n), dx0 = rnd(rng, n), y(sz(n)), dx = dx0;
    ref::unary_forward<double>(op, y.data(), x.data(), n);
    ref::unary_backward<double>(op, dx.data(), dy.data(), x.data(), n);
    Buf xb(x, d), yb(n, d), dyb(dy, d), dxb(dx0, d);
    ops::unary_forward(d, op, yb.data(), xb.data(), n);
    ops::unary_backward(d, op, dxb.data(), dyb.data(), xb.data(), n);
    c.fwd("y", yb, y);
    c.bwd("dx", dxb, dx);
  }
  return c;
}

Check check_binary(Device d, std::mt19937& rng) {
  // [8, 33, 65]: b broadcast over the middle axis ([8, 1, 65]); then scale and axpy (y = 0.5 x; y += -1.5 x).
  const std::vector<int64_t> shape = {8, 33, 65}, as = {33 * 65, 65, 1}, bs = {65, 0, 1};
  const int64_t n = 8 * 33 * 65;
  Check c("binary/scale/axpy", "[8,33,65] op [8,1,65]", kElemR, kElemA, "kElem: one f32 rounding");
  Vec a = rnd(rng, n), b = rnd(rng, 8 * 65);
  Buf ab(a, d), bb(b, d);
  for (Binary op : {Binary::kAdd, Binary::kMul}) {
    Vec want(sz(n));
    ref::binary_forward<double>(op, want.data(), a.data(), as.data(), b.data(), bs.data(), shape.data(), 3);
    Buf out(n, d);
    ops::binary_forward(d, op, out.data(), ab.data(), as.data(), bb.data(), bs.data(), shape.data(), 3);
    c.fwd("out", out, want);
  }
  Vec y0 = rnd(rng, n), want(sz(n));
  ref::scale<double>(want.data(), a.data(), 0.5, n);
  Buf yb(n, d);
  ops::scale(d, yb.data(), ab.data(), 0.5f, n);
  c.fwd("scale", yb, want);
  for (int64_t i = 0; i < n; ++i) want[sz(i)] = y0[sz(i)] - 1.5 * a[sz(i)];
  Buf y2(y0, d);
  ops::axpy(d, y2.data(), ab.data(), -1.5f, n);
  c.fwd("axpy", y2, want);
  return c;
}

Check check_rmsnorm(Device d, std::mt19937& rng, bool gated) {
  const int64_t rows = 64, N = 256, n = rows * N;
  Check c(gated ? "rmsnorm (gated)" : "rmsnorm", "[64, 256]", kRedR, kRedA, "kRed: sums over N; dw over rows");
  Vec x = rnd(rng, n, -2, 2), w = rnd(rng, N, 0.5, 1.5), g = rnd(rng, n, -3, 3), dy = rnd(rng, n);
  Vec dx0 = rnd(rng, n), dw0 = rnd(rng, N), dg0 = rnd(rng, n), dx = dx0, dw = dw0, dg = dg0;
  Vec y(sz(n)), rstd(sz(rows));
  const double* gp = gated ? g.data() : nullptr;
  ref::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), gp, rows, N, 1e-6);
  ref::rmsnorm_backward<double>(dx.data(), dw.data(), dg.data(), dy.data(), x.data(), w.data(), gp, rstd.data(), rows,
                                N);
  Buf xb(x, d), wb(w, d), gb(g, d), dyb(dy, d), yb(n, d), rb(rows, d), dxb(dx0, d), dwb(dw0, d), dgb(dg0, d);
  float* gf = gated ? gb.data() : nullptr;
  ops::rmsnorm_forward(d, yb.data(), rb.data(), xb.data(), wb.data(), gf, rows, N, 1e-6f);
  ops::rmsnorm_backward(d, dxb.data(), dwb.data(), gated ? dgb.data() : nullptr, dyb.data(), xb.data(), wb.data(), gf,
                        rb.data(), rows, N);
  c.fwd("y", yb, y);
  c.fwd("rstd", rb, rstd);
  c.bwd("dx", dxb, dx);
  c.bwd("dw", dwb, dw);
  if (gated) c.bwd("dg", dgb, dg);
  return c;
}

// Three candidates of different scales (the snapshots of a residual stream grow), one row-block wide enough to
// split over threads; dv of the middle candidate not wanted (null), which must leave its buffer untouched.
Check check_attn_res_read(Device d, std::mt19937& rng) {
  const int64_t C = 3, rows = 96, N = 160, n = rows * N;
  Check c("attn_res_read", "3 x [96, 160]", kRedR, kRedA, "kRed: sums over N, softmax over C; du over rows");
  std::vector<Vec> v = {rnd(rng, n, -1, 1), rnd(rng, n, -4, 4), rnd(rng, n, -0.3, 0.3)};
  Vec u = rnd(rng, N, -2, 2), dout = rnd(rng, n), du0 = rnd(rng, N), du = du0;
  std::vector<Vec> dv0 = {rnd(rng, n), rnd(rng, n), rnd(rng, n)}, dv = dv0;
  Vec out(sz(n)), p(sz(rows * C)), r(sz(rows * C));
  const double* vp[] = {v[0].data(), v[1].data(), v[2].data()};
  double* dvp[] = {dv[0].data(), nullptr, dv[2].data()};
  ref::attn_res_read_forward<double>(out.data(), p.data(), r.data(), vp, C, rows, N, u.data(), 1e-5);
  ref::attn_res_read_backward<double>(dvp, du.data(), dout.data(), vp, p.data(), r.data(), C, rows, N, u.data());
  Buf v0(v[0], d), v1(v[1], d), v2(v[2], d), ub(u, d), gb(dout, d), ob(n, d), pb(rows * C, d), rb(rows * C, d);
  Buf dv0b(dv0[0], d), dv1b(dv0[1], d), dv2b(dv0[2], d), dub(du0, d);
  const float* vf[] = {v0.data(), v1.data(), v2.data()};
  float* dvf[] = {dv0b.data(), nullptr, dv2b.data()};
  ops::attn_res_read_forward(d, ob.data(), pb.data(), rb.data(), vf, C, rows, N, ub.data(), 1e-5f);
  ops::attn_res_read_backward(d, dvf, dub.data(), gb.data(), vf, pb.data(), rb.data(), C, rows, N, ub.data());
  c.fwd("out", ob, out);
  c.fwd("p", pb, p);
  c.fwd("r", rb, r);
  c.bwd("dv0", dv0b, dv[0]);
  c.bwd("dv1 (not wanted)", dv1b, dv0[1]);
  c.bwd("dv2", dv2b, dv[2]);
  c.bwd("du", dub, du);
  return c;
}

Check check_l2norm(Device d, std::mt19937& rng) {
  const int64_t rows = 32, N = 128, n = rows * N;
  Check c("l2norm", "[32, 128]", kRedR, kRedA, "kRed: sums over N");
  Vec x = rnd(rng, n), dy = rnd(rng, n), dx0 = rnd(rng, n), dx = dx0, y(sz(n)), rn(sz(rows));
  ref::l2norm_forward<double>(y.data(), rn.data(), x.data(), rows, N, 1e-6);
  ref::l2norm_backward<double>(dx.data(), dy.data(), y.data(), rn.data(), rows, N);
  Buf xb(x, d), yb(n, d), rb(rows, d), dyb(dy, d), dxb(dx0, d);
  ops::l2norm_forward(d, yb.data(), rb.data(), xb.data(), rows, N, 1e-6f);
  ops::l2norm_backward(d, dxb.data(), dyb.data(), yb.data(), rb.data(), rows, N);
  c.fwd("y", yb, y);
  c.fwd("rnorm", rb, rn);
  c.bwd("dx", dxb, dx);
  return c;
}

Check check_situ(Device d, std::mt19937& rng) {
  // g and u are the two halves of one fused [rows, 2F] projection (ld = 2F), as the model lays them out.
  const int64_t rows = 64, F = 200, ld = 2 * F;
  const SituParams p{4.0f, 25.0f};
  Check c("situ_glu", "g,u halves of [64, 400]", 1e-5, 1e-4, "kElem x5, atol scaled by the output bound b1*b2 = 100");
  Vec gu = rnd(rng, rows * ld, -40, 40), dy = rnd(rng, rows * F), dgu0 = rnd(rng, rows * ld), dgu = dgu0;
  Vec y(sz(rows * F));
  ref::situ_glu_forward<double>(y.data(), F, gu.data(), ld, gu.data() + F, ld, rows, F, p);
  ref::situ_glu_backward<double>(dgu.data(), ld, dgu.data() + F, ld, dy.data(), F, gu.data(), ld, gu.data() + F, ld,
                                 rows, F, p);
  Buf gub(gu, d), yb(rows * F, d), dyb(dy, d), dgub(dgu0, d);
  ops::situ_glu_forward(d, yb.data(), F, gub.data(), ld, gub.data() + F, ld, rows, F, p);
  ops::situ_glu_backward(d, dgub.data(), ld, dgub.data() + F, ld, dyb.data(), F, gub.data(), ld, gub.data() + F, ld,
                         rows, F, p);
  c.fwd("y", yb, y);
  c.bwd("d(g,u)", dgub, dgu);
  return c;
}

Check check_softmax(Device d, std::mt19937& rng, bool log) {
  const int64_t rows = 16, N = 1000, n = rows * N;
  Check c(log ? "log_softmax" : "softmax", "[16, 1000]", kRedR, kRedA, "kRed: sums of exps over N");
  Vec x = rnd(rng, n, -20, 20), dy = rnd(rng, n), dx0 = rnd(rng, n), dx = dx0, y(sz(n));
  (log ? ref::log_softmax_forward<double> : ref::softmax_forward<double>)(y.data(), x.data(), rows, N);
  (log ? ref::log_softmax_backward<double> : ref::softmax_backward<double>)(dx.data(), dy.data(), y.data(), rows, N);
  Buf xb(x, d), yb(n, d), dyb(dy, d), dxb(dx0, d);
  (log ? ops::log_softmax_forward : ops::softmax_forward)(d, yb.data(), xb.data(), rows, N);
  (log ? ops::log_softmax_backward : ops::softmax_backward)(d, dxb.data(), dyb.data(), yb.data(), rows, N);
  c.fwd("y", yb, y);
  c.bwd("dx", dxb, dx);
  return c;
}

Check check_conv1d(Device d, std::mt19937& rng) {
  const int64_t B = 2, T = 64, C = 96, W = 4, S = W - 1, nx = B * T * C, ns = B * S * C;
  Check c("conv1d", "B2 T64 C96 W4, carried state", kRedR, kRedA, "kRed: dw sums over B*T (y, dx: W-term sums)");
  Vec x = rnd(rng, nx), w = rnd(rng, C * W), st = rnd(rng, ns), dy = rnd(rng, nx);
  Vec dx0 = rnd(rng, nx), dw0 = rnd(rng, C * W), ds0 = rnd(rng, ns), dx = dx0, dw = dw0, ds = ds0;
  Vec y(sz(nx)), so(sz(ns));
  ref::conv1d_forward<double>(y.data(), so.data(), x.data(), w.data(), st.data(), B, T, C, W);
  ref::conv1d_backward<double>(dx.data(), dw.data(), ds.data(), dy.data(), x.data(), w.data(), st.data(), B, T, C, W);
  Buf xb(x, d), wb(w, d), sb(st, d), dyb(dy, d), yb(nx, d), sob(ns, d), dxb(dx0, d), dwb(dw0, d), dsb(ds0, d);
  ops::conv1d_forward(d, yb.data(), sob.data(), xb.data(), wb.data(), sb.data(), B, T, C, W);
  ops::conv1d_backward(d, dxb.data(), dwb.data(), dsb.data(), dyb.data(), xb.data(), wb.data(), sb.data(), B, T, C, W);
  c.fwd("y", yb, y);
  c.fwd("state_out", sob, so);
  c.bwd("dx", dxb, dx);
  c.bwd("dw", dwb, dw);
  c.bwd("dstate_in", dsb, ds);
  return c;
}

Check check_kda_gate(Device d, std::mt19937& rng) {
  // Both gates (bounded at lb -5, unbounded softplus); z = f + dt_bias spans [-24, 24], past softplus's threshold.
  const int64_t T = 32, H = 4, K = 16, n = T * H * K;
  Check c("kda_gate", "T32 H4 K16, bounded and softplus", kRedR, kRedA, "kRed: dA_log sums over T*K");
  for (double lb : {-5.0, -std::numeric_limits<double>::infinity()}) {
    Vec f = rnd(rng, n, -20.0, 20.0), A = rnd(rng, H, -1.0, 1.0), dt = rnd(rng, H * K, -4.0, 4.0), dg = rnd(rng, n);
    Vec g(sz(n)), df0 = rnd(rng, n), dA0 = rnd(rng, H), ddt0 = rnd(rng, H * K), df = df0, dA = dA0, ddt = ddt0;
    ref::kda_gate_forward<double>(g.data(), f.data(), A.data(), dt.data(), T, H, K, lb);
    ref::kda_gate_backward<double>(df.data(), dA.data(), ddt.data(), dg.data(), f.data(), A.data(), dt.data(), T, H, K,
                                   lb);
    Buf fb(f, d), Ab(A, d), dtb(dt, d), dgb(dg, d), gb(n, d), dfb(df0, d), dAb(dA0, d), ddtb(ddt0, d);
    ops::kda_gate_forward(d, gb.data(), fb.data(), Ab.data(), dtb.data(), T, H, K, float(lb));
    ops::kda_gate_backward(d, dfb.data(), dAb.data(), ddtb.data(), dgb.data(), fb.data(), Ab.data(), dtb.data(), T, H,
                           K, float(lb));
    c.fwd("g", gb, g);
    c.bwd("df", dfb, df);
    c.bwd("dA_log", dAb, dA);
    c.bwd("ddt_bias", ddtb, ddt);
  }
  return c;
}

Check check_rope(Device d, std::mt19937& rng) {
  // Rotated columns [32, 64) of 80-wide rows, both pairings (rotate-half and interleaved).
  const int64_t T = 16, heads = 4, N = 80, n = T * heads * N;
  Check c("rope", "T16 heads4 N80, cols [32,64), 2 pairings", kElemR, kElemA, "kElem: one rotation per pair");
  for (bool interleaved : {false, true}) {
    const RopeLayout l{32, 32, interleaved};
    const int64_t half = l.rot / 2;
    Vec cs(sz(T * half)), sn(sz(T * half));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double ang = double(t) * std::pow(10000.0, -2.0 * double(j) / double(l.rot));
        cs[sz(t * half + j)] = double(float(std::cos(ang)));
        sn[sz(t * half + j)] = double(float(std::sin(ang)));
      }
    Vec x = rnd(rng, n), dy = rnd(rng, n), dx0 = rnd(rng, n), dx = dx0, y(sz(n));
    ref::rope_forward<double>(y.data(), x.data(), cs.data(), sn.data(), T, heads, N, l);
    ref::rope_backward<double>(dx.data(), dy.data(), cs.data(), sn.data(), T, heads, N, l);
    Buf xb(x, d), yb(n, d), dyb(dy, d), dxb(dx0, d), cb(cs, d), sb(sn, d);
    ops::rope_forward(d, yb.data(), xb.data(), cb.data(), sb.data(), T, heads, N, l);
    ops::rope_backward(d, dxb.data(), dyb.data(), cb.data(), sb.data(), T, heads, N, l);
    c.fwd("y", yb, y);
    c.bwd("dx", dxb, dx);
  }
  return c;
}

// One attention case's inputs drawn at random, the double reference and the op on the device compared (out, lse
// and the three gradients, accumulated onto random ones). reference(out, lse, dq, dk, dv, dout, q, k, v) runs on
// host vectors, run(...) the same arguments on device buffers.
template <class Reference, class Run>
void compare_attention(Check& c, Device d, std::mt19937& rng, const AttentionShape& s, Reference reference, Run run) {
  const int64_t nq = s.B * s.T * s.H * s.Dk, nk = s.B * s.T * s.Hk * s.Dk, nv = s.B * s.T * s.Hk * s.Dv;
  const int64_t no = s.B * s.T * s.H * s.Dv, nl = s.B * s.H * s.T;
  Vec q = rnd(rng, nq, -2, 2), k = rnd(rng, nk, -2, 2), v = rnd(rng, nv), dout = rnd(rng, no);
  Vec dq0 = rnd(rng, nq), dk0 = rnd(rng, nk), dv0 = rnd(rng, nv), dq = dq0, dk = dk0, dv = dv0;
  Vec out(sz(no)), lse(sz(nl));
  reference(out.data(), lse.data(), dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data());
  Buf qb(q, d), kb(k, d), vb(v, d), ob(no, d), lb(nl, d), dob(dout, d), dqb(dq0, d), dkb(dk0, d), dvb(dv0, d);
  run(ob.data(), lb.data(), dqb.data(), dkb.data(), dvb.data(), dob.data(), qb.data(), kb.data(), vb.data());
  c.fwd("out", ob, out);
  c.fwd("lse", lb, lse);
  c.bwd("dq", dqb, dq);
  c.bwd("dk", dkb, dk);
  c.bwd("dv", dvb, dv);
}

// Causal (the text model) and bidirectional (the vision tower); T = 96 spans a full and a partial 64-row tile.
Check check_attention(Device d, std::mt19937& rng, bool causal) {
  const AttentionShape s{.B = 2, .T = 96, .H = 4, .Hk = 2, .Dk = 32, .Dv = 24, .scale = 0.2f, .causal = causal};
  Check c(causal ? "attention" : "attention_bidir",
          causal ? "B2 T96 H4 Hk2 Dk32 Dv24 causal" : "B2 T96 H4 Hk2 Dk32 Dv24 bidirectional", kRedR, kRedA,
          "kRed: T-long softmax sums, D-long dots");
  compare_attention(
      c, d, rng, s,
      [&](double* out, double* lse, double* dq, double* dk, double* dv, const double* dout, const double* q,
          const double* k, const double* v) {
        ref::attention_forward<double>(out, lse, q, k, v, s);
        ref::attention_backward<double>(dq, dk, dv, dout, out, lse, q, k, v, s);
      },
      [&](float* out, float* lse, float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
          const float* v) {
        ops::attention_forward(d, out, lse, q, k, v, s);
        ops::attention_backward(d, dq, dk, dv, dout, out, lse, q, k, v, s);
      });
  return c;
}

// Block-sparse, both CPU ways (ops/cpu/sparse_attention.cc): T = 100 in blocks of 8 with one local block before
// the query's own and top 3 (dense is cheap next to it: the masked sgemm tiles), and T = 400 in blocks of 4, none
// local, top 2 (a query reads <= 12 of up to 400 keys: gathered dot products). Each query's chosen blocks are drawn
// at random (some choose fewer), so reads span merged and separate ranges.
Check check_sparse_attention(Device d, std::mt19937& rng, bool gathered) {
  const SparseAttentionShape s =
      gathered ? SparseAttentionShape{{.B = 2, .T = 400, .H = 4, .Hk = 2, .Dk = 16, .Dv = 12, .scale = 0.3f}, 4, 0, 2}
               : SparseAttentionShape{{.B = 2, .T = 100, .H = 4, .Hk = 2, .Dk = 16, .Dv = 12, .scale = 0.3f}, 8, 1, 3};
  const AttentionShape& a = s.attn;
  Check c(gathered ? "sparse_attention_gathered" : "sparse_attention",
          gathered ? "B2 T400 H4 Hk2 Dk16 Dv12, block 4, no local block, top 2"
                   : "B2 T100 H4 Hk2 Dk16 Dv12, block 8, 1 local block, top 3",
          kRedR, kRedA, "kRed: softmax sums over the keys read, D-long dots");
  std::vector<int32_t> blocks(sz(a.B * a.T * s.top_k), -1);
  for (int64_t bi = 0; bi < a.B * a.T; ++bi) {
    const int64_t cand = sparse_first_local_block(s.block, s.local_blocks, bi % a.T);
    std::vector<int32_t> all(sz(cand));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int64_t k = std::min<int64_t>(cand, int64_t(rng() % (s.top_k + 1)));
    std::sort(all.begin(), all.begin() + k);
    std::copy(all.begin(), all.begin() + k, blocks.begin() + bi * s.top_k);
  }
  const auto sees = ref::sparse_sees(s, blocks.data());
  compare_attention(
      c, d, rng, a,
      [&](double* out, double* lse, double* dq, double* dk, double* dv, const double* dout, const double* q,
          const double* k, const double* v) {
        ref::masked_attention_forward<double>(out, lse, q, k, v, a, sees);
        ref::masked_attention_backward<double>(dq, dk, dv, dout, out, lse, q, k, v, a, sees);
      },
      [&](float* out, float* lse, float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
          const float* v) {
        ops::sparse_attention_forward(d, out, lse, q, k, v, blocks.data(), s);
        ops::sparse_attention_backward(d, dq, dk, dv, dout, out, lse, q, k, v, blocks.data(), s);
      });
  return c;
}

Check check_cross_entropy(Device d, std::mt19937& rng) {
  const int64_t T = 24, D = 32, V = 500, ignore = -100;
  Check c("cross_entropy", "T24 D32 V500, one ignored", kRedR, kRedA, "kRed: V-long sums of exps, D-long dots");
  Vec h = rnd(rng, T * D), W = rnd(rng, V * D), dh0 = rnd(rng, T * D), dW0 = rnd(rng, V * D), dh = dh0, dW = dW0;
  std::vector<int64_t> tgt(sz(T));
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  for (auto& t : tgt) t = pick(rng);
  tgt[3] = ignore;
  Vec loss(1), lse(sz(T));
  const int64_t count =
      ref::cross_entropy_forward<double>(loss.data(), lse.data(), h.data(), W.data(), tgt.data(), T, D, V, ignore);
  ref::cross_entropy_backward<double>(dh.data(), dW.data(), 1.5, h.data(), W.data(), tgt.data(), lse.data(), T, D, V,
                                      ignore);
  Buf hb(h, d), Wb(W, d), lossb(1, d), lb(T, d), dhb(dh0, d), dWb(dW0, d);
  if (ops::cross_entropy_forward(d, lossb.data(), lb.data(), hb.data(), Wb.data(), tgt.data(), T, D, V, ignore) !=
      count)
    c.fail("counted targets differ from the reference");
  ops::cross_entropy_backward(d, dhb.data(), dWb.data(), 1.5f, hb.data(), Wb.data(), tgt.data(), lb.data(), T, D, V,
                              ignore);
  c.fwd("loss", lossb, loss);
  c.fwd("lse", lb, lse);
  c.bwd("dh", dhb, dh);
  c.bwd("dW", dWb, dW);
  return c;
}

// RL's weighted form: per-token coefficients of both signs, the per-token nll reported.
Check check_cross_entropy_weighted(Device d, std::mt19937& rng) {
  const int64_t T = 24, D = 32, V = 500, ignore = -100;
  Check c("cross_entropy_weighted", "T24 D32 V500, weights of both signs, two ignored", kRedR, kRedA,
          "kRed: V-long sums of exps, D-long dots");
  Vec h = rnd(rng, T * D), W = rnd(rng, V * D), dh0 = rnd(rng, T * D), dW0 = rnd(rng, V * D), dh = dh0, dW = dW0;
  Vec w = rnd(rng, T);
  std::vector<int64_t> tgt(sz(T));
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  for (auto& t : tgt) t = pick(rng);
  tgt[3] = tgt[17] = ignore;
  Vec loss(1), lse(sz(T)), nll(sz(T));
  ref::cross_entropy_forward<double>(loss.data(), lse.data(), h.data(), W.data(), tgt.data(), T, D, V, ignore, w.data(),
                                     nll.data());
  ref::cross_entropy_backward<double>(dh.data(), dW.data(), 0.75, h.data(), W.data(), tgt.data(), lse.data(), T, D, V,
                                      ignore, w.data());
  Buf hb(h, d), Wb(W, d), wb(w, d), lossb(1, d), lb(T, d), nb(T, d), dhb(dh0, d), dWb(dW0, d);
  ops::cross_entropy_forward(d, lossb.data(), lb.data(), hb.data(), Wb.data(), tgt.data(), T, D, V, ignore, wb.data(),
                             nb.data());
  ops::cross_entropy_backward(d, dhb.data(), dWb.data(), 0.75f, hb.data(), Wb.data(), tgt.data(), lb.data(), T, D, V,
                              ignore, wb.data());
  c.fwd("loss", lossb, loss);
  c.fwd("nll", nb, nll);
  c.bwd("dh", dhb, dh);
  c.bwd("dW", dWb, dW);
  return c;
}

Check check_topk(Device d, std::mt19937& rng) {
  // Half the rows rounded to a coarse grid: heavy ties, which myriad's rule (lower index first) makes exact.
  const int64_t rows = 16, N = 256, k = 8;
  Check c("topk", "[16, 256] k8, with ties", 0.0, 0.0, "exact: values and indices (ties to the lower index)");
  Vec x = rnd(rng, rows * N);
  for (int64_t r = 0; r < rows; r += 2)
    for (int64_t j = 0; j < N; ++j) x[sz(r * N + j)] = double(float(std::round(x[sz(r * N + j)] * 3) / 3));
  std::vector<int32_t> idx_ref(sz(rows * k)), idx(sz(rows * k));
  Vec val(sz(rows * k)), idx_d(sz(rows * k));
  ref::topk<double>(idx_ref.data(), val.data(), x.data(), rows, N, k);
  Buf xb(x, d), vb(rows * k, d);
  ops::topk(d, idx.data(), vb.data(), xb.data(), rows, N, k);
  c.fwd("values", vb, val);
  Buf ib(rows * k, Device::kCPU);  // host: the indices as floats, for the comparison
  for (int64_t i = 0; i < rows * k; ++i) {
    ib.data()[i] = float(idx[sz(i)]);
    idx_d[sz(i)] = double(idx_ref[sz(i)]);
  }
  c.fwd("indices", ib, idx_d);
  return c;
}

Check check_gather_scatter(Device d, std::mt19937& rng) {
  // Forward: gather (a copy, exact) and weighted scatter-add with repeated indices; backward of the scatter.
  const int64_t m = 64, n = 300, N = 48;
  Check c("gather/scatter_add", "64 rows <-> 300 copies x 48", kRedR, kRedA, "kRed: repeated indices summed");
  Vec src = rnd(rng, m * N), upd = rnd(rng, n * N), w = rnd(rng, n), dst0 = rnd(rng, m * N), dst = dst0;
  std::vector<int32_t> idx(sz(n));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(m - 1));
  for (auto& i : idx) i = pick(rng);
  Vec g(sz(n * N));
  ref::gather_rows<double>(g.data(), src.data(), idx.data(), n, m, N);
  ref::scatter_add_rows<double>(dst.data(), upd.data(), idx.data(), w.data(), n, m, N);
  Buf sb(src, d), gb(n * N, d), ub(upd, d), wb(w, d), db(dst0, d);
  ops::gather_rows(d, gb.data(), sb.data(), idx.data(), n, m, N);
  ops::scatter_add_rows(d, db.data(), ub.data(), idx.data(), wb.data(), n, m, N);
  c.fwd("gather", gb, g);
  c.fwd("scatter_add", db, dst);
  Vec ddst = rnd(rng, m * N), dsrc0 = rnd(rng, n * N), dw0 = rnd(rng, n), dsrc = dsrc0, dw = dw0;
  ref::scatter_add_rows_backward<double>(dsrc.data(), dw.data(), ddst.data(), upd.data(), idx.data(), w.data(), n, m,
                                         N);
  Buf ddb(ddst, d), dsb(dsrc0, d), dwb(dw0, d);
  ops::scatter_add_rows_backward(d, dsb.data(), dwb.data(), ddb.data(), ub.data(), idx.data(), wb.data(), n, m, N);
  c.bwd("dsrc", dsb, dsrc);
  c.bwd("dw", dwb, dw);
  return c;
}

Check check_embedding(Device d, std::mt19937& rng) {
  const int64_t V = 50, D = 16, T = 40;
  Check c("embedding", "V50 D16 T40, repeated ids", kElemR, kElemA, "kElem: a copy; backward sums repeats");
  Vec table = rnd(rng, V * D), dout = rnd(rng, T * D), dt0 = rnd(rng, V * D), dt = dt0, out(sz(T * D));
  std::vector<int64_t> ids(sz(T));
  for (int64_t t = 0; t < T; ++t) ids[sz(t)] = (t * 7) % 13;
  ref::embedding_forward<double>(out.data(), table.data(), ids.data(), T, V, D);
  ref::embedding_backward<double>(dt.data(), dout.data(), ids.data(), T, V, D);
  Buf tb(table, d), ob(T * D, d), dob(dout, d), dtb(dt0, d);
  ops::embedding_forward(d, ob.data(), tb.data(), ids.data(), T, V, D);
  ops::embedding_backward(d, dtb.data(), dob.data(), ids.data(), T, V, D);
  c.fwd("out", ob, out);
  c.bwd("dtable", dtb, dt);
  return c;
}

Check check_adamw(Device d, std::mt19937& rng) {
  // Three steps on f32 state: p, m, v all compared after the last. The update divides by sqrt(v), so the
  // relative error is ~1e-6 per step.
  const int64_t n = 10000;
  Check c("adamw", "n10000, 3 steps, wd 0.1", 1e-5, 1e-6, "f32 state; ~1e-6 relative per step");
  Vec p = rnd(rng, n), m(sz(n), 0.0), v(sz(n), 0.0);
  Buf pb(p, d), mb(n, d), vb(n, d);
  for (int64_t step = 1; step <= 3; ++step) {
    Vec g = rnd(rng, n);
    const AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
    ref::adamw_update<double>(p.data(), g.data(), m.data(), v.data(), n, hp);
    Buf gb(g, d);
    ops::adamw_update(d, pb.data(), gb.data(), mb.data(), vb.data(), n, hp);
  }
  c.fwd("p", pb, p);
  c.fwd("m", mb, m);
  c.fwd("v", vb, v);
  return c;
}

// A block-quantized matrix W [R, Cols] of `type` with random codes and scales, on `d`, and its values in double
// decoded from the format's definition (ops/block_quant.h), written here independently of the kernels.
QuantMatrix random_quant_matrix(Device d, std::mt19937& rng, QuantType type, int64_t R, int64_t Cols, Vec* values) {
  const int64_t G = Cols / kQuantGroup, code_cols = type == QuantType::kQ8 ? Cols : Cols / 2;
  QuantMatrix q;
  q.type = type;
  q.rows = R;
  q.cols = Cols;
  q.codes = Tensor::empty({R, code_cols}, DType::kU8);
  q.scales = Tensor::empty({R, G}, type == QuantType::kMxfp4 ? DType::kU8 : DType::kF16);
  uint8_t* codes = q.codes.data<uint8_t>();
  std::uniform_int_distribution<int> byte(0, 255), q8(-127, 127), exponent(120, 130);
  std::uniform_real_distribution<double> mag(0.002, 0.02);
  for (int64_t i = 0; i < R * code_cols; ++i)
    codes[i] = type == QuantType::kQ8 ? uint8_t(int8_t(q8(rng))) : uint8_t(byte(rng));
  std::vector<double> scale(sz(R * G));
  for (int64_t i = 0; i < R * G; ++i) {
    if (type == QuantType::kMxfp4) {
      const int e = exponent(rng);
      q.scales.data<uint8_t>()[i] = uint8_t(e);
      scale[sz(i)] = std::ldexp(1.0, e - 127);
    } else {  // q4 scales may be negative (quant/quant.h)
      const double v = (type == QuantType::kQ4 && byte(rng) % 2 ? -1 : 1) * mag(rng);
      const uint16_t h = f32_to_f16(float(v));
      q.scales.data<uint16_t>()[i] = h;
      scale[sz(i)] = double(f16_to_f32(h));
    }
  }
  values->assign(sz(R * Cols), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < Cols; ++c) {
      const double s = scale[sz(r * G + c / kQuantGroup)];
      double v;
      if (type == QuantType::kQ8) {
        v = double(int8_t(codes[r * Cols + c]));
      } else {
        const uint8_t b = codes[r * code_cols + c / 2], code = c % 2 ? uint8_t(b >> 4) : uint8_t(b & 15);
        v = type == QuantType::kQ4 ? double(int(code) - 8) : double(kE2M1Values[code]);
      }
      (*values)[sz(r * Cols + c)] = s * v;
    }
  if (d != Device::kCPU) q.codes = q.codes.to(d), q.scales = q.scales.to(d);
  return q;
}

Check check_quant_matmul(Device d, std::mt19937& rng) {
  // y = x W^T against the double product of the decoded W, for every format, 1, 4 and 288 rows of x (the integer
  // kernels below quant_gemm_rows(), dequant + sgemm from there), and quant_matmul_many over two matrices. x is
  // built so that the integer path's q8 activations are exact (each group of 32 holds integers in [-127, 127]
  // times a power of two, one of them +-127: the scale is that power of two), so the only error left is f32
  // accumulation: kRed. The activations' own rounding is bounded and tested in tests/quant.
  const int64_t R = 96, Cols = 256;
  Check c("quant_matmul", "q8 q4 mxfp4 [96, 256], n 1/4/288, many", kRedR, kRedA,
          "kRed: Cols-long f32 sums; x exact in q8");
  auto exact_x = [&](int64_t n) {
    Vec x(sz(n * Cols));
    std::uniform_int_distribution<int> qi(-127, 127), pow2(-9, -5), lane(0, int(kQuantGroup) - 1);
    for (int64_t g = 0; g < n * Cols / kQuantGroup; ++g) {
      const double s = std::ldexp(1.0, pow2(rng));
      for (int64_t i = 0; i < kQuantGroup; ++i) x[sz(g * kQuantGroup + i)] = s * qi(rng);
      x[sz(g * kQuantGroup + lane(rng))] = (qi(rng) < 0 ? -127 : 127) * s;
    }
    return x;
  };
  auto product = [&](const Vec& x, const Vec& w, int64_t n) {
    Vec y(sz(n * R), 0.0);
    ref::gemm<double>(false, true, n, R, Cols, 1.0, x.data(), Cols, w.data(), Cols, 0.0, y.data(), R);
    return y;
  };
  for (QuantType type : {QuantType::kQ8, QuantType::kQ4, QuantType::kMxfp4}) {
    Vec w, w2;
    const QuantMatrix q = random_quant_matrix(d, rng, type, R, Cols, &w);
    const QuantMatrix q2 = random_quant_matrix(d, rng, type, R, Cols, &w2);
    const std::string t = quant_type_name(type);
    for (int64_t n : {1, 4, 288}) {
      const Vec x = exact_x(n);
      Buf xb(x, d), yb(n * R, d);
      ops::quant_matmul(d, q, xb.data(), n, yb.data());
      c.fwd(t + " n" + std::to_string(n), yb, product(x, w, n));
    }
    const Vec x = exact_x(3);
    Buf xb(x, d), y1(3 * R, d), y2(3 * R, d);
    const QuantMatrix* ws[] = {&q, &q2};
    float* ys[] = {y1.data(), y2.data()};
    ops::quant_matmul_many(d, ws, xb.data(), 3, ys);
    c.fwd(t + " many[0]", y1, product(x, w, 3));
    c.fwd(t + " many[1]", y2, product(x, w2, 3));
  }
  return c;
}

Check check_reductions(Device d, std::mt19937& rng) {
  const int64_t rows = 300, N = 70;
  Check c("sum_all/sum_rows", "[300, 70]", kRedR, kRedA, "kRed: sums over rows");
  Vec x = rnd(rng, rows * N), out0 = rnd(rng, N), out = out0, total(1, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N; ++j) {
      out[sz(j)] += x[sz(r * N + j)];
      total[0] += x[sz(r * N + j)];
    }
  Buf xb(x, d), ob(out0, d), tb(1, Device::kCPU);  // host: sum_all returns its sum to the host
  tb.data()[0] = float(ops::sum_all(d, xb.data(), rows * N));
  ops::sum_rows_accumulate(d, ob.data(), xb.data(), rows, N);
  c.fwd("sum_all", tb, total);
  c.bwd("sum_rows_accumulate", ob, out);  // the backward of a broadcast
  return c;
}

std::string sci(double v) {
  char b[16];
  std::snprintf(b, sizeof b, "%.1e", v);
  return b;
}

}  // namespace

std::vector<SelfcheckLine> run_op_cases(Device device, const std::function<void(const SelfcheckLine&)>& on_line) {
  std::mt19937 rng(2024);
  using Fn = std::function<Check()>;
  const std::vector<std::pair<const char*, Fn>> checks = {
      {"gemm", [&] { return check_gemm(device, rng); }},
      {"unary", [&] { return check_unary(device, rng); }},
      {"binary/scale/axpy", [&] { return check_binary(device, rng); }},
      {"rmsnorm", [&] { return check_rmsnorm(device, rng, false); }},
      {"rmsnorm (gated)", [&] { return check_rmsnorm(device, rng, true); }},
      {"l2norm", [&] { return check_l2norm(device, rng); }},
      {"attn_res_read", [&] { return check_attn_res_read(device, rng); }},
      {"situ_glu", [&] { return check_situ(device, rng); }},
      {"softmax", [&] { return check_softmax(device, rng, false); }},
      {"log_softmax", [&] { return check_softmax(device, rng, true); }},
      {"conv1d", [&] { return check_conv1d(device, rng); }},
      {"kda_gate", [&] { return check_kda_gate(device, rng); }},
      {"rope", [&] { return check_rope(device, rng); }},
      {"attention", [&] { return check_attention(device, rng, true); }},
      {"attention_bidir", [&] { return check_attention(device, rng, false); }},
      {"sparse_attention", [&] { return check_sparse_attention(device, rng, false); }},
      {"sparse_attention_gathered", [&] { return check_sparse_attention(device, rng, true); }},
      {"cross_entropy", [&] { return check_cross_entropy(device, rng); }},
      {"cross_entropy_weighted", [&] { return check_cross_entropy_weighted(device, rng); }},
      {"topk", [&] { return check_topk(device, rng); }},
      {"gather/scatter_add", [&] { return check_gather_scatter(device, rng); }},
      {"embedding", [&] { return check_embedding(device, rng); }},
      {"adamw", [&] { return check_adamw(device, rng); }},
      {"sum_all/sum_rows", [&] { return check_reductions(device, rng); }},
      {"quant_matmul", [&] { return check_quant_matmul(device, rng); }},
  };
  std::vector<SelfcheckLine> lines;
  for (const auto& [name, fn] : checks) {
    SelfcheckLine l;
    try {
      l = fn().line();
    } catch (const Error& e) {
      l.op = name;
      if (e.kind() == ErrorKind::kUnsupported &&
          std::string(e.what()).find("has no kernel for device") != std::string::npos) {
        l.skipped = true;
        l.failure = e.what();
      } else {  // a kernel that throws on valid input is a failure, not a crash
        l.ok = false;
        l.failure = std::string("threw: ") + e.what();
      }
    } catch (const std::exception& e) {
      l.op = name;
      l.ok = false;
      l.failure = std::string("threw: ") + e.what();
    }
    if (on_line) on_line(l);
    lines.push_back(std::move(l));
  }
  return lines;
}

void print_selfcheck_header(std::FILE* out) {
  std::fprintf(out, "%-19s %-42s %9s %9s %9s %9s  %-21s %-6s %s\n", "op", "shape", "fwd |err|", "fwd rel", "bwd |err|",
               "bwd rel", "tolerance", "result", "why this tolerance");
}

void print_selfcheck_line(std::FILE* out, const SelfcheckLine& l) {
  auto cell = [](const SelfcheckLine::Side& s, bool rel) {
    return s.present ? sci(rel ? s.rel() : s.max_abs) : std::string("-");
  };
  char tol[32];
  std::snprintf(tol, sizeof tol, "rtol %.0e atol %.0e", l.rtol, l.atol);
  if (l.rtol == 0.0 && l.atol == 0.0) std::snprintf(tol, sizeof tol, "exact");
  std::fprintf(out, "%-19s %-42s %9s %9s %9s %9s  %-21s %-6s %s\n", l.op.c_str(), l.shape.c_str(),
               cell(l.fwd, false).c_str(), cell(l.fwd, true).c_str(), cell(l.bwd, false).c_str(),
               cell(l.bwd, true).c_str(), tol,
               l.skipped ? "skip"
               : l.ok    ? "OK"
                         : "FAIL",
               l.reason.c_str());
  if (!l.ok) std::fprintf(out, "    %s\n", l.failure.c_str());
  std::fflush(out);
}

}  // namespace myriad::ops

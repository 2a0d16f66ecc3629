// The CUDA kernels (ops/cuda/cuda_backend.h) against the CPU kernels (ops/kernels.h), forward and backward, on
// random data and odd / degenerate shapes (0 rows, N = 1, N = 4097, widths that are not multiples of 32).
// Every test skips where no CUDA device is present (CI, the build machines): in builds without the backend the
// stub (cuda_stub.cc) provides the symbols and available() is false. The one test that runs everywhere checks
// that the stub (or a device-less machine) refuses with kUnsupported.
// Conventions checked besides the values: backward kernels ACCUMULATE (gradient buffers start from random
// values, not zeros), ld/stride padding is never written (exact comparison of the whole buffer), and the
// inputs are left alone.
// Tolerances: element i passes when |cuda - cpu| <= atol + rtol * mag_i, with mag_i the size of what was summed
// to make it (|want|, or |d0| + |increment| for accumulated gradients, or an abs-sum for reductions); each
// test says why its numbers. A NaN passes only against a NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

using Floats = std::vector<float>;
constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff (2^-24)

Floats random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(size_t(std::max<int64_t>(n, 0)));
  for (float& x : v) x = dist(rng);
  return v;
}

// A device copy of host data; data() is the device pointer the kernels take.
class DeviceFloats {
 public:
  explicit DeviceFloats(const Floats& v) : t_(Tensor::from_vector(v, {int64_t(v.size())}).to(Device::kCUDA)) {}
  float* data() const { return static_cast<float*>(t_.raw_data()); }
  Floats host() const { return t_.to(Device::kCPU).to_vector(); }

 private:
  Tensor t_;
};

// |got - want| <= tol[i] for every i; reports how many fail and the worst one.
void expect_within(const Floats& got, const Floats& want, const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(tol.size(), want.size()) << what;
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(g) && std::isnan(w)) continue;
    const double err = std::fabs(g - w);
    if (!(err <= tol[i])) {  // NaN against a number fails here too
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - tol[i];
      if (worst < 0 || excess > worst_excess) worst = int64_t(i), worst_excess = excess;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements out of tolerance; worst at " << worst
                    << ": cuda " << (worst >= 0 ? got[size_t(worst)] : 0.0f) << " vs cpu "
                    << (worst >= 0 ? want[size_t(worst)] : 0.0f) << " (tolerance "
                    << (worst >= 0 ? tol[size_t(worst)] : 0.0) << ")";
}

// tol_i = atol + rtol * mag_i, mag_i = |want_i| unless given.
void expect_close(const Floats& got, const Floats& want, double atol, double rtol, const std::string& what,
                  const std::vector<double>* mag = nullptr) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) tol[i] = atol + rtol * (mag ? (*mag)[i] : std::fabs(double(want[i])));
  expect_within(got, want, tol, what);
}

// Magnitude of an accumulated gradient: |initial| + |increment| (the increment from a CPU run into zeros), so the
// tolerance does not shrink when the increment happens to cancel the initial value.
std::vector<double> accumulated_mag(const Floats& initial, const Floats& increment) {
  std::vector<double> m(initial.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = std::fabs(double(initial[i])) + std::fabs(double(increment[i]));
  return m;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

std::string shape_name(int64_t rows, int64_t N) {
  return "[" + std::to_string(rows) + ", " + std::to_string(N) + "]";
}

// ---------------------------------------------------------------------------------------------------------------
// The backend seam.

TEST(CudaBackend, RefusesWithUnsupportedWithoutDevice) {
  if (cuda::available()) GTEST_SKIP() << "CUDA device present: the refusal path is not reachable";
  try {
    cuda::init();
    FAIL() << "cuda::init() returned without a CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
  }
  try {
    ops::softmax_forward(Device::kCUDA, nullptr, nullptr, 0, 0);
#ifndef MYRIAD_WITH_CUDA
    FAIL() << "the stub's softmax_forward returned";
#endif
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("--preset cuda"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, InitIsIdempotentAndCopiesRoundTrip) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  cuda::init();
  std::mt19937 rng(1);
  for (int64_t n : {0, 1, 4097}) {
    const Floats v = random_floats(rng, n);
    Tensor d = Tensor::from_vector(v, {n}).to(Device::kCUDA);
    EXPECT_EQ(d.device(), Device::kCUDA);
    EXPECT_EQ(d.to(Device::kCPU).to_vector(), v) << "n = " << n;
    Tensor z = Tensor::zeros({n, 3}, DType::kF32, Device::kCUDA);
    EXPECT_EQ(z.to(Device::kCPU).to_vector(), Floats(size_t(n * 3), 0.0f)) << "n = " << n;
  }
  cuda::synchronize();
}

TEST(CudaBackend, BadArgumentsThrowTypedErrors) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  DeviceFloats buf(Floats(64, 1.0f));
  try {  // ldc < N
    ops::gemm(Device::kCUDA, false, false, 2, 4, 2, 1.0f, buf.data(), 2, buf.data(), 4, 0.0f, buf.data(), 3);
    FAIL() << "gemm accepted ldc < N";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape) << e.what();
  }
  // Nine axes that no merging can reduce (a is stored with its axes reversed): more than the kernel's 8.
  const Shape shape(9, 2);
  Shape as(9), bs(9);
  for (int d = 0; d < 9; ++d) as[d] = int64_t(1) << d, bs[d] = int64_t(1) << (8 - d);
  DeviceFloats a(Floats(512, 1.0f)), b(Floats(512, 2.0f)), out(Floats(512, 0.0f));
  try {
    ops::binary_forward(Device::kCUDA, Binary::kAdd, out.data(), a.data(), as.data(), b.data(), bs.data(), shape.data(),
                        9);
    FAIL() << "binary_forward accepted 9 unmergeable axes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
  }
  cuda::synchronize();
}

// ---------------------------------------------------------------------------------------------------------------
// GEMM.

struct GemmCase {
  int64_t M, N, K;
};

// Runs one configuration on both backends and compares the whole C buffer (padding included).
void check_gemm(std::mt19937& rng, GemmCase s, bool ta, bool tb, int64_t batch, int64_t pad, bool broadcast_a,
                float alpha, float beta, bool tf32) {
  const int64_t a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
  const int64_t b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = s.N + pad;
  const int64_t stride_a = broadcast_a ? 0 : a_rows * lda, stride_b = b_rows * ldb, stride_c = s.M * ldc;
  const Floats A = random_floats(rng, broadcast_a ? a_rows * lda : batch * a_rows * lda);
  const Floats B = random_floats(rng, batch * b_rows * ldb);
  const Floats C0 = random_floats(rng, batch * s.M * ldc);

  Floats want = C0;
  ops::gemm(Device::kCPU, ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc, batch,
            stride_a, stride_b, stride_c);
  DeviceFloats dA(A), dB(B), dC(C0);
  ops::gemm(Device::kCUDA, ta, tb, s.M, s.N, s.K, alpha, dA.data(), lda, dB.data(), ldb, beta, dC.data(), ldc, batch,
            stride_a, stride_b, stride_c);

  // NOTE: the tolerance is the f32 error bound of a dot product, not a guess: each result is within
  // K * u * sum_k |a||b| of the exact value whatever the summation order (blocking, split-K, FMA), plus a few u
  // for alpha, beta and the final add; the two backends differ by at most twice that. abs_C = |alpha| |A| |B|
  // computed by the CPU gemm itself. TF32 rounds each input to 10 mantissa bits (relative 2^-11 each, so 2^-10
  // per product): its bound adds 2^-10 * sum |a||b|. Padding columns (j >= N) must be untouched: tolerance 0.
  Floats absA(A.size()), absB(B.size()), abs_C(C0.size(), 0.0f);
  for (size_t i = 0; i < A.size(); ++i) absA[i] = std::fabs(A[i]);
  for (size_t i = 0; i < B.size(); ++i) absB[i] = std::fabs(B[i]);
  ops::gemm(Device::kCPU, ta, tb, s.M, s.N, s.K, std::fabs(alpha), absA.data(), lda, absB.data(), ldb, 0.0f,
            abs_C.data(), ldc, batch, stride_a, stride_b, stride_c);
  const double rel = (2.0 * double(s.K) + 6.0) * kU + (tf32 ? 1.0 / 1024 : 0.0);
  std::vector<double> tol(C0.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        const size_t at = size_t(b * stride_c + i * ldc + j);
        tol[at] = rel * (double(abs_C[at]) + std::fabs(double(beta) * C0[at]));
      }
  expect_within(dC.host(), want, tol,
                "gemm M " + std::to_string(s.M) + " N " + std::to_string(s.N) + " K " + std::to_string(s.K) +
                    (ta ? " ta" : "") + (tb ? " tb" : "") + " batch " + std::to_string(batch) + " pad " +
                    std::to_string(pad) + (broadcast_a ? " broadcast A" : "") + " alpha " + std::to_string(alpha) +
                    " beta " + std::to_string(beta) + (tf32 ? " tf32" : ""));
  EXPECT_EQ(dA.host(), A) << "gemm wrote into A";
  EXPECT_EQ(dB.host(), B) << "gemm wrote into B";
}

TEST(CudaOps, GemmMatchesCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(2);
  const GemmCase cases[] = {{1, 1, 1}, {37, 65, 129}, {64, 64, 64},  {0, 5, 7},  {5, 0, 7},
                            {5, 7, 0}, {1, 4097, 3},  {130, 1, 257}, {33, 17, 1}};
  for (const GemmCase& s : cases)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      check_gemm(rng, s, ta, tb, 1, 0, false, 1.0f, 0.0f, false);
      check_gemm(rng, s, ta, tb, 1, 3, false, 0.5f, 1.5f, false);
      check_gemm(rng, s, ta, tb, 3, 1, false, -1.25f, 1.0f, false);
      check_gemm(rng, s, ta, tb, 3, 0, true, 1.0f, 0.0f, false);  // one A for every batch (stride_a = 0)
    }
  check_gemm(rng, {0, 0, 0}, false, false, 0, 0, false, 1.0f, 0.0f, false);  // batch 0
  cuda::synchronize();
}

TEST(CudaOps, GemmTf32IsOptInAndClose) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(3);
  cuda::set_gemm_tf32(true);
  check_gemm(rng, {96, 80, 300}, false, true, 2, 1, false, 1.0f, 0.5f, true);
  cuda::set_gemm_tf32(false);
  check_gemm(rng, {96, 80, 300}, false, true, 2, 1, false, 1.0f, 0.5f, false);  // the f32 bound again
}

TEST(CudaOps, GemmBetaZeroIgnoresOldC) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  // BLAS semantics: with beta == 0, C is not read, so NaN in it must not leak into the result (also for K == 0).
  std::mt19937 rng(4);
  for (int64_t K : {0, 9}) {
    const int64_t M = 7, N = 5;
    const Floats A = random_floats(rng, M * K), B = random_floats(rng, K * N);
    Floats want(size_t(M * N), 0.0f);
    ops::gemm(Device::kCPU, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N);
    DeviceFloats dA(A), dB(B), dC(Floats(size_t(M * N), NAN));
    ops::gemm(Device::kCUDA, false, false, M, N, K, 1.0f, dA.data(), K, dB.data(), N, 0.0f, dC.data(), N);
    // (2K + 6) u * sum |a||b| bounds the difference (see check_gemm); |a|, |b| <= 1 so sum |a||b| <= K.
    expect_close(dC.host(), want, (2.0 * K + 6.0) * kU * double(K), 0.0,
                 "gemm beta 0 over NaN, K " + std::to_string(K));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Elementwise.

const Unary kUnaryOps[] = {Unary::kSiLU,     Unary::kSigmoid,  Unary::kTanh,
                           Unary::kSoftplus, Unary::kGeluTanh, Unary::kGelu};
const char* unary_name(Unary op) {
  switch (op) {
    case Unary::kSiLU:
      return "silu";
    case Unary::kSigmoid:
      return "sigmoid";
    case Unary::kTanh:
      return "tanh";
    case Unary::kSoftplus:
      return "softplus";
    case Unary::kGeluTanh:
      return "gelu_tanh";
    case Unary::kGelu:
      return "gelu";
  }
  return "?";
}

TEST(CudaOps, UnaryForwardBackwardMatchCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(5);
  // Edges first: signed zero, tiny, softplus's cut-off at 20, saturation, and past the CPU fast_exp range.
  const Floats specials = {0.0f,   -0.0f, 1e-4f, -1e-4f, 20.0f,  20.5f,  19.5f,
                           -30.0f, 30.0f, 88.0f, -88.0f, 100.0f, -100.0f};
  for (Unary op : kUnaryOps)
    for (int64_t n : {0, 1, 7, 4097, 100003}) {
      Floats x = random_floats(rng, n, -12.0f, 12.0f);
      for (size_t i = 0; i < x.size() && i < specials.size(); ++i) x[i] = specials[i];
      const Floats dy = random_floats(rng, n), dx0 = random_floats(rng, n);
      const std::string what = std::string(unary_name(op)) + " n " + std::to_string(n);

      Floats y(x.size()), dx = dx0, inc(x.size(), 0.0f);
      ops::unary_forward(Device::kCPU, op, y.data(), x.data(), n);
      ops::unary_backward(Device::kCPU, op, dx.data(), dy.data(), x.data(), n);
      ops::unary_backward(Device::kCPU, op, inc.data(), dy.data(), x.data(), n);
      DeviceFloats dx_in(x), d_y(Floats(x.size(), 0.0f)), d_dy(dy), d_dx(dx0);
      ops::unary_forward(Device::kCUDA, op, d_y.data(), dx_in.data(), n);
      ops::unary_backward(Device::kCUDA, op, d_dx.data(), d_dy.data(), dx_in.data(), n);
      // NOTE: CUDA's expf / tanhf / log1pf are within 2 ulp; the CPU kernels use vectorised approximations
      // (cpu/vmath.h: exp ~2e-7 relative, tanh ~1e-7 ABSOLUTE, saturating outside [-87, 88]), so differences
      // are ~1e-7 absolute plus a few 1e-7 relative. atol 1e-6 covers the absolute part (tanh of small x, the
      // cancelling 1 - s and 1 - t^2 factors of the derivatives), rtol 1e-5 the relative part with 10x headroom.
      expect_close(d_y.host(), y, 1e-6, 1e-5, what + " forward");
      const std::vector<double> mag = accumulated_mag(dx0, inc);
      expect_close(d_dx.host(), dx, 1e-6, 1e-5, what + " backward (accumulated into dx)", &mag);
      EXPECT_EQ(dx_in.host(), x) << what << ": x was modified";
    }
  cuda::synchronize();
}

// Strides of an operand stored contiguously with shape `stored` (1 on broadcast axes), its axes laid out in
// reverse order when `reversed` (a transposed view); broadcast axes get stride 0.
Shape operand_strides(const Shape& out, const Shape& stored, bool reversed) {
  const int nd = int(out.size());
  Shape st(size_t(nd), 0);
  int64_t acc = 1;
  for (int k = 0; k < nd; ++k) {
    const int d = reversed ? k : nd - 1 - k;
    st[size_t(d)] = acc;
    acc *= stored[size_t(d)];
  }
  for (int d = 0; d < nd; ++d)
    if (stored[size_t(d)] == 1 && out[size_t(d)] != 1) st[size_t(d)] = 0;
  return st;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

TEST(CudaOps, BinaryBroadcastMatchesCpuExactly) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  struct Case {
    Shape out, a, b;
    bool a_reversed = false, b_reversed = false;
  };
  const Case cases[] = {
      {{37, 129}, {37, 129}, {37, 129}},            // same shape, contiguous
      {{37, 129}, {37, 129}, {1, 129}},             // row vector
      {{37, 129}, {37, 129}, {37, 1}},              // column vector
      {{5, 6, 7}, {5, 1, 7}, {1, 6, 1}},            // outer-product style, broadcast on both sides
      {{}, {}, {}},                                 // scalar
      {{3, 0, 5}, {3, 0, 5}, {1, 0, 1}},            // empty
      {{33, 65}, {33, 65}, {33, 65}, true, false},  // transposed a
      {{2, 3, 1, 2, 3, 2, 1, 3}, {2, 1, 1, 2, 3, 1, 1, 3}, {1, 3, 1, 1, 3, 2, 1, 1}},  // 8 axes, mixed broadcast
      {{2, 2, 2, 2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 2, 2, 2, 2}},  // 9 axes, merge to 1
      {{4097}, {4097}, {1}},  // scalar broadcast over a long row
  };
  std::mt19937 rng(6);
  for (const Case& c : cases)
    for (Binary op : {Binary::kAdd, Binary::kMul}) {
      const Shape as = operand_strides(c.out, c.a, c.a_reversed), bs = operand_strides(c.out, c.b, c.b_reversed);
      const Floats a = random_floats(rng, numel_of(c.a)), b = random_floats(rng, numel_of(c.b));
      const int64_t n = numel_of(c.out);
      const int nd = int(c.out.size());
      Floats want(size_t(n), 0.0f);
      ops::binary_forward(Device::kCPU, op, want.data(), a.data(), as.data(), b.data(), bs.data(), c.out.data(), nd);
      DeviceFloats da(a), db(b), dout(Floats(size_t(n), 0.0f));
      ops::binary_forward(Device::kCUDA, op, dout.data(), da.data(), as.data(), db.data(), bs.data(), c.out.data(), nd);
      // NOTE: exact: one IEEE f32 add or multiply per element, correctly rounded on both backends.
      expect_close(dout.host(), want, 0.0, 0.0,
                   std::string(op == Binary::kAdd ? "add" : "mul") + " out " + shape_str(c.out) + " a " +
                       shape_str(c.a) + " b " + shape_str(c.b));
    }
  cuda::synchronize();
}

TEST(CudaOps, ScaleAndAxpyMatchCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(7);
  for (int64_t n : {0, 1, 31, 4097, 100003}) {
    const Floats x = random_floats(rng, n, -3.0f, 3.0f), y0 = random_floats(rng, n, -3.0f, 3.0f);
    const float alpha = -0.7f;
    Floats want_scale(x.size()), want_axpy = y0;
    ops::scale(Device::kCPU, want_scale.data(), x.data(), alpha, n);
    ops::axpy(Device::kCPU, want_axpy.data(), x.data(), alpha, n);

    DeviceFloats dx(x), dy(Floats(x.size(), 0.0f)), dy_axpy(y0), d_inplace(x);
    ops::scale(Device::kCUDA, dy.data(), dx.data(), alpha, n);
    ops::scale(Device::kCUDA, d_inplace.data(), d_inplace.data(), alpha, n);  // y may be x
    ops::axpy(Device::kCUDA, dy_axpy.data(), dx.data(), alpha, n);
    // NOTE: scale is one correctly rounded multiply: exact. axpy may or may not be fused into one FMA on either
    // side (nvcc contracts by default; the CPU compiler or OpenBLAS may not): at most 1 ulp of |y0| + |alpha x|
    // apart, 2 u of that magnitude.
    const std::string what = " n " + std::to_string(n);
    expect_close(dy.host(), want_scale, 0.0, 0.0, "scale" + what);
    expect_close(d_inplace.host(), want_scale, 0.0, 0.0, "scale in place" + what);
    std::vector<double> mag(x.size());
    for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(double(y0[i])) + std::fabs(double(alpha) * x[i]);
    expect_close(dy_axpy.host(), want_axpy, 0.0, 2.0 * kU, "axpy" + what, &mag);
  }
  cuda::synchronize();
}

TEST(CudaOps, SituGluForwardBackwardMatchCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(8);
  struct Case {
    int64_t rows, F;
    bool fused;  // g and u are the two halves of one [rows, 2F] buffer (ld 2F), as after a fused projection
  };
  const Case cases[] = {{0, 16, false}, {1, 1, false}, {7, 33, true}, {64, 4097, true}, {129, 96, false}};
  for (const SituParams p : {SituParams{}, SituParams{1.5f, 3.0f}})
    for (const Case& c : cases) {
      const int64_t ld_gu = c.fused ? 2 * c.F : c.F + 3, ldy = c.F + 5, ldd = c.F + 2;  // padded rows everywhere
      const int64_t n_gu = c.rows * ld_gu;
      const Floats gu = random_floats(rng, n_gu, -8.0f, 8.0f), u_sep = random_floats(rng, n_gu, -8.0f, 8.0f);
      // fused: g = columns [0, F), u = [F, 2F) of gu; otherwise g = gu, u = u_sep (padding columns are junk).
      const int64_t u_off = c.fused ? c.F : 0;
      const Floats& u_buf = c.fused ? gu : u_sep;
      const Floats y0 = random_floats(rng, c.rows * ldy), dy = random_floats(rng, c.rows * ldd);
      const Floats dg0 = random_floats(rng, c.rows * ldd), du0 = random_floats(rng, c.rows * ldd);

      Floats y = y0, dg = dg0, du = du0, dg_inc(dg0.size(), 0.0f), du_inc(du0.size(), 0.0f);
      ops::situ_glu_forward(Device::kCPU, y.data(), ldy, gu.data(), ld_gu, u_buf.data() + u_off, ld_gu, c.rows, c.F, p);
      ops::situ_glu_backward(Device::kCPU, dg.data(), ldd, du.data(), ldd, dy.data(), ldd, gu.data(), ld_gu,
                             u_buf.data() + u_off, ld_gu, c.rows, c.F, p);
      ops::situ_glu_backward(Device::kCPU, dg_inc.data(), ldd, du_inc.data(), ldd, dy.data(), ldd, gu.data(), ld_gu,
                             u_buf.data() + u_off, ld_gu, c.rows, c.F, p);

      DeviceFloats d_gu(gu), d_u(u_buf), d_y(y0), d_dy(dy), d_dg(dg0), d_du(du0);
      ops::situ_glu_forward(Device::kCUDA, d_y.data(), ldy, d_gu.data(), ld_gu, d_u.data() + u_off, ld_gu, c.rows, c.F,
                            p);
      ops::situ_glu_backward(Device::kCUDA, d_dg.data(), ldd, d_du.data(), ldd, d_dy.data(), ldd, d_gu.data(), ld_gu,
                             d_u.data() + u_off, ld_gu, c.rows, c.F, p);
      // NOTE: pointwise, but a product of four rounded factors with b1 * b2 up to 100: the CPU's tanh has ~1e-7
      // ABSOLUTE error, which the factor b1 b2 scales to ~1e-5 near tanh(.) = 0; hence atol 5e-5 (values reach
      // ~b1 b2 = 100), rtol 1e-5 for the ulp-level relative differences. Padding columns hold the same random
      // initial values on both sides and must stay so.
      const std::string what = "situ_glu rows " + std::to_string(c.rows) + " F " + std::to_string(c.F) +
                               (c.fused ? " fused" : "") + " b1 " + std::to_string(p.beta);
      expect_close(d_y.host(), y, 5e-5, 1e-5, what + " forward");
      const std::vector<double> mag_g = accumulated_mag(dg0, dg_inc), mag_u = accumulated_mag(du0, du_inc);
      expect_close(d_dg.host(), dg, 5e-5, 1e-5, what + " dg (accumulated)", &mag_g);
      expect_close(d_du.host(), du, 5e-5, 1e-5, what + " du (accumulated)", &mag_u);
    }
  cuda::synchronize();
}

// ---------------------------------------------------------------------------------------------------------------
// Row reductions: RMSNorm and softmax.

const int64_t kRowCounts[] = {0, 1, 3, 37, 1031};
const int64_t kRowLengths[] = {0, 1, 5, 32, 33, 4097};

TEST(CudaOps, RmsNormForwardBackwardMatchCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(9);
  const float eps = 1e-5f;
  for (bool gated : {false, true})
    for (int64_t rows : kRowCounts)
      for (int64_t N : kRowLengths) {
        if (rows * N > 1031 * 1031) continue;  // keeps the largest case ~1M elements
        const std::string what = std::string("rmsnorm") + (gated ? " gated " : " ") + shape_name(rows, N);
        const Floats x = random_floats(rng, rows * N, -2.0f, 2.0f), w = random_floats(rng, N, -1.5f, 1.5f);
        const Floats g = gated ? random_floats(rng, rows * N, -4.0f, 4.0f) : Floats();
        const float* g_host = gated ? g.data() : nullptr;
        Floats y(x.size()), rstd(static_cast<size_t>(rows));
        ops::rmsnorm_forward(Device::kCPU, y.data(), rstd.data(), x.data(), w.data(), g_host, rows, N, eps);

        DeviceFloats d_x(x), d_w(w), d_g(g), d_y(Floats(x.size(), 0.0f)), d_rstd(Floats(size_t(rows), 0.0f));
        float* g_dev = gated ? d_g.data() : nullptr;
        ops::rmsnorm_forward(Device::kCUDA, d_y.data(), d_rstd.data(), d_x.data(), d_w.data(), g_dev, rows, N, eps);
        // NOTE: rstd comes from an f32 sum of N squares (positive terms) in different orders (CPU SIMD lanes, GPU
        // tree): relative differences ~log2(N) u, 1e-6 at N = 4097; y adds a few u and the CPU's sigmoid (2e-7).
        // rtol 2e-5 leaves 10x headroom; atol 1e-6 covers sigmoid(g)'s absolute differences near 0.
        expect_close(d_rstd.host(), rstd, 0.0, 2e-5, what + " rstd");
        expect_close(d_y.host(), y, 1e-6, 2e-5, what + " y");

        // Backward on the CPU's rstd, so only the backward kernels differ.
        const Floats dy = random_floats(rng, rows * N), dx0 = random_floats(rng, rows * N);
        const Floats dw0 = random_floats(rng, N), dg0 = gated ? random_floats(rng, rows * N) : Floats();
        Floats dx = dx0, dw = dw0, dg = dg0, dx_inc(dx0.size(), 0.0f), dw_inc(dw0.size(), 0.0f),
               dg_inc(dg0.size(), 0.0f);
        ops::rmsnorm_backward(Device::kCPU, dx.data(), dw.data(), gated ? dg.data() : nullptr, dy.data(), x.data(),
                              w.data(), g_host, rstd.data(), rows, N);
        ops::rmsnorm_backward(Device::kCPU, dx_inc.data(), dw_inc.data(), gated ? dg_inc.data() : nullptr, dy.data(),
                              x.data(), w.data(), g_host, rstd.data(), rows, N);
        DeviceFloats d_rs(rstd), d_dy(dy), d_dx(dx0), d_dw(dw0), d_dg(dg0);
        ops::rmsnorm_backward(Device::kCUDA, d_dx.data(), d_dw.data(), gated ? d_dg.data() : nullptr, d_dy.data(),
                              d_x.data(), d_w.data(), g_dev, d_rs.data(), rows, N);

        // dx, dg: per element, the row's dot product enters divided by N, so its reduction-order error is
        // negligible; what remains is pointwise rounding and the CPU sigmoid, amplified by rstd (up to ~100 for
        // a row of small x) on the cancelling x^2 rstd^2 terms: atol 1e-5, rtol 2e-5 of |d0| + |increment|.
        const std::vector<double> mag_x = accumulated_mag(dx0, dx_inc), mag_g = accumulated_mag(dg0, dg_inc);
        expect_close(d_dx.host(), dx, 1e-5, 2e-5, what + " dx (accumulated)", &mag_x);
        if (gated) expect_close(d_dg.host(), dg, 1e-5, 2e-5, what + " dg (accumulated)", &mag_g);
        // dw: a column sum over all rows whose terms cancel; the reduction-order error scales with the sum of
        // |terms| (u per add along paths of length ~sqrt(rows)), so the magnitude is |dw0| + sum_rows |term|.
        std::vector<double> mag_w(static_cast<size_t>(N));
        for (int64_t j = 0; j < N; ++j) {
          double s = std::fabs(double(dw0[size_t(j)]));
          for (int64_t r = 0; r < rows; ++r) {
            const size_t i = size_t(r * N + j);
            s += std::fabs(double(dy[i]) * (gated ? sigmoid(g[i]) : 1.0) * x[i] * rstd[size_t(r)]);
          }
          mag_w[size_t(j)] = s;
        }
        expect_close(d_dw.host(), dw, 1e-5, 2e-5, what + " dw (accumulated over rows)", &mag_w);
      }
  cuda::synchronize();
}

TEST(CudaOps, SoftmaxForwardBackwardMatchCpu) {
  if (!myriad::cuda::available()) GTEST_SKIP() << "no CUDA device: CUDA op tests skipped";
  cuda::init();
  std::mt19937 rng(10);
  for (float range : {8.0f, 240.0f})  // 240: exp would overflow without the max subtraction
    for (int64_t rows : kRowCounts)
      for (int64_t N : kRowLengths) {
        if (rows * N > 1031 * 1031) continue;
        const std::string what = "softmax range " + std::to_string(int(range)) + " " + shape_name(rows, N);
        const Floats x = random_floats(rng, rows * N, -range, range);
        Floats y(x.size());
        ops::softmax_forward(Device::kCPU, y.data(), x.data(), rows, N);
        DeviceFloats d_x(x), d_y(Floats(x.size(), 0.0f)), d_inplace(x);
        ops::softmax_forward(Device::kCUDA, d_y.data(), d_x.data(), rows, N);
        ops::softmax_forward(Device::kCUDA, d_inplace.data(), d_inplace.data(), rows, N);  // y may be x
        // NOTE: y = exp(x - max) / sum: relative differences from expf (2 ulp on CUDA, 2e-7 on the CPU), the
        // sum's order (~log2(N) u) and, if the CPU goes through exp(x - lse), u |lse| (lse <= ~250 at range 240:
        // 1.5e-5): rtol 5e-5. atol 1e-9 for the underflowing tail (the CPU's exp flushes below e^-87).
        expect_close(d_y.host(), y, 1e-9, 5e-5, what + " y");
        expect_close(d_inplace.host(), y, 1e-9, 5e-5, what + " y in place");

        const Floats dy = random_floats(rng, rows * N), dx0 = random_floats(rng, rows * N);
        Floats dx = dx0, dx_inc(dx0.size(), 0.0f);
        ops::softmax_backward(Device::kCPU, dx.data(), dy.data(), y.data(), rows, N);
        ops::softmax_backward(Device::kCPU, dx_inc.data(), dy.data(), y.data(), rows, N);
        DeviceFloats d_yy(y), d_dy(dy), d_dx(dx0);
        ops::softmax_backward(Device::kCUDA, d_dx.data(), d_dy.data(), d_yy.data(), rows, N);
        // dx += y (dy - <dy, y>): <dy, y> is a convex combination of dy (|.| <= 1), its order error ~u, and
        // dy - dot may cancel: atol 1e-6 (u times |dy| + |dot| <= 2, with headroom), rtol 2e-5 of |d0| + |inc|.
        const std::vector<double> mag = accumulated_mag(dx0, dx_inc);
        expect_close(d_dx.host(), dx, 1e-6, 2e-5, what + " dx (accumulated)", &mag);
      }
  cuda::synchronize();
}

}  // namespace
}  // namespace myriad

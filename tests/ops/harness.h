// Op harness helpers (in the spirit of ggml's test-backend-ops): random inputs, comparison of a backend's
// f32 result with the double-precision reference, and central finite differences of the reference.
// Every comparison states its tolerance at the call site with the reason.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace myriad::test {

using Vec = std::vector<double>;

inline size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

inline Vec random_vec(std::mt19937& rng, int64_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Inputs are rounded to f32 first, so the reference (double) and the backend (float) see the same numbers.
inline Vec f32_round(Vec v) {
  for (auto& x : v) x = double(float(x));
  return v;
}
inline std::vector<float> to_f(const Vec& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Sentinel-guarded f32 buffer: a kernel writing past its end is caught.
class Guarded {
 public:
  explicit Guarded(const std::vector<float>& v) : buf_(v.size() + 2 * kPad, kSentinel) {
    std::copy(v.begin(), v.end(), buf_.begin() + kPad);
  }
  explicit Guarded(size_t n, float fill = 0.0f) : buf_(n + 2 * kPad, kSentinel) {
    std::fill(buf_.begin() + kPad, buf_.end() - kPad, fill);
  }
  float* data() { return buf_.data() + kPad; }
  size_t size() const { return buf_.size() - 2 * kPad; }
  std::vector<float> values() const { return std::vector<float>(buf_.begin() + kPad, buf_.end() - kPad); }
  bool intact() const {
    for (size_t i = 0; i < kPad; ++i)
      if (!same(buf_[i]) || !same(buf_[buf_.size() - 1 - i])) return false;
    return true;
  }

 private:
  static constexpr size_t kPad = 16;
  static constexpr float kSentinel = -12345.678f;
  static bool same(float x) { return x == kSentinel; }
  std::vector<float> buf_;
};

// |got - want| <= atol + rtol * |want| elementwise; reports the worst element.
inline void expect_close(const std::vector<float>& got, const Vec& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << ": NaN at " << i;
    const double excess = std::abs(double(got[i]) - want[i]) - (atol + rtol * std::abs(want[i]));
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << at << " got " << got[at] << " want " << want[at] << " (rtol " << rtol
                        << ", atol " << atol << ")";
}

inline void expect_close(const Vec& got, const Vec& want, double rtol, double atol, const std::string& what) {
  expect_close(std::vector<float>(got.begin(), got.end()), want, rtol, atol, what);
}

// Central finite differences of a scalar function of one input vector, at up to `samples` coordinates
// (spread over the vector), compared with the analytic gradient.
// NOTE: run in double with h = 1e-6: truncation error O(h^2) ~ 1e-12 and rounding ~ 1e-16/h ~ 1e-10, so a
// relative tolerance of 1e-6 separates a correct gradient from a wrong one by many orders of magnitude.
inline void expect_grad_fd(const std::function<double(const Vec&)>& loss, Vec x, const Vec& grad,
                           const std::string& what, int samples = 24, double h = 1e-6, double rtol = 1e-6,
                           double atol = 1e-7) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  if (x.empty()) return;
  const size_t n = x.size();
  const size_t step = std::max<size_t>(1, n / size_t(samples));
  for (size_t i = 0; i < n; i += step) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(x);
    x[i] = x0 - h;
    const double lm = loss(x);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(grad[i], fd, atol + rtol * std::abs(fd)) << what << ": d/dx[" << i << "]";
  }
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace myriad::test

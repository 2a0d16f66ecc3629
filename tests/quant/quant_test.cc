// Block quantization (quant/quant.h, quant/quantize_checkpoint.h): the stored layout decoded by an independent
// reference written here, the error bound of each format, quant_matmul (every compiled-in kernel) against a naive
// double loop over dequantize(q), quantizing a tiny random checkpoint, and corrupt quantized checkpoints.
#include "quant/quant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "deploy/quantize_checkpoint.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/init.h"
#include "model/param_spec.h"

namespace fs = std::filesystem;
using namespace myriad;

namespace {

const std::string kTiny = MYRIAD_SOURCE_DIR "/configs/tiny.json";
const QuantType kTypes[] = {QuantType::kQ8, QuantType::kQ4, QuantType::kMxfp4};

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error of kind " << error_kind_name(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// Weights N(0, 1) with a few outliers (x20), so groups have different scales.
Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 50);
  std::vector<float> v(size_t(rows * cols));
  for (auto& x : v) x = scale * nd(rng) * (pick(rng) == 0 ? 20.0f : 1.0f);
  return Tensor::from_vector(v, {rows, cols});
}

// ---- the independent reference decoder of the stored layout (quant.h) ----
double ref_e2m1(int code) {
  const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -mag[code & 7] : mag[code & 7];
}
// The group's scale as stored (q8 / q4: f16 d; mxfp4: 2^(e-127)).
double ref_scale(const QuantMatrix& q, int64_t r, int64_t g) {
  const int64_t G = q.cols / 32;
  if (q.type == QuantType::kMxfp4) return std::ldexp(1.0, int(q.scales.data<uint8_t>()[r * G + g]) - 127);
  return f16_to_f32(q.scales.data<uint16_t>()[r * G + g]);
}
// The integer code (q8 / q4) or the 4-bit E2M1 code (mxfp4) of element [r, c].
int ref_code(const QuantMatrix& q, int64_t r, int64_t c) {
  const uint8_t* codes = q.codes.data<uint8_t>();
  if (q.type == QuantType::kQ8) return int8_t(codes[r * q.cols + c]);
  const uint8_t b = codes[r * (q.cols / 2) + c / 2];
  const int nib = (c % 2 == 0) ? (b & 0xf) : (b >> 4);
  return q.type == QuantType::kQ4 ? nib - 8 : nib;
}
double ref_value(const QuantMatrix& q, int64_t r, int64_t c) {
  const double d = ref_scale(q, r, c / 32);
  return q.type == QuantType::kMxfp4 ? d * ref_e2m1(ref_code(q, r, c)) : d * ref_code(q, r, c);
}

// A fresh directory per test, removed afterwards.
class QuantDirTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(testing::TempDir()) / (std::string("myriad_quant_") + info->test_suite_name() + "_" + info->name() +
                                           "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

}  // namespace

// ---- names ----

TEST(Quant, NamesAndBits) {
  for (QuantType t : kTypes) EXPECT_EQ(parse_quant_type(quant_type_name(t)), t);
  EXPECT_STREQ(quant_type_name(QuantType::kMxfp4), "mxfp4");
  expect_error([] { parse_quant_type("int4"); }, ErrorKind::kValue, {"int4", "q8, q4, mxfp4"});
  EXPECT_DOUBLE_EQ(quant_bits_per_weight(QuantType::kQ8), 8.5);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight(QuantType::kQ4), 4.5);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight(QuantType::kMxfp4), 4.25);
  // Bytes of a quantized matrix agree with the bits per weight.
  for (QuantType t : kTypes) {
    const QuantMatrix q = quantize(random_matrix(8, 64, 1), t);
    EXPECT_DOUBLE_EQ(8.0 * double(q.bytes()) / (8 * 64), quant_bits_per_weight(t)) << quant_type_name(t);
  }
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}

// ---- formats ----

// The E2M1 table, and a group made of exactly representable values times 2^k: stored exactly, with the
// expected codes and exponent 127 + k.
TEST(Quant, E2M1CodeTable) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(kE2M1Values[c], want[c]) << "code " << c;
    EXPECT_EQ(double(kE2M1Values[c]), ref_e2m1(c)) << "code " << c;
  }
  for (int k : {-3, 0, 5}) {
    std::vector<float> v(32);
    for (int i = 0; i < 32; ++i) v[size_t(i)] = std::ldexp(want[i % 16], k);
    const QuantMatrix q = quantize(Tensor::from_vector(v, {1, 32}), QuantType::kMxfp4);
    EXPECT_EQ(int(q.scales.data<uint8_t>()[0]), 127 + k);
    for (int i = 0; i < 32; ++i) {
      const int code = ref_code(q, 0, i);
      EXPECT_EQ(ref_value(q, 0, i), double(v[size_t(i)])) << "k " << k << " element " << i;
      if (i % 16 != 8) {  // -0 may be stored as +0
        EXPECT_EQ(code, i % 16) << "k " << k << " element " << i;
      }
    }
  }
}

// dequantize() matches the independent decoder of the documented layout, element for element.
TEST(Quant, DequantizeMatchesReferenceDecoder) {
  for (QuantType t : kTypes) {
    const QuantMatrix q = quantize(random_matrix(37, 96, 2, 0.05f), t);
    ASSERT_EQ(q.codes.shape(), (Shape{37, t == QuantType::kQ8 ? 96 : 48}));
    ASSERT_EQ(q.scales.shape(), (Shape{37, 3}));
    ASSERT_EQ(q.scales.dtype(), t == QuantType::kMxfp4 ? DType::kU8 : DType::kF16);
    const Tensor d = dequantize(q);
    ASSERT_EQ(d.shape(), (Shape{37, 96}));
    for (int64_t r = 0; r < 37; ++r)
      for (int64_t c = 0; c < 96; ++c)
        ASSERT_EQ(double(d.data<float>()[r * 96 + c]), ref_value(q, r, c))
            << quant_type_name(t) << " [" << r << ", " << c << "]";
  }
}

// q8 and q4: every weight within |d| / 2 of its stored value, with the group's stored scale d, and d no larger than
// the rule of quant.h needs (its exact value rounded up to the next f16).
TEST(Quant, IntegerFormatsErrorBound) {
  for (QuantType t : {QuantType::kQ8, QuantType::kQ4}) {
    for (float scale : {1.0f, 1e-3f, 1e-6f, 300.0f}) {  // 1e-6: scales in f16's subnormal range
      const Tensor w = random_matrix(29, 128, 3, scale);
      const QuantMatrix q = quantize(w, t);
      const float* wp = w.data<float>();
      for (int64_t r = 0; r < 29; ++r) {
        for (int64_t g = 0; g < 4; ++g) {
          double pos = 0, neg = 0;
          for (int i = 0; i < 32; ++i) {
            pos = std::max(pos, double(wp[r * 128 + g * 32 + i]));
            neg = std::max(neg, -double(wp[r * 128 + g * 32 + i]));
          }
          const double amax = std::max(pos, neg);
          const double exact =
              t == QuantType::kQ8 ? amax / 127 : std::min(std::max(neg / 8, pos / 7), std::max(pos / 8, neg / 7));
          const double d = ref_scale(q, r, g);
          EXPECT_GE(std::fabs(d), exact) << "no clipping";
          // One f16 step up: relative 2^-10 for normal f16, absolute 2^-24 in the subnormal range.
          EXPECT_LE(std::fabs(d), exact * (1 + 1.0 / 1024) + std::ldexp(1.0, -24));
          for (int i = 0; i < 32; ++i) {
            const int64_t c = g * 32 + i;
            const int code = ref_code(q, r, c);
            if (t == QuantType::kQ8) {
              EXPECT_GE(code, -127);
            }
            // NOTE: slack 1e-6 |d| for the f32 division that picks the nearest code.
            EXPECT_LE(std::fabs(double(wp[r * 128 + c]) - ref_value(q, r, c)), std::fabs(d) * (0.5 + 1e-6))
                << quant_type_name(t) << " scale " << scale << " [" << r << ", " << c << "]";
          }
        }
      }
    }
  }
}

// mxfp4: the exponent is OCP's floor(log2 max|w|) - 2 or one more, whichever has the smaller squared error; each
// weight is stored as the nearest value of its scale's grid {+-e2m1} x 2^(e-127) (saturating at +-6).
TEST(Quant, Mxfp4NearestValue) {
  for (float scale : {1.0f, 1e-4f, 1e5f}) {
    const Tensor w = random_matrix(31, 64, 4, scale);
    const QuantMatrix q = quantize(w, QuantType::kMxfp4);
    const float* wp = w.data<float>();
    for (int64_t r = 0; r < 31; ++r) {
      for (int64_t g = 0; g < 2; ++g) {
        double amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double(wp[r * 64 + g * 32 + i])));
        const int e_ocp = int(std::floor(std::log2(amax))) - 2 + 127;
        const int e = q.scales.data<uint8_t>()[r * 2 + g];
        EXPECT_TRUE(e == e_ocp || e == e_ocp + 1) << "e " << e << ", OCP " << e_ocp;
        auto grid_error = [&](int ee, int64_t c) {  // distance to the nearest grid value of exponent ee
          double best = std::numeric_limits<double>::infinity();
          for (int code = 0; code < 16; ++code)
            best = std::min(best, std::fabs(double(wp[r * 64 + c]) - std::ldexp(ref_e2m1(code), ee - 127)));
          return best;
        };
        double sse = 0, sse_ocp = 0;
        for (int i = 0; i < 32; ++i) {
          const int64_t c = g * 32 + i;
          const double err = std::fabs(double(wp[r * 64 + c]) - ref_value(q, r, c));
          EXPECT_LE(err, grid_error(e, c) * (1 + 1e-12)) << "[" << r << ", " << c << "]";
          sse += err * err;
          sse_ocp += grid_error(e_ocp, c) * grid_error(e_ocp, c);
        }
        EXPECT_LE(sse, sse_ocp * (1 + 1e-12));
      }
    }
  }
}

TEST(Quant, SpecialGroupsAndBadInput) {
  // An all-zero group stores zero; a group of one value keeps it within the bound.
  std::vector<float> v(64, 0.0f);
  for (int i = 32; i < 64; ++i) v[size_t(i)] = 0.75f;
  for (QuantType t : kTypes) {
    const Tensor d = dequantize(quantize(Tensor::from_vector(v, {1, 64}), t));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(d.data<float>()[i], 0.0f);
    for (int i = 32; i < 64; ++i) EXPECT_NEAR(d.data<float>()[i], 0.75f, 0.75 / 127) << quant_type_name(t);
  }
  // bf16 input quantizes like its f32 value.
  const Tensor w = random_matrix(5, 64, 5);
  const Tensor wb = w.to(DType::kBF16);
  for (QuantType t : kTypes) {
    const Tensor a = dequantize(quantize(wb, t)), b = dequantize(quantize(wb.to(DType::kF32), t));
    EXPECT_EQ(a.to_vector(), b.to_vector());
  }
  expect_error([] { quantize(Tensor::zeros({4, 48}), QuantType::kQ8); }, ErrorKind::kShape, {"[4, 48]", "32"});
  expect_error([] { quantize(Tensor::zeros({64}), QuantType::kQ4); }, ErrorKind::kShape, {"[64]"});
  expect_error([] { quantize(Tensor::zeros({2, 0}), QuantType::kQ4); }, ErrorKind::kShape, {"[2, 0]"});
  std::vector<float> bad(64, 1.0f);
  bad[40] = std::numeric_limits<float>::quiet_NaN();
  expect_error(
      [&] {
        quantize(Tensor::from_vector(bad, {2, 32}), QuantType::kMxfp4);
      },
      ErrorKind::kValue, {"non-finite", "[1, 8]"});
  std::vector<float> huge(32, 1e7f);  // 1e7 / 127 is beyond f16's 65504
  expect_error([&] { quantize(Tensor::from_vector(huge, {1, 32}), QuantType::kQ8); }, ErrorKind::kValue, {"f16"});
  EXPECT_NO_THROW(quantize(Tensor::from_vector(huge, {1, 32}), QuantType::kMxfp4));
  // A malformed QuantMatrix is refused by the consumers.
  QuantMatrix q = quantize(random_matrix(4, 64, 6), QuantType::kQ4);
  q.cols = 128;
  std::vector<float> x(128), y(4);
  expect_error([&] { ops::quant_matmul(Device::kCPU, q, x.data(), 1, y.data()); }, ErrorKind::kShape,
               {"quant_matmul", "codes"});
  expect_error([&] { dequantize(q); }, ErrorKind::kShape, {"dequantize"});
}

// Block-quantized products are ops of the kernel table: a device without their kernel is refused by name.
TEST(QuantMatmul, ADeviceWithoutTheKernelIsRefusedNamingTheOp) {
  const QuantMatrix q = quantize(Tensor::full({4, 32}, 0.5f), QuantType::kQ8);
  std::vector<float> x(32, 1.0f), y(4, -1.0f);
  for (const char* op : {"quant_matmul", "quant_matmul_many"}) {
    try {
      if (std::string(op) == "quant_matmul") {
        ops::quant_matmul(Device::kCUDA, q, x.data(), 1, y.data());
      } else {
        const QuantMatrix* ws[] = {&q};
        float* ys[] = {y.data()};
        ops::quant_matmul_many(Device::kCUDA, ws, x.data(), 1, ys);
      }
      ADD_FAILURE() << op << " on cuda did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("op '" + std::string(op) + "' has no kernel for device cuda"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(y, std::vector<float>(4, -1.0f));  // nothing ran
}

// ---- quant_matmul ----

// Every compiled-in kernel against y_ref = x . dequantize(q)^T in double, for odd row counts, odd group counts,
// decode (1, 3, 16 rows of x) and prefill (100).
// Tolerances (per element):
//  - integer kernels quantize x per group of 32 to int8 (quant.h NOTE): |error| <= sum_g (dx_g / 2) sum_{i in g}
//    |W_i|, dx_g = max|x_g| / 127; plus f32 rounding of the scaled group sums, bounded by (G + 4) 2^-24 sum |x||W|
//    (each group's integer sum is exact; its scale product, conversion and the G-term sum each round once).
//  - dequant + sgemm uses x exactly: f32 accumulation only, bounded by cols 2^-24 sum |x||W|.
//  Both with a factor 2 for safety.
TEST(QuantMatmul, AgreesWithNaiveLoop) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{96, 64}, {257, 128}, {33, 96}, {4, 32}, {520, 512}};
  std::vector<QuantKernel> kernels;
  for (QuantKernel k : {QuantKernel::kAuto, QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvx512Vnni,
                        QuantKernel::kAvx512VnniGemm, QuantKernel::kDequantGemm})
    if (quant_kernel_available(k)) kernels.push_back(k);
  std::printf("kernels tested:");
  for (QuantKernel k : kernels) std::printf(" %s", quant_kernel_name(k));
  std::printf("\n");
  const double u = std::ldexp(1.0, -24);
  uint32_t seed = 10;
  for (QuantType t : kTypes) {
    for (auto [rows, cols] : shapes) {
      const QuantMatrix q = quantize(random_matrix(rows, cols, ++seed, 0.1f), t);
      const Tensor wd = dequantize(q);
      const float* W = wd.data<float>();
      const int64_t G = cols / 32;
      for (int64_t n : {1, 3, 16, 100}) {
        if (rows * cols > 100000 && n == 16) continue;  // the big shape: decode (1, 3) and prefill (100) suffice
        const Tensor xt = random_matrix(n, cols, ++seed);
        const float* x = xt.data<float>();
        std::vector<double> ref(size_t(n * rows)), act_bound(size_t(n * rows)), mag(size_t(n * rows));
        for (int64_t i = 0; i < n; ++i) {
          std::vector<double> dx(static_cast<size_t>(G));
          for (int64_t g = 0; g < G; ++g) {
            double amax = 0;
            for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(double(x[i * cols + g * 32 + k])));
            dx[size_t(g)] = amax / 127;
          }
          for (int64_t r = 0; r < rows; ++r) {
            double s = 0, b = 0, m = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double wv = W[r * cols + c], xv = x[i * cols + c];
              s += wv * xv;
              b += dx[size_t(c / 32)] / 2 * std::fabs(wv);
              m += std::fabs(wv * xv);
            }
            ref[size_t(i * rows + r)] = s;
            act_bound[size_t(i * rows + r)] = b;
            mag[size_t(i * rows + r)] = m;
          }
        }
        for (QuantKernel k : kernels) {
          const bool exact_x = k == QuantKernel::kDequantGemm ||
                               (k == QuantKernel::kAuto && n >= quant_gemm_rows() && quant_gemm_exact_x());
          std::vector<float> y(size_t(n * rows), -1e30f);
          ops::quant_matmul(Device::kCPU, q, x, n, y.data(), k);
          int bad = 0;
          for (int64_t e = 0; e < n * rows; ++e) {
            const double tol =
                exact_x ? 2 * (double(cols) * u * mag[size_t(e)]) + 1e-30
                        : 2 * (act_bound[size_t(e)] + double(G + 4) * u * (mag[size_t(e)] + act_bound[size_t(e)]));
            if (!(std::fabs(double(y[size_t(e)]) - ref[size_t(e)]) <= tol) && bad++ < 3)
              ADD_FAILURE() << quant_type_name(t) << " " << quant_kernel_name(k) << " [" << rows << ", " << cols
                            << "] n " << n << " y[" << e / rows << ", " << e % rows << "] = " << y[size_t(e)]
                            << ", want " << ref[size_t(e)] << " +- " << tol;
          }
        }
      }
    }
  }
}

// The integer kernels agree with each other up to f32 summation order (their integer group sums are identical).
// 70 rows (the packed GEMM: 4 whole blocks of 16 and a tail of 6), 5 groups (odd: VNNI's pair steps), and row counts
// of x that leave every tile width's tail (the packed GEMM's tiles are 6 tokens).
TEST(QuantMatmul, KernelsAgree) {
  for (QuantType t : kTypes)
    for (int64_t n : {1, 5, 13, 40}) {
      const QuantMatrix q = quantize(random_matrix(70, 160, 40, 0.1f), t);
      const Tensor xt = random_matrix(n, 160, 41);
      std::vector<float> ys(size_t(n * 70));
      ops::quant_matmul(Device::kCPU, q, xt.data<float>(), n, ys.data(), QuantKernel::kScalar);
      for (QuantKernel k : {QuantKernel::kAvx2, QuantKernel::kAvx512Vnni, QuantKernel::kAvx512VnniGemm}) {
        if (!quant_kernel_available(k)) continue;
        std::vector<float> y(size_t(n * 70), -1e30f);
        ops::quant_matmul(Device::kCPU, q, xt.data<float>(), n, y.data(), k);
        for (size_t i = 0; i < y.size(); ++i)
          EXPECT_NEAR(y[i], ys[i], 1e-5 * (1 + std::fabs(ys[i])))
              << quant_type_name(t) << " " << quant_kernel_name(k) << " n " << n << " at " << i;
      }
    }
}

// Several matrices of one width times one x (decode's fused projections) equal each product alone, exactly: the
// same quantized x and the same tiles, only the split of the strips over threads differs. Rows that are not a
// whole number of strips, an empty matrix, a batch of rows, and the refusals.
TEST(QuantMatmul, ManyEqualsEachAlone) {
  for (QuantType t : kTypes)
    for (int64_t n : {1, 3}) {
      const QuantMatrix a = quantize(random_matrix(70, 160, 60, 0.1f), t), b = quantize(random_matrix(8, 160, 61), t),
                        c = quantize(random_matrix(300, 160, 62), t), e = quantize(random_matrix(0, 160, 63), t);
      const Tensor x = random_matrix(n, 160, 64);
      const QuantMatrix* ws[] = {&a, &b, &e, &c};
      std::vector<float> ya(size_t(n * 70)), yb(size_t(n * 8)), yc(size_t(n * 300)), ye(1, -3.0f);
      float* ys[] = {ya.data(), yb.data(), ye.data(), yc.data()};
      ops::quant_matmul_many(Device::kCPU, ws, x.data<float>(), n, ys);
      for (const auto& [w, y] : {std::pair{&a, &ya}, std::pair{&b, &yb}, std::pair{&c, &yc}}) {
        std::vector<float> alone(y->size());
        ops::quant_matmul(Device::kCPU, *w, x.data<float>(), n, alone.data());
        EXPECT_EQ(*y, alone) << quant_type_name(t) << " n " << n << " rows " << w->rows;
      }
      EXPECT_EQ(ye[0], -3.0f);  // the empty matrix writes nothing
    }
  const QuantMatrix q8 = quantize(random_matrix(16, 64, 65), QuantType::kQ8),
                    q4 = quantize(random_matrix(16, 64, 66), QuantType::kQ4),
                    wide = quantize(random_matrix(16, 96, 67), QuantType::kQ8);
  std::vector<float> x(96, 0.5f), y0(16), y1(16);
  float* ys[] = {y0.data(), y1.data()};
  const QuantMatrix* mixed[] = {&q8, &q4};
  const QuantMatrix* widths[] = {&q8, &wide};
  EXPECT_THROW(ops::quant_matmul_many(Device::kCPU, mixed, x.data(), 1, ys), Error);
  EXPECT_THROW(ops::quant_matmul_many(Device::kCPU, widths, x.data(), 1, ys), Error);
  EXPECT_THROW(ops::quant_matmul_many(Device::kCPU, std::span<const QuantMatrix* const>(mixed, 1), x.data(), 1, ys),
               Error);
}

// NaN / inf in x make the outputs that read them NaN (never a silently finite number); n = 0 is a no-op.
TEST(QuantMatmul, NonFiniteInputAndEmpty) {
  const QuantMatrix q = quantize(random_matrix(8, 64, 50), QuantType::kQ8);
  std::vector<float> x(2 * 64, 0.5f);
  x[70] = std::numeric_limits<float>::infinity();  // row 1
  for (QuantKernel k : {QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvx512Vnni,
                        QuantKernel::kAvx512VnniGemm, QuantKernel::kDequantGemm}) {
    if (!quant_kernel_available(k)) continue;
    std::vector<float> y(2 * 8);
    ops::quant_matmul(Device::kCPU, q, x.data(), 2, y.data(), k);
    for (int r = 0; r < 8; ++r) {
      EXPECT_TRUE(std::isfinite(y[size_t(r)])) << quant_kernel_name(k);
      EXPECT_FALSE(std::isfinite(y[size_t(8 + r)])) << quant_kernel_name(k);
    }
  }
  std::vector<float> y(1, 123.0f);
  ops::quant_matmul(Device::kCPU, q, x.data(), 0, y.data());
  EXPECT_EQ(y[0], 123.0f);
}

// ---- checkpoints ----

namespace {

// The tiny random model of configs/tiny.json, plus a tokenizer directory to copy.
std::string make_model(const std::string& dir) {
  InitOptions opt;
  opt.seed = 7;
  write_random_model(kTiny, dir, opt);
  fs::create_directories(fs::path(dir) / "tokenizer" / "sub");
  std::ofstream(fs::path(dir) / "tokenizer" / "tokenizer.model") << "not really a tokenizer";
  std::ofstream(fs::path(dir) / "tokenizer" / "sub" / "extra.txt") << "nested";
  return dir;
}

bool linear_rule(const ParamSpec& s, bool only_experts) {
  const Component c = s.component;
  const bool linear = s.shape.size() == 2 && c != Component::kEmbeddings && c != Component::kRouter &&
                      c != Component::kNorms && c != Component::kAttnRes;
  return linear && (!only_experts || c == Component::kRoutedExperts);
}

}  // namespace

TEST_F(QuantDirTest, QuantizesTinyModel) {
  const std::string in = make_model(path("in"));
  const ModelConfig mc = load_model_config(kTiny, nullptr);
  const Checkpoint orig = Checkpoint::open(in);
  for (QuantType t : kTypes) {
    for (bool only_experts : {false, true}) {
      const std::string out = path(std::string("out_") + quant_type_name(t) + (only_experts ? "_experts" : "_all"));
      const QuantizeReport r = quantize_checkpoint(in, out, t, only_experts, false);
      SCOPED_TRACE(out);
      EXPECT_EQ(r.tensors_quantized + r.tensors_kept, int64_t(orig.names().size()));
      EXPECT_EQ(r.bytes_before, orig.total_bytes());
      EXPECT_EQ(r.kept_unknown, 0);
      EXPECT_NEAR(r.quantized_bits_per_weight(), quant_bits_per_weight(t), 1e-9);

      const Checkpoint ck = Checkpoint::open(out);
      EXPECT_EQ(ck.metadata().at(kQuantMetadataKey), quant_type_name(t));
      EXPECT_EQ(r.bytes_after, ck.total_bytes());
      int64_t quantized = 0, indivisible = 0;
      for (const ParamSpec& s : model_param_specs(mc)) {
        const bool want = linear_rule(s, only_experts) && s.shape[1] % 32 == 0;
        if (linear_rule(s, only_experts) && s.shape[1] % 32 != 0) ++indivisible;
        const std::optional<QuantMatrix> q = load_quant_matrix(ck, s.name);
        ASSERT_EQ(q.has_value(), want) << s.name;
        if (!want) {  // kept: the same bytes
          ASSERT_TRUE(ck.contains(s.name)) << s.name;
          const Tensor a = ck.tensor(s.name), b = orig.tensor(s.name);
          ASSERT_EQ(a.dtype(), b.dtype());
          ASSERT_EQ(a.shape(), b.shape());
          EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << s.name;
          continue;
        }
        ++quantized;
        EXPECT_FALSE(ck.contains(s.name)) << s.name;
        EXPECT_EQ(q->type, t);
        EXPECT_EQ(q->rows, s.shape[0]);
        EXPECT_EQ(q->cols, s.shape[1]);
        // The stored matrix is the quantization of the original.
        const Tensor mine = dequantize(quantize(orig.tensor(s.name), t)), stored = dequantize(*q);
        EXPECT_EQ(mine.to_vector(), stored.to_vector()) << s.name;
      }
      EXPECT_EQ(quantized, r.tensors_quantized);
      EXPECT_EQ(indivisible, r.kept_indivisible);
      if (!only_experts) {
        EXPECT_GT(indivisible, 0) << "tiny.json's KDA f_b_proj has 16 inputs";
        EXPECT_FALSE(load_quant_matrix(ck, "model.embed_tokens.weight").has_value());
        EXPECT_TRUE(load_quant_matrix(ck, "lm_head.weight").has_value());
      }
      EXPECT_TRUE(ck.contains("model.layers.1.block_sparse_moe.gate.weight"));
      EXPECT_TRUE(load_quant_matrix(ck, "model.layers.1.block_sparse_moe.experts.3.w2.weight").has_value());

      // config.json: the record, and it still parses without warnings.
      std::vector<std::string> warnings;
      EXPECT_NO_THROW(load_model_config(out, &warnings));
      EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings[0]);
      std::ifstream cf(fs::path(out) / "config.json");
      const nlohmann::json j = nlohmann::json::parse(cf);
      EXPECT_EQ(j.at("quantization_config"), (nlohmann::json{{"quant_method", "myriad"},
                                                             {"type", quant_type_name(t)},
                                                             {"group_size", 32},
                                                             {"only", only_experts ? "experts" : "all"}}));
      EXPECT_EQ(j.at("hidden_size"), 64);
      EXPECT_TRUE(fs::is_regular_file(fs::path(out) / "tokenizer" / "tokenizer.model"));
      EXPECT_TRUE(fs::is_regular_file(fs::path(out) / "tokenizer" / "sub" / "extra.txt"));
    }
  }
  // Nothing left beside the outputs (temporary directories are renamed or removed).
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(QuantDirTest, RefusesToOverwriteWithoutForce) {
  const std::string in = make_model(path("in"));
  const std::string out = path("out");
  quantize_checkpoint(in, out, QuantType::kQ8, true, false);
  expect_error([&] { quantize_checkpoint(in, out, QuantType::kQ4, true, false); }, ErrorKind::kIo, {out, "--force"});
  EXPECT_EQ(Checkpoint::open(out).metadata().at(kQuantMetadataKey), "q8");  // untouched
  const QuantizeReport r = quantize_checkpoint(in, out, QuantType::kQ4, true, true);
  EXPECT_GT(r.tensors_quantized, 0);
  EXPECT_EQ(Checkpoint::open(out).metadata().at(kQuantMetadataKey), "q4");
  // An empty directory is not "existing output".
  fs::create_directories(path("empty"));
  EXPECT_NO_THROW(quantize_checkpoint(in, path("empty"), QuantType::kQ8, true, false));
  // The input itself, an already quantized input, a missing input.
  expect_error([&] { quantize_checkpoint(in, in, QuantType::kQ8, false, true); }, ErrorKind::kValue, {"input"});
  expect_error([&] { quantize_checkpoint(out, path("again"), QuantType::kQ8, false, false); }, ErrorKind::kValue,
               {"already quantized"});
  expect_error([&] { quantize_checkpoint(path("nope"), path("x"), QuantType::kQ8, false, false); }, ErrorKind::kIo,
               {"nope"});
  EXPECT_FALSE(fs::exists(path("x")));
}

// A training run quantizes as its latest checkpoint (as generate and prune read a run), with the run's tokenizer
// when the checkpoint has none; a directory that is neither a model nor a run is named.
TEST_F(QuantDirTest, QuantizesARunsLatestCheckpoint) {
  const std::string model = make_model(path("model"));
  const fs::path run = path("run"), older = run / "checkpoints" / "step-000001",
                 newer = run / "checkpoints" / "step-000002";
  for (const fs::path& ck : {older, newer}) {
    fs::create_directories(ck);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(model) / f, ck / f);
    std::ofstream(ck / "trainer_state.json") << "{}";
  }
  fs::copy(fs::path(model) / "tokenizer", run / "tokenizer", fs::copy_options::recursive);
  // The older checkpoint's weights differ: the result must come from the newer one.
  {
    const Checkpoint ck = Checkpoint::open(model);
    NamedTensors ts;
    for (const std::string& n : ck.names()) ts.emplace_back(n, Tensor::zeros(ck.tensor(n).shape()));
    fs::remove(older / "model.safetensors");
    save_checkpoint(older.string(), ts);
  }
  std::ofstream(run / "checkpoints" / "latest") << "step-000002\n";
  quantize_checkpoint(run.string(), path("from_run"), QuantType::kQ8, false, false);
  quantize_checkpoint(model, path("from_model"), QuantType::kQ8, false, false);
  const Checkpoint a = Checkpoint::open(path("from_run")), b = Checkpoint::open(path("from_model"));
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& n : a.names()) {
    const Tensor x = a.tensor(n), y = b.tensor(n);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << n;
    EXPECT_EQ(0, std::memcmp(x.raw_data(), y.raw_data(), x.nbytes())) << n;
  }
  EXPECT_TRUE(fs::exists(fs::path(path("from_run")) / "tokenizer" / "tokenizer.model"));
  fs::create_directories(path("neither"));
  expect_error([&] { quantize_checkpoint(path("neither"), path("y"), QuantType::kQ8, false, false); }, ErrorKind::kIo,
               {"neither", "holds no model"});
}

// A tensor whose shape disagrees with the config is named; nothing is written.
TEST_F(QuantDirTest, ShapeMismatchNamesTensor) {
  const std::string in = make_model(path("in"));
  const Checkpoint ck = Checkpoint::open(in);
  NamedTensors ts;
  for (const std::string& n : ck.names()) {
    Tensor t = ck.tensor(n);
    if (n == "model.layers.0.mlp.up_proj.weight") t = Tensor::zeros({t.size(0), t.size(1) + 32});
    ts.emplace_back(n, t);
  }
  const std::string bad = path("bad");
  save_checkpoint(bad, ts);
  fs::copy_file(fs::path(in) / "config.json", fs::path(bad) / "config.json");
  expect_error([&] { quantize_checkpoint(bad, path("out"), QuantType::kQ8, false, false); }, ErrorKind::kFormat,
               {"model.layers.0.mlp.up_proj.weight"});
  EXPECT_FALSE(fs::exists(path("out")));
}

// Corrupt quantized checkpoints: each problem is kFormat naming the tensor.
TEST_F(QuantDirTest, CorruptQuantizedTensors) {
  const QuantMatrix q = quantize(random_matrix(6, 64, 60), QuantType::kQ4);
  const std::string W = "model.w.weight";
  auto write = [&](const std::string& name, const NamedTensors& ts, const std::string& type) {
    std::map<std::string, std::string> meta;
    if (!type.empty()) meta[kQuantMetadataKey] = type;
    save_safetensors(path(name), ts, meta);
    return Checkpoint::open(path(name));
  };
  // Good, and a name that is not quantized.
  const Checkpoint good = write("good.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", q.scales}}, "q4");
  const auto lq = load_quant_matrix(good, W);
  ASSERT_TRUE(lq.has_value());
  EXPECT_EQ(dequantize(*lq).to_vector(), dequantize(q).to_vector());
  EXPECT_FALSE(load_quant_matrix(good, "model.other.weight").has_value());

  const Checkpoint no_scale = write("a.safetensors", {{W + ".qweight", q.codes}}, "q4");
  expect_error([&] { load_quant_matrix(no_scale, W); }, ErrorKind::kFormat, {W + ".qscale", "a.safetensors"});
  const Checkpoint no_codes = write("b.safetensors", {{W + ".qscale", q.scales}}, "q4");
  expect_error([&] { load_quant_matrix(no_codes, W); }, ErrorKind::kFormat, {W + ".qweight"});
  const Checkpoint bad_shape =
      write("c.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", Tensor::zeros({6, 3}, DType::kF16)}}, "q4");
  expect_error([&] { load_quant_matrix(bad_shape, W); }, ErrorKind::kFormat, {W + ".qscale", "[6, 3]", "[6, 2]"});
  const Checkpoint bad_dtype =
      write("d.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", q.scales.to(DType::kF32)}}, "q4");
  expect_error([&] { load_quant_matrix(bad_dtype, W); }, ErrorKind::kFormat, {W + ".qscale", "F32"});
  const Checkpoint no_type = write("e.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", q.scales}}, "");
  expect_error([&] { load_quant_matrix(no_type, W); }, ErrorKind::kFormat, {W + ".qweight", kQuantMetadataKey});
  const Checkpoint bad_type = write("f.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", q.scales}}, "q3");
  expect_error([&] { load_quant_matrix(bad_type, W); }, ErrorKind::kFormat, {"q3", W + ".qweight"});
  // q8 metadata on q4-shaped tensors: the scales no longer match the codes' column count.
  const Checkpoint wrong_type = write("g.safetensors", {{W + ".qweight", q.codes}, {W + ".qscale", q.scales}}, "q8");
  expect_error([&] { load_quant_matrix(wrong_type, W); }, ErrorKind::kFormat, {W + ".qscale"});
  const Checkpoint both =
      write("h.safetensors", {{W, Tensor::zeros({6, 64})}, {W + ".qweight", q.codes}, {W + ".qscale", q.scales}}, "q4");
  expect_error([&] { load_quant_matrix(both, W); }, ErrorKind::kFormat, {W, "both"});
  const Checkpoint flat =
      write("i.safetensors", {{W + ".qweight", q.codes.view({-1})}, {W + ".qscale", q.scales}}, "q4");
  expect_error([&] { load_quant_matrix(flat, W); }, ErrorKind::kFormat, {W + ".qweight", "2-D"});
  const Checkpoint odd_cols =
      write("j.safetensors",
            {{W + ".qweight", Tensor::zeros({6, 40}, DType::kU8)}, {W + ".qscale", Tensor::zeros({6, 2}, DType::kF16)}},
            "q4");
  expect_error([&] { load_quant_matrix(odd_cols, W); }, ErrorKind::kFormat, {W + ".qweight", "80", "32"});
}

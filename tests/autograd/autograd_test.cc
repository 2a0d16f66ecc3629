// Autograd: tape wiring, accumulation, no_grad, errors, and gradients of composed graphs against finite
// differences. The kernels themselves are checked in double by tests/ops; here the question is whether the
// tape connects them correctly, so f32 central differences suffice.
// NOTE: f32 finite differences with h = 1e-2 on O(1) losses: rounding error ~ |L| 6e-8 / h ~ 3e-5 and
// truncation ~ h^2 |L'''| ~ 1e-4, so atol 2e-3 + rtol 2e-2 passes a correct gradient and fails a
// mis-wired one (wrong transpose, missing term, wrong input), which is off by O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autograd/functions.h"
#include "ops/rope_table.h"

namespace myriad::ag {
namespace {

Tensor randn(std::mt19937& rng, const Shape& s, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  Tensor t = Tensor::empty(s);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

// Checks d loss / d param for every element (or a spread sample) by central differences in f32.
void check_param_grad(const std::function<Var()>& loss_fn, Var& param, const std::string& what, int samples = 20) {
  for (auto* v : {&param}) v->zero_grad();
  Var loss = loss_fn();
  backward(loss);
  ASSERT_TRUE(param.has_grad()) << what;
  const std::vector<float> g = param.grad().to_vector();
  float* p = param.value().data<float>();
  const int64_t n = param.value().numel();
  const int64_t step = std::max<int64_t>(1, n / samples);
  NoGradGuard no_grad;
  for (int64_t i = 0; i < n; i += step) {
    const float x0 = p[i], h = 1e-2f;
    p[i] = x0 + h;
    const double lp = loss_fn().value().data<float>()[0];
    p[i] = x0 - h;
    const double lm = loss_fn().value().data<float>()[0];
    p[i] = x0;
    const double fd = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(g[size_t(i)], fd, 2e-3 + 2e-2 * std::abs(fd)) << what << "[" << i << "]";
  }
}

TEST(Autograd, UsedTwiceAccumulatesAndBackwardTwiceAccumulatesIntoLeaves) {
  Var x(Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 3.0f}, {3}), true);
  Var y = sum(add(mul(x, x), x));  // d/dx = 2x + 1
  backward(y);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3.0f, -3.0f, 7.0f}));
  backward(sum(add(mul(x, x), x)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{6.0f, -6.0f, 14.0f}));
  x.zero_grad();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Var x(Tensor::full({4}, 2.0f), true);
  Tape::current().clear();
  {
    NoGradGuard guard;
    Var y = silu(mul(x, x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(Tape::current().size(), 0u);
  }
  Var z = silu(x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_EQ(Tape::current().size(), 1u);
  Tape::current().clear();
  // A loss that depends on nothing trainable is an error, not a silent no-op.
  Var c(Tensor::full({}, 1.0f), false);
  EXPECT_THROW(backward(c), Error);
}

TEST(Autograd, ShapeErrorsNameBothShapes) {
  Var a(Tensor::zeros({2, 3}), true), b(Tensor::zeros({4, 5}), true);
  try {
    matmul(a, b);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  }
  EXPECT_THROW(add(a, b), Error);
  Tape::current().clear();
}

TEST(Autograd, MatmulAllTransposesAndBatchedGradients) {
  std::mt19937 rng(1);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool batched : {false, true}) {
        const int64_t M = 3, K = 4, N = 5, Bt = 2;
        Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
        if (batched) {
          sa.insert(sa.begin(), Bt);
          sb.insert(sb.begin(), Bt);
        }
        Var a(randn(rng, sa), true), b(randn(rng, sb), true);
        Var w(randn(rng, batched ? Shape{Bt, M, N} : Shape{M, N}), false);
        auto f = [&] { return sum(mul(matmul(a, b, ta, tb), w)); };
        check_param_grad(f, a, "matmul dA");
        check_param_grad(f, b, "matmul dB");
      }
}

TEST(Autograd, BroadcastingBackwardReducesOverBroadcastAxes) {
  std::mt19937 rng(2);
  Var x(randn(rng, {2, 3, 4}), true), row(randn(rng, {4}), true), col(randn(rng, {2, 3, 1}), true),
      s(randn(rng, {}), true);
  Var w(randn(rng, {2, 3, 4}), false);
  auto f = [&] { return sum(mul(add(mul(add(x, row), col), s), w)); };
  check_param_grad(f, x, "x");
  check_param_grad(f, row, "row [4]");
  check_param_grad(f, col, "col [2,3,1]");
  check_param_grad(f, s, "scalar []");
}

// A small transformer-ish block through every op family: embedding -> linear -> conv1d -> l2norm -> rope ->
// attention -> gated rmsnorm -> SiTU-GLU -> MoE-style gather/weighted scatter -> softmax/log-softmax ->
// fused cross-entropy.
TEST(Autograd, ComposedGraphGradientsMatchFiniteDifferences) {
  std::mt19937 rng(3);
  const int64_t T = 6, D = 8, V = 11, H = 2, Dh = 4, W = 3, F = 5;
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 4, 7, 0, 10}, {T});
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{4, 4, -100, 0, 10, 3}, {T});
  Var emb(randn(rng, {V, D}, 0.5f), true, "emb");
  Var wgate(randn(rng, {D, D}, 0.4f), true, "wgate");
  Var conv(randn(rng, {D, W}, 0.5f), true, "conv");
  Var norm_w(randn(rng, {Dh}, 0.3f), true, "norm_w");
  Var wg(randn(rng, {F, D}, 0.5f), true, "wg");
  Var wu(randn(rng, {F, D}, 0.5f), true, "wu");
  Var wd(randn(rng, {D, F}, 0.5f), true, "wd");
  Var route(randn(rng, {T}, 0.5f), true, "route");
  Var head(randn(rng, {V, D}, 0.5f), true, "lm_head");
  Var wd2(randn(rng, {D, D}, 0.5f), true, "wv");
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;
  const RopeTables rt = make_rope_tables(pos, Dh, 10000.0, nullptr);
  Tensor perm = Tensor::from_vector(std::vector<int32_t>{5, 0, 3, 3, 1, 2}, {T});

  auto model = [&]() {
    Var x = embedding(emb, ids);  // [T, D]
    auto [c, state] = conv1d(reshape(x, {1, T, D}), conv, Var());
    (void)state;
    Var xs = add(x, silu(reshape(c, {T, D})));
    Var h = l2norm(reshape(xs, {T, H, Dh}), 1e-6f);
    Var hr = rope(h, rt.cos, rt.sin, RopeLayout{0, Dh, false});
    Var qk = reshape(hr, {1, T, H, Dh});
    Var a = attention(qk, qk, reshape(linear(x, wd2), {1, T, H, Dh}), 0.5f);  // q = k: both paths accumulate
    Var g = linear(xs, wg), u = linear(xs, wu);
    Var ffn = linear(situ_glu(g, u, SituParams{4.0f, 25.0f}), wd);  // [T, D]
    Var routed = scatter_add_rows(T, gather_rows(ffn, perm), perm, sigmoid(route));
    Var y = add(add(xs, routed), reshape(a, {T, D}));
    Var gated = rmsnorm_gated(reshape(y, {T, H, Dh}), norm_w, reshape(linear(x, wgate), {T, H, Dh}), 1e-6f);
    Var z = add(reshape(gated, {T, D}), scale(softmax(log_softmax(y)), 0.5f));
    return cross_entropy(z, head, targets);
  };
  for (Var* p : {&emb, &wgate, &conv, &norm_w, &wg, &wu, &wd, &wd2, &route, &head})
    check_param_grad(model, *p, p->name());
}

// Attention, conv1d (with a trainable carried state) and rope gradients wired end to end.
TEST(Autograd, SequenceOpsGradients) {
  std::mt19937 rng(4);
  const int64_t B = 1, T = 5, H = 2, Hk = 1, Dk = 4, Dv = 3, C = 3, W = 4;
  Var q(randn(rng, {B, T, H, Dk}), true, "q"), k(randn(rng, {B, T, Hk, Dk}), true, "k"),
      v(randn(rng, {B, T, Hk, Dv}), true, "v");
  Var wo(randn(rng, {B, T, H, Dv}), false);
  auto att = [&] { return sum(mul(attention(q, k, v, 0.5f), wo)); };
  check_param_grad(att, q, "attention dq");
  check_param_grad(att, k, "attention dk");
  check_param_grad(att, v, "attention dv");
  Var x(randn(rng, {B, T, C}), true, "x"), w(randn(rng, {C, W}), true, "w"), st(randn(rng, {B, W - 1, C}), true, "st");
  Var wc(randn(rng, {B, T, C}), false);
  auto cv = [&] { return sum(mul(conv1d(x, w, st).first, wc)); };
  check_param_grad(cv, x, "conv dx");
  check_param_grad(cv, w, "conv dw");
  check_param_grad(cv, st, "conv dstate");
  std::vector<int64_t> pos = {3, 4, 5, 6, 7};
  YarnParams yarn{4.0, 16, 32.0, 1.0, 1.0, 1.0};
  const RopeTables rt = make_rope_tables(pos, 4, 10000.0, &yarn);
  Var r(randn(rng, {T, H, 6}), true, "r");
  Var wr(randn(rng, {T, H, 6}), false);
  auto rp = [&] { return sum(mul(rope(r, rt.cos, rt.sin, RopeLayout{2, 4, false}), wr)); };
  check_param_grad(rp, r, "rope dx");
}

// KDA through the tape: two pieces chained by the carried state, gradients to every input of both pieces
// and to the initial state.
TEST(Autograd, KdaTwoPiecesChainedThroughStateGradients) {
  std::mt19937 rng(5);
  const int64_t B = 1, T = 6, H = 2, K = 3, V = 2;
  auto unit = [&](const Shape& s) {
    Tensor t = randn(rng, s);
    float* p = t.data<float>();
    for (int64_t r = 0; r < t.numel() / s.back(); ++r) {
      float n = 0;
      for (int64_t c = 0; c < s.back(); ++c) n += p[r * s.back() + c] * p[r * s.back() + c];
      for (int64_t c = 0; c < s.back(); ++c) p[r * s.back() + c] /= std::sqrt(n);
    }
    return t;
  };
  Var q(unit({B, T, H, K}), true, "q"), k(unit({B, T, H, K}), true, "k"), v(randn(rng, {B, T, H, V}), true, "v");
  Tensor gt = randn(rng, {B, T, H, K});
  for (int64_t i = 0; i < gt.numel(); ++i) gt.data<float>()[i] = -1.0f / (1.0f + std::exp(-gt.data<float>()[i]));
  Var g(gt, true, "g"), beta(Tensor::full({B, T, H}, 0.6f), true, "beta"), s0(randn(rng, {B, H, K, V}), true, "s0");
  Var w(randn(rng, {B, T, H, V}), false);
  auto f = [&] {
    auto [o1, st] = kda(q, k, v, g, beta, s0, 4);   // chunk 4 over T = 6: a partial chunk too
    auto [o2, st2] = kda(q, k, v, g, beta, st, 4);  // the same inputs again, from the carried state
    return add(sum(mul(add(o1, o2), w)), sum(mul(st2, st2)));
  };
  for (Var* p : {&q, &k, &v, &g, &beta, &s0}) check_param_grad(f, *p, "kda " + p->name());
}

TEST(RopeTable, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  const int64_t rot = 64;
  const double theta = 10000.0;
  const std::vector<double> base = rope_inv_freq(rot, theta, nullptr);
  for (int64_t i = 0; i < rot / 2; ++i)
    EXPECT_DOUBLE_EQ(base[size_t(i)], std::pow(theta, -2.0 * double(i) / double(rot)));
  YarnParams none{1.0, 4096, 32, 1, 1, 1};
  EXPECT_EQ(rope_inv_freq(rot, theta, &none), base);  // factor 1 = plain RoPE
  YarnParams y{40.0, 4096, 32.0, 1.0, 1.0, 1.0};
  const std::vector<double> s = rope_inv_freq(rot, theta, &y);
  // A dim that turns more than beta_fast times over the original context keeps its frequency ...
  EXPECT_DOUBLE_EQ(s[0], base[0]);
  // ... one that turns less than beta_slow times is divided by the factor ...
  EXPECT_NEAR(s[size_t(rot / 2 - 1)], base[size_t(rot / 2 - 1)] / 40.0, 1e-18);
  // ... and in between the blend is monotone: the ratio falls from 1 to 1/factor.
  for (int64_t i = 1; i < rot / 2; ++i)
    EXPECT_LE(s[size_t(i)] / base[size_t(i)], s[size_t(i - 1)] / base[size_t(i - 1)] + 1e-12);
  // cos/sin carry mscale(s, mscale)/mscale(s, mscale_all_dim) (= 1 here), the softmax factor mscale^2.
  const RopeTables t = make_rope_tables({0, 1000}, rot, theta, &y);
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(t.softmax_scale_factor, m * m, 1e-6);
  EXPECT_NEAR(t.cos.at({0, 0}), 1.0, 1e-7);
  EXPECT_NEAR(t.sin.at({1, 5}), std::sin(1000.0 * s[5]), 1e-6);
  YarnParams y2{40.0, 4096, 32.0, 1.0, 0.707, 0.0};  // mscale without mscale_all_dim scales cos/sin
  const RopeTables t2 = make_rope_tables({0}, rot, theta, &y2);
  EXPECT_NEAR(t2.cos.at({0, 0}), 0.1 * 0.707 * std::log(40.0) + 1.0, 1e-6);
  EXPECT_THROW(rope_inv_freq(7, theta, nullptr), Error);
}

}  // namespace
}  // namespace myriad::ag

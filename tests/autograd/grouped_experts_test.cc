// grouped_expert_glu against the loop it replaces: per expert, slice its rows and run linear -> GLU -> linear
// through the ordinary autograd ops (each checked against finite differences elsewhere). Values and every
// gradient must agree; the row layouts cover empty experts, one-row experts, experts small enough for the skinny
// product, sgemm-sized ones and one large enough to take the threaded-BLAS path.
// NOTE: both sides sum the same products in f32 but in different orders (gemm_skinny vs sgemm blocking, one
// [C, F] product vs per-expert ones), so they differ by rounding only: |diff| <= 1e-5 + 1e-4 |ref| over sums of
// up to 64 terms of O(1) is far below the O(1) error a wrong row, expert or transpose would give.
#include "autograd/grouped_experts.h"

#include <gtest/gtest.h>

#include <random>

#include "autograd/functions.h"
#include "core/error.h"

namespace myriad::ag {
namespace {

Tensor randn(std::mt19937& rng, const Shape& s, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  Tensor t = Tensor::empty(s);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << what << " [" << i << "]";
}

struct Experts {
  std::vector<Var> w1, w3, w2;
};

Experts make_experts(std::mt19937& rng, int64_t E, int64_t L, int64_t F) {
  Experts x;
  for (int64_t e = 0; e < E; ++e) {
    x.w1.emplace_back(randn(rng, {F, L}, 0.3f), true);
    x.w3.emplace_back(randn(rng, {F, L}, 0.3f), true);
    x.w2.emplace_back(randn(rng, {L, F}, 0.3f), true);
  }
  return x;
}

Var glu_ref(const Var& g, const Var& u, const GluParams& p) {
  return p.kind == GluKind::kSitu ? situ_glu(g, u, p.situ) : mul(unary(Unary::kSiLU, g), u);
}

// The per-expert loop of autograd ops that grouped_expert_glu replaces.
Var loop_ref(const Var& z, const std::vector<int64_t>& off, const Experts& x, const GluParams& p) {
  std::vector<Var> outs;
  for (size_t e = 0; e + 1 < off.size(); ++e) {
    if (off[e] == off[e + 1]) continue;
    Var ze = slice_rows(z, off[e], off[e + 1]);
    outs.push_back(linear(glu_ref(linear(ze, x.w1[e]), linear(ze, x.w3[e]), p), x.w2[e]));
  }
  return concat_rows(outs, z.shape()[1]);
}

void check_against_loop(const std::vector<int64_t>& rows, GluParams p, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t L = 24, F = 40, E = int64_t(rows.size());
  std::vector<int64_t> off{0};
  for (const int64_t n : rows) off.push_back(off.back() + n);
  const int64_t C = off.back();
  const Tensor z0 = randn(rng, {C, L}, 1.0f), r = randn(rng, {C, L}, 1.0f);
  Experts a = make_experts(rng, E, L, F), b;
  for (int64_t e = 0; e < E; ++e) {  // b: the same weights as separate leaves, so the gradients do not mix
    b.w1.emplace_back(a.w1[size_t(e)].value().clone(), true);
    b.w3.emplace_back(a.w3[size_t(e)].value().clone(), true);
    b.w2.emplace_back(a.w2[size_t(e)].value().clone(), true);
  }
  // One graph at a time: backward consumes the whole tape.
  Var za(z0.clone(), true), zb(z0.clone(), true);
  Var ya = grouped_expert_glu(za, off, a.w1, a.w3, a.w2, p);
  backward(sum(mul(ya, Var(r, false))));
  Var yb = loop_ref(zb, off, b, p);
  backward(sum(mul(yb, Var(r, false))));
  expect_close(ya.value(), yb.value(), "y");
  expect_close(za.grad(), zb.grad(), "dz");
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = "expert " + std::to_string(e);
    if (rows[size_t(e)] == 0) {
      EXPECT_FALSE(a.w1[size_t(e)].has_grad()) << ex << " has no rows and must get no gradient";
      continue;
    }
    expect_close(a.w1[size_t(e)].grad(), b.w1[size_t(e)].grad(), "dW1 " + ex);
    expect_close(a.w3[size_t(e)].grad(), b.w3[size_t(e)].grad(), "dW3 " + ex);
    expect_close(a.w2[size_t(e)].grad(), b.w2[size_t(e)].grad(), "dW2 " + ex);
  }
}

TEST(GroupedExperts, SituEqualsPerExpertLoopInValuesAndGradients) {
  // empty, one row, skinny-sized, sgemm-sized, empty at the end, one large expert (threaded BLAS), more small.
  check_against_loop({0, 1, 5, 17, 64, 0, 300, 3, 2, 0}, GluParams{GluKind::kSitu, SituParams{2.0f, 1.5f}}, 1);
}

TEST(GroupedExperts, SwigluEqualsPerExpertLoopInValuesAndGradients) {
  check_against_loop({2, 0, 33, 1, 140, 7}, GluParams{GluKind::kSwiGlu, {}}, 2);
}

TEST(GroupedExperts, ManyTinyExpertsAsAt896) {
  std::vector<int64_t> rows;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(0, 9);
  for (int i = 0; i < 200; ++i) rows.push_back(d(rng));
  check_against_loop(rows, GluParams{GluKind::kSitu, SituParams{1.0f, 1.0f}}, 3);
}

TEST(GroupedExperts, GradientsAccumulateIntoExistingOnes) {
  std::mt19937 rng(4);
  const int64_t L = 8, F = 12;
  const std::vector<int64_t> off{0, 3, 3, 7};
  Experts x = make_experts(rng, 3, L, F);
  Var z(randn(rng, {7, L}, 1.0f), true);
  const GluParams p{GluKind::kSitu, SituParams{2.0f, 2.0f}};
  backward(sum(grouped_expert_glu(z, off, x.w1, x.w3, x.w2, p)));
  const std::vector<float> dz1 = z.grad().to_vector(), dw1 = x.w2[2].grad().to_vector();
  backward(sum(grouped_expert_glu(z, off, x.w1, x.w3, x.w2, p)));
  const std::vector<float> dz2 = z.grad().to_vector(), dw2 = x.w2[2].grad().to_vector();
  // (dz1 + a) + b against 2 (a + b): equal up to a few roundings; overwriting instead would be off by a factor 2.
  for (size_t i = 0; i < dz1.size(); ++i) EXPECT_NEAR(dz2[i], 2.0f * dz1[i], 1e-6f * std::abs(dz1[i]) + 1e-7f);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_NEAR(dw2[i], 2.0f * dw1[i], 1e-6f * std::abs(dw1[i]) + 1e-7f);
}

TEST(GroupedExperts, BadOffsetsAndShapesAreNamed) {
  std::mt19937 rng(5);
  Experts x = make_experts(rng, 3, 4, 6);
  Var z(randn(rng, {5, 4}, 1.0f), false);
  const GluParams p{};
  try {
    grouped_expert_glu(z, {0, 2, 3, 4}, x.w1, x.w3, x.w2, p);
    FAIL() << "offsets ending before the last row must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offsets run from 0 to 4"), std::string::npos) << e.what();
  }
  try {
    grouped_expert_glu(z, {0, 4, 2, 5}, x.w1, x.w3, x.w2, p);
    FAIL() << "decreasing offsets must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decrease at expert 1"), std::string::npos) << e.what();
  }
  Experts shared = x;
  shared.w3[2] = shared.w1[0];  // one Var for two experts: their gradients would race
  try {
    grouped_expert_glu(z, {0, 2, 2, 5}, shared.w1, shared.w3, shared.w2, p);
    FAIL() << "a weight shared between experts must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("appears twice"), std::string::npos) << e.what();
  }
  x.w2[1] = Var(Tensor::zeros({6, 4}), true);  // transposed
  try {
    grouped_expert_glu(z, {0, 2, 2, 5}, x.w1, x.w3, x.w2, p);
    FAIL() << "a wrong-shaped weight must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2[1] is [6, 4], expected [4, 6]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace myriad::ag

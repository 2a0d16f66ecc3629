// KDA (docs/design.md §1.2): the reference recurrence's backward against finite differences (double); the CPU
// recurrent and chunkwise forms and the CPU backward against the reference; chunkwise = recurrent for several
// chunk sizes and lengths not divisible by the chunk; two pieces with the carried state = one piece.
// Tolerances: f32 kernels vs the double reference on O(1) values through T-step recurrences whose state
// entries stay O(1) (q, k unit-norm, beta < 1, decay < 1): accumulated f32 rounding ~ T * 1e-7 -> rtol/atol 2e-4
// for T <= 200 (a wrong term is off by O(0.1) or more).
#include "ops/ref/kda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

using test::dot;
using test::expect_close;
using test::expect_grad_fd;
using test::Guarded;
using test::sz;
using test::to_f;
using test::Vec;

struct KdaInputs {
  Vec q, k, v, g, beta, S0;
};

// Random inputs with the model's ranges: unit-norm q (times K^-1/2) and k, g = lb * sigmoid(x) in (lb, 0),
// beta in (0, 1). Rounded to f32 so both sides see the same numbers.
KdaInputs make_inputs(std::mt19937& rng, const KdaShape& s, double lb = -5.0) {
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  KdaInputs in;
  const int64_t rows = s.B * s.T * s.H;
  auto unit_rows = [&](Vec& x, double scale) {
    x.resize(sz(rows * s.K));
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < s.K; ++c) ss += (x[sz(r * s.K + c)] = n01(rng)) * x[sz(r * s.K + c)];
      for (int64_t c = 0; c < s.K; ++c) x[sz(r * s.K + c)] = double(float(x[sz(r * s.K + c)] / std::sqrt(ss) * scale));
    }
  };
  unit_rows(in.q, 1.0 / std::sqrt(double(s.K)));
  unit_rows(in.k, 1.0);
  in.v.resize(sz(rows * s.V));
  for (auto& x : in.v) x = double(float(n01(rng)));
  in.g.resize(sz(rows * s.K));
  for (auto& x : in.g) x = double(float(lb / (1.0 + std::exp(-2.0 * n01(rng)))));
  in.beta.resize(sz(rows));
  for (auto& x : in.beta) x = double(float(u01(rng)));
  in.S0.resize(sz(s.B * s.H * s.K * s.V));
  for (auto& x : in.S0) x = double(float(0.5 * n01(rng)));
  return in;
}

TEST(OpKda, ReferenceBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(31);
  const KdaShape s{2, 5, 2, 3, 4, 64};
  KdaInputs in = make_inputs(rng, s);
  const int64_t no = s.B * s.T * s.H * s.V, ns = s.B * s.H * s.K * s.V;
  Vec dout = test::random_vec(rng, no), dSout = test::random_vec(rng, ns);
  Vec dq(in.q.size(), 0.0), dk(in.k.size(), 0.0), dv(in.v.size(), 0.0), dg(in.g.size(), 0.0), db(in.beta.size(), 0.0),
      dS0(in.S0.size(), 0.0);
  ref::kda_recurrent_backward<double>(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dS0.data(), dout.data(),
                                      dSout.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                      in.S0.data(), s.B, s.T, s.H, s.K, s.V);
  auto loss = [&](const KdaInputs& x) {
    Vec o(sz(no)), S(sz(ns));
    ref::kda_recurrent_forward<double>(o.data(), S.data(), x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                                       x.beta.data(), x.S0.data(), s.B, s.T, s.H, s.K, s.V);
    return dot(o, dout) + dot(S, dSout);
  };
  auto wrt = [&](Vec KdaInputs::*field) {
    return [&, field](const Vec& x) {
      KdaInputs c = in;
      c.*field = x;
      return loss(c);
    };
  };
  expect_grad_fd(wrt(&KdaInputs::q), in.q, dq, "kda d/dq", 40);
  expect_grad_fd(wrt(&KdaInputs::k), in.k, dk, "kda d/dk", 40);
  expect_grad_fd(wrt(&KdaInputs::v), in.v, dv, "kda d/dv", 40);
  expect_grad_fd(wrt(&KdaInputs::g), in.g, dg, "kda d/dg", 40);
  expect_grad_fd(wrt(&KdaInputs::beta), in.beta, db, "kda d/dbeta", 40);
  expect_grad_fd(wrt(&KdaInputs::S0), in.S0, dS0, "kda d/dS0", 40);
}

TEST(OpKda, RecurrentAndChunkwiseMatchReferenceForAnyChunkSize) {
  std::mt19937 rng(32);
  for (KdaShape s : {KdaShape{1, 1, 1, 1, 1, 64}, KdaShape{2, 37, 3, 8, 6, 16}, KdaShape{1, 130, 2, 32, 32, 64},
                     KdaShape{1, 70, 1, 16, 24, 1}, KdaShape{1, 70, 1, 16, 24, 7}, KdaShape{1, 0, 2, 4, 4, 64}}) {
    for (bool with_state : {false, true}) {
      KdaInputs in = make_inputs(rng, s);
      const int64_t no = s.B * s.T * s.H * s.V, ns = s.B * s.H * s.K * s.V;
      const double* S0 = with_state ? in.S0.data() : nullptr;
      Vec o(sz(no)), S(sz(ns));
      ref::kda_recurrent_forward<double>(o.data(), S.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                         in.beta.data(), S0, s.B, s.T, s.H, s.K, s.V);
      Guarded q(to_f(in.q)), k(to_f(in.k)), v(to_f(in.v)), g(to_f(in.g)), b(to_f(in.beta)), s0(to_f(in.S0));
      for (bool chunked : {false, true}) {
        Guarded og(sz(no)), Sg(sz(ns));
        (chunked ? ops::kda_chunk_forward : ops::kda_recurrent_forward)(Device::kCPU, og.data(), Sg.data(), q.data(),
                                                                        k.data(), v.data(), g.data(), b.data(),
                                                                        with_state ? s0.data() : nullptr, s);
        const std::string what = std::string(chunked ? "chunkwise" : "recurrent") + " T=" + std::to_string(s.T) +
                                 " chunk=" + std::to_string(s.chunk);
        expect_close(og.values(), o, 2e-4, 2e-4, what + " o");
        expect_close(Sg.values(), S, 2e-4, 2e-4, what + " state");
        EXPECT_TRUE(og.intact() && Sg.intact()) << what;
      }
    }
  }
}

TEST(OpKda, StrongDecayStaysFiniteInChunks) {
  // Every channel at the lower bound's edge: the in-chunk exponent spans are the largest possible.
  std::mt19937 rng(33);
  const KdaShape s{1, 128, 1, 16, 16, 64};
  KdaInputs in = make_inputs(rng, s);
  for (auto& x : in.g) x = -4.999;
  const int64_t no = s.T * s.V;
  Vec o(sz(no)), S(sz(s.K * s.V));
  ref::kda_recurrent_forward<double>(o.data(), S.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                     in.beta.data(), in.S0.data(), s.B, s.T, s.H, s.K, s.V);
  Guarded og(sz(no)), Sg(sz(s.K * s.V));
  const auto q = to_f(in.q), k = to_f(in.k), v = to_f(in.v), g = to_f(in.g), b = to_f(in.beta), s0 = to_f(in.S0);
  ops::kda_chunk_forward(Device::kCPU, og.data(), Sg.data(), q.data(), k.data(), v.data(), g.data(), b.data(),
                         s0.data(), s);
  expect_close(og.values(), o, 2e-4, 2e-4, "strong decay o");
  expect_close(Sg.values(), S, 2e-4, 2e-4, "strong decay state");
}

TEST(OpKda, TwoPiecesWithCarriedStateEqualOnePiece) {
  std::mt19937 rng(34);
  const KdaShape whole{1, 100, 2, 8, 8, 16};
  KdaInputs in = make_inputs(rng, whole);
  const auto q = to_f(in.q), k = to_f(in.k), v = to_f(in.v), g = to_f(in.g), b = to_f(in.beta);
  const int64_t H = whole.H, K = whole.K, V = whole.V, t1 = 41;
  std::vector<float> o1(sz(whole.T * H * V)), S1(sz(H * K * V)), o2(o1.size()), mid(S1.size()), S2(S1.size());
  ops::kda_chunk_forward(Device::kCPU, o1.data(), S1.data(), q.data(), k.data(), v.data(), g.data(), b.data(), nullptr,
                         whole);
  KdaShape first = whole, second = whole;
  first.T = t1;
  second.T = whole.T - t1;
  ops::kda_chunk_forward(Device::kCPU, o2.data(), mid.data(), q.data(), k.data(), v.data(), g.data(), b.data(), nullptr,
                         first);
  ops::kda_recurrent_forward(Device::kCPU, o2.data() + t1 * H * V, S2.data(), q.data() + t1 * H * K,
                             k.data() + t1 * H * K, v.data() + t1 * H * V, g.data() + t1 * H * K, b.data() + t1 * H,
                             mid.data(), second);
  // f32 both ways, different association: relative 1e-5 of O(1) values.
  expect_close(o2, Vec(o1.begin(), o1.end()), 1e-5, 1e-5, "split o");
  expect_close(S2, Vec(S1.begin(), S1.end()), 1e-5, 1e-5, "split state");
}

// Decode as the serving engine runs it: one token at a time with the state updated in place (S_out == S0), over
// several heads and a batch of two sequences (enough work to spread the heads over the threads), against the
// double reference over the whole sequence.
TEST(OpKda, RecurrentTokenByTokenInPlaceMatchesReference) {
  std::mt19937 rng(36);
  const KdaShape whole{2, 24, 8, 64, 64, 16};
  KdaInputs in = make_inputs(rng, whole);
  const int64_t B = whole.B, T = whole.T, H = whole.H, K = whole.K, V = whole.V;
  Vec o_ref(sz(B * T * H * V)), S_ref(sz(B * H * K * V));
  ref::kda_recurrent_forward<double>(o_ref.data(), S_ref.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                     in.beta.data(), in.S0.data(), B, T, H, K, V);
  const auto q = to_f(in.q), k = to_f(in.k), v = to_f(in.v), g = to_f(in.g), b = to_f(in.beta);
  std::vector<float> S = to_f(in.S0), o(sz(B * T * H * V)), qt(sz(B * H * K)), kt(qt.size()), gt(qt.size()),
                     vt(sz(B * H * V)), bt(sz(B * H)), ot(vt.size());
  KdaShape one = whole;
  one.T = 1;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t bb = 0; bb < B; ++bb) {  // token t of each sequence: [B, 1, H, *]
      const int64_t src = (bb * T + t) * H, dst = bb * H;
      std::copy_n(q.begin() + src * K, H * K, qt.begin() + dst * K);
      std::copy_n(k.begin() + src * K, H * K, kt.begin() + dst * K);
      std::copy_n(g.begin() + src * K, H * K, gt.begin() + dst * K);
      std::copy_n(v.begin() + src * V, H * V, vt.begin() + dst * V);
      std::copy_n(b.begin() + src, H, bt.begin() + dst);
    }
    ops::kda_recurrent_forward(Device::kCPU, ot.data(), S.data(), qt.data(), kt.data(), vt.data(), gt.data(), bt.data(),
                               S.data(), one);
    for (int64_t bb = 0; bb < B; ++bb) std::copy_n(ot.begin() + bb * H * V, H * V, o.begin() + (bb * T + t) * H * V);
  }
  // f32 against double over 24 steps: relative 2e-5 of O(1) values.
  expect_close(o, o_ref, 2e-5, 2e-5, "in-place decode o");
  expect_close(S, S_ref, 2e-5, 2e-5, "in-place decode state");
}

// Both CPU backwards (chunkwise: what training runs; recurrent: per token) against the double reference, over
// chunk sizes that divide T or not, chunk 1, chunk > T, 17 chunks (two segments of the chunkwise backward), and
// K != V.
TEST(OpKda, BackwardMatchesReference) {
  std::mt19937 rng(35);
  for (KdaShape s : {KdaShape{1, 9, 2, 4, 3, 4}, KdaShape{2, 70, 2, 16, 8, 16}, KdaShape{1, 64, 1, 8, 8, 64},
                     KdaShape{1, 100, 1, 24, 40, 64}, KdaShape{1, 37, 2, 8, 8, 1}, KdaShape{1, 68, 1, 8, 6, 4},
                     KdaShape{1, 50, 1, 32, 16, 33}}) {
    KdaInputs in = make_inputs(rng, s);
    const int64_t no = s.B * s.T * s.H * s.V, ns = s.B * s.H * s.K * s.V;
    Vec dout = test::f32_round(test::random_vec(rng, no)), dSout = test::f32_round(test::random_vec(rng, ns));
    Vec dq(in.q.size(), 0.0), dk(in.k.size(), 0.0), dv(in.v.size(), 0.0), dg(in.g.size(), 0.0), db(in.beta.size(), 0.0),
        dS0(in.S0.size(), 0.0);
    ref::kda_recurrent_backward<double>(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dS0.data(), dout.data(),
                                        dSout.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                        in.beta.data(), in.S0.data(), s.B, s.T, s.H, s.K, s.V);
    Guarded q(to_f(in.q)), k(to_f(in.k)), v(to_f(in.v)), g(to_f(in.g)), b(to_f(in.beta)), s0(to_f(in.S0));
    Guarded dog(to_f(dout)), dsg(to_f(dSout));
    for (bool chunked : {true, false}) {
      Guarded dqg(in.q.size()), dkg(in.k.size()), dvg(in.v.size()), dgg(in.g.size()), dbg(in.beta.size()),
          dS0g(in.S0.size());
      (chunked ? ops::kda_backward : ops::kda_recurrent_backward)(
          Device::kCPU, dqg.data(), dkg.data(), dvg.data(), dgg.data(), dbg.data(), dS0g.data(), dog.data(), dsg.data(),
          q.data(), k.data(), v.data(), g.data(), b.data(), s0.data(), s);
      const std::string what = std::string(chunked ? "chunkwise" : "recurrent") + " T=" + std::to_string(s.T) +
                               " chunk=" + std::to_string(s.chunk) + " kda ";
      // Gradients sum over up to T future tokens: atol scaled to 1e-3.
      expect_close(dqg.values(), dq, 1e-3, 1e-3, what + "dq");
      expect_close(dkg.values(), dk, 1e-3, 1e-3, what + "dk");
      expect_close(dvg.values(), dv, 1e-3, 1e-3, what + "dv");
      expect_close(dgg.values(), dg, 1e-3, 1e-3, what + "dg");
      expect_close(dbg.values(), db, 1e-3, 1e-3, what + "dbeta");
      expect_close(dS0g.values(), dS0, 1e-3, 1e-3, what + "dS0");
      EXPECT_TRUE(dqg.intact() && dkg.intact() && dvg.intact() && dgg.intact() && dbg.intact() && dS0g.intact());
    }
  }
}

// The chunkwise backward (ops::kda_backward) against the reference's on `in` with random output and state
// gradients: f32 sums over up to T terms, atol scaled to 1e-3 (as BackwardMatchesReference).
void expect_chunk_backward_matches_reference(std::mt19937& rng, const KdaShape& s, const KdaInputs& in,
                                             const std::string& what) {
  const int64_t no = s.B * s.T * s.H * s.V, ns = s.B * s.H * s.K * s.V;
  Vec dout = test::f32_round(test::random_vec(rng, no)), dSout = test::f32_round(test::random_vec(rng, ns));
  Vec dq(in.q.size(), 0.0), dk(in.k.size(), 0.0), dv(in.v.size(), 0.0), dg(in.g.size(), 0.0), db(in.beta.size(), 0.0),
      dS0(in.S0.size(), 0.0);
  ref::kda_recurrent_backward<double>(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dS0.data(), dout.data(),
                                      dSout.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                      in.S0.data(), s.B, s.T, s.H, s.K, s.V);
  const auto q = to_f(in.q), k = to_f(in.k), v = to_f(in.v), g = to_f(in.g), b = to_f(in.beta), s0 = to_f(in.S0);
  const auto dof = to_f(dout), dsf = to_f(dSout);
  std::vector<float> dqg(q.size()), dkg(k.size()), dvg(v.size()), dgg(g.size()), dbg(b.size()), dS0g(s0.size());
  ops::kda_backward(Device::kCPU, dqg.data(), dkg.data(), dvg.data(), dgg.data(), dbg.data(), dS0g.data(), dof.data(),
                    dsf.data(), q.data(), k.data(), v.data(), g.data(), b.data(), s0.data(), s);
  expect_close(Vec(dqg.begin(), dqg.end()), dq, 1e-3, 1e-3, what + "dq");
  expect_close(Vec(dkg.begin(), dkg.end()), dk, 1e-3, 1e-3, what + "dk");
  expect_close(Vec(dvg.begin(), dvg.end()), dv, 1e-3, 1e-3, what + "dv");
  expect_close(Vec(dgg.begin(), dgg.end()), dg, 1e-3, 1e-3, what + "dg");
  expect_close(Vec(dbg.begin(), dbg.end()), db, 1e-3, 1e-3, what + "dbeta");
  expect_close(Vec(dS0g.begin(), dS0g.end()), dS0, 1e-3, 1e-3, what + "dS0");
}

// The chunkwise backward at the decay bound's edge (the largest in-chunk exponent spans) and with the decay near
// zero (g -> 0: no decay), against the reference; both stay finite.
TEST(OpKda, BackwardAtDecayExtremes) {
  std::mt19937 rng(36);
  const KdaShape s{1, 96, 1, 16, 16, 64};
  for (double gval : {-4.999, -1e-4}) {
    KdaInputs in = make_inputs(rng, s);
    for (auto& x : in.g) x = double(float(gval));
    expect_chunk_backward_matches_reference(rng, s, in, "g=" + std::to_string(gval) + " kda ");
  }
}

// The unbounded softplus gate (Kimi-Linear's, fla's): g = -exp(A_log) softplus(z) may decay by far more than the
// bounded gate's 5 per token, so a 16-token block can span hundreds in log-decay. Per-channel decay rates from
// none to -60 per token (and isolated spikes of -300), forward and backward, chunk sizes 64, 16 and 33, against
// the double reference. The inputs are checked to contain blocks past the anchored factors' limit (40 on one side
// of the middle token), so the pair-by-pair path runs. Tolerances as in BackwardMatchesReference.
TEST(OpKda, UnboundedDecayMatchesReference) {
  std::mt19937 rng(37);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (KdaShape s : {KdaShape{1, 96, 2, 16, 16, 64}, KdaShape{1, 80, 1, 8, 12, 16}, KdaShape{1, 70, 1, 16, 8, 33}}) {
    KdaInputs in = make_inputs(rng, s);
    std::vector<double> rate(sz(s.H * s.K));  // per channel: exp(A_log) in [0.01, 20]
    for (auto& r : rate) r = std::exp(std::log(0.01) + u01(rng) * std::log(2000.0));
    const int64_t rows = s.B * s.T * s.H;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < s.K; ++c) {
        const double z = 1.5 * n01(rng) + 0.5, softplus = std::log1p(std::exp(z));
        double g = -rate[sz((r % s.H) * s.K + c)] * softplus;
        if (u01(rng) < 0.01) g = -300.0;
        in.g[sz(r * s.K + c)] = double(float(g));
      }
    // At least one 16-token block has more than 40 of decay between its first and middle token in some channel.
    bool beyond = false;
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t c = 0; c < s.K; ++c)
        for (int64_t t0 = 0; t0 + 8 <= s.T; t0 += 16) {
          double span = 0;
          for (int64_t t = t0 + 1; t <= t0 + 7; ++t) span -= in.g[sz((t * s.H + h) * s.K + c)];
          beyond = beyond || span > 40;
        }
    ASSERT_TRUE(beyond) << "the inputs do not reach the pair-by-pair path";
    const int64_t no = s.B * s.T * s.H * s.V, ns = s.B * s.H * s.K * s.V;
    Vec o(sz(no)), S(sz(ns));
    ref::kda_recurrent_forward<double>(o.data(), S.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                       in.beta.data(), in.S0.data(), s.B, s.T, s.H, s.K, s.V);
    const auto q = to_f(in.q), k = to_f(in.k), v = to_f(in.v), g = to_f(in.g), b = to_f(in.beta), s0 = to_f(in.S0);
    const std::string what = "unbounded decay T=" + std::to_string(s.T) + " chunk=" + std::to_string(s.chunk) + " ";
    std::vector<float> og(sz(no)), Sg(sz(ns));
    ops::kda_chunk_forward(Device::kCPU, og.data(), Sg.data(), q.data(), k.data(), v.data(), g.data(), b.data(),
                           s0.data(), s);
    expect_close(Vec(og.begin(), og.end()), o, 2e-4, 2e-4, what + "o");
    expect_close(Vec(Sg.begin(), Sg.end()), S, 2e-4, 2e-4, what + "state");
    expect_chunk_backward_matches_reference(rng, s, in, what);
  }
}

}  // namespace
}  // namespace myriad

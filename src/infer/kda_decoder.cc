// KDA for inference (infer/kda_decoder.h).
#include "infer/kda_decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/phase_profile.h"
#include "core/threads.h"
#include "infer/decode_weights.h"
#include "model/constants.h"
#include "ops/kernels.h"

namespace myriad {

KdaDecoder::KdaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer)
    : KdaDecoder(config, DecodeWeights::from_model(weights), layer) {}

KdaDecoder::KdaDecoder(const ModelConfig& c, std::shared_ptr<const DecodeWeights> weights, int64_t layer)
    : w_(std::move(weights)) {
  MYRIAD_REQUIRE(layer >= 0 && layer < c.num_hidden_layers && c.mixer(layer) == Mixer::kKda, kValue,
                 "KdaDecoder: layer ", layer, " is not a KDA layer");
  dims_ = KdaDims::of(c);
  D_ = c.hidden_size;
  const int64_t HK = dims_.heads * dims_.head_dim;
  const std::string a = "model.layers." + std::to_string(layer) + ".self_attn.";
  const DecodeWeights& w = *w_;
  KdaDecodeWeights& o = weights_;
  o.q_proj = w.linear(a + "q_proj.weight");
  o.k_proj = w.linear(a + "k_proj.weight");
  o.v_proj = w.linear(a + "v_proj.weight");
  o.f_a_proj = w.linear(a + "f_a_proj.weight");
  o.f_b_proj = w.linear(a + "f_b_proj.weight");
  o.b_proj = w.linear(a + "b_proj.weight");
  if (dims_.full_rank_gate) {
    o.g_proj = w.linear(a + "g_proj.weight");
  } else {
    o.g_a_proj = w.linear(a + "g_a_proj.weight");
    o.g_b_proj = w.linear(a + "g_b_proj.weight");
  }
  o.o_proj = w.linear(a + "o_proj.weight");
  auto conv = [&](const char* n) { return w.tensor(a + n + "_conv1d.weight").view({HK, dims_.conv_width}); };
  o.q_conv = conv("q");
  o.k_conv = conv("k");
  o.v_conv = conv("v");
  o.A_log = w.tensor(a + "A_log");
  o.dt_bias = w.tensor(a + "dt_bias");
  o.o_norm = w.tensor(a + "o_norm.weight");
}

KdaState KdaDecoder::make_state() const {
  const int64_t H = dims_.heads, K = dims_.head_dim, W = dims_.conv_width;
  KdaState st;
  st.conv_q = Tensor::zeros({1, W - 1, H * K});
  st.conv_k = Tensor::zeros({1, W - 1, H * K});
  st.conv_v = Tensor::zeros({1, W - 1, H * K});
  st.S = Tensor::zeros({1, H, K, K});
  return st;
}

Tensor KdaDecoder::forward(const Tensor& x, KdaState& st, int64_t chunk) const {
  const KdaSegment seg{&st, x.ndim() == 2 ? x.size(0) : 0};
  return forward(x, std::span<const KdaSegment>(&seg, 1), chunk);
}

namespace {

// kda_module.h's execution without the tape: straight on the kernels (decode runs this per layer and token; the
// autograd ops' bookkeeping was a noticeable part of a quantized token), values are [N, H*K] f32 tensors changed
// in place where a step allows, the short convs and the delta rule run per sequence (segment) from its state.
struct HostKda {
  using Value = Tensor;
  using Weights = KdaDecodeWeights;

  Device device;
  std::span<const KdaSegment> segs;
  int64_t N, H, K, W, chunk;

  std::array<Tensor, 6> project(const Tensor& x, std::array<const LinearWeight*, 6> w) const {
    const PhaseScope phase("KDA products");
    // Every product of x at once: one quantization of x and one parallel region when the weights are quantized.
    std::array<Tensor, 6> y;
    std::array<float*, 6> yp{};
    for (size_t i = 0; i < 6; ++i) {
      y[i] = Tensor::empty({N, w[i]->rows()});
      yp[i] = y[i].data<float>();
    }
    LinearWeight::apply_many(w, x.data<float>(), N, yp);
    return y;
  }
  Tensor linear(const Tensor& x, const LinearWeight& w) const {
    const PhaseScope phase("KDA products");
    return w.apply(x);
  }
  Tensor short_conv(const Tensor& lin, const Tensor& w, int which) const {
    const PhaseScope phase("KDA short convs");
    static constexpr Tensor KdaState::*kTail[3] = {&KdaState::conv_q, &KdaState::conv_k, &KdaState::conv_v};
    const int64_t HK = H * K;
    Tensor y = Tensor::empty({N, HK});
    int64_t r0 = 0;
    for (const KdaSegment& s : segs) {
      Tensor& tail = s.state->*kTail[which];
      if (s.shards) halo_from_earlier_shard(*s.shards, lin.data<float>() + (r0 + s.rows - (W - 1)) * HK, tail);
      Tensor next = Tensor::empty({1, W - 1, HK});
      ops::conv1d_forward(device, y.data<float>() + r0 * HK, next.data<float>(), lin.data<float>() + r0 * HK,
                          w.data<float>(), tail.data<float>(), 1, s.rows, HK, W);
      if (s.history) record_tails(*s.history, which, s.rows, tail, lin.data<float>() + r0 * HK);
      tail = next;
      r0 += s.rows;
    }
    ops::unary_forward(device, Unary::kSiLU, y.data<float>(), y.data<float>(), N * HK);
    return y;
  }
  // A history segment's conv tails as of after each of its rows: the last W-1 of [tail entering the segment; its
  // inputs up to that row]. The q tails (which == 0, the first short conv kda_forward runs) append the entries.
  void record_tails(std::vector<KdaState>& hist, int which, int64_t rows, const Tensor& tail, const float* in) const {
    static constexpr Tensor KdaState::*kTail[3] = {&KdaState::conv_q, &KdaState::conv_k, &KdaState::conv_v};
    const int64_t HK = H * K;
    if (which == 0) hist.resize(hist.size() + size_t(rows));
    const size_t base = hist.size() - size_t(rows);
    std::vector<float> all(size_t((W - 1 + rows) * HK));
    std::copy(tail.data<float>(), tail.data<float>() + (W - 1) * HK, all.begin());
    std::copy(in, in + rows * HK, all.begin() + (W - 1) * HK);
    for (int64_t j = 0; j < rows; ++j) {
      Tensor t = Tensor::empty({1, W - 1, HK});
      const float* from = all.data() + (j + 1) * HK;  // rows j + 1 .. j + W - 1 of `all`
      std::copy(from, from + (W - 1) * HK, t.data<float>());
      hist[base + size_t(j)].*kTail[which] = t;
    }
  }
  // Sequence-parallel prefill: every shard's last W-1 conv inputs (`last`) gathered; the previous shard's become
  // this one's tail (the first shard's stays the fresh zeros).
  void halo_from_earlier_shard(PrefillShards& shards, const float* last, Tensor& tail) const {
    const int64_t n = (W - 1) * H * K, S = shards.count(), me = shards.index();
    if (n == 0 || S == 1) return;
    std::vector<int64_t> counts(size_t(S), n);
    std::vector<float> all(size_t(S * n));
    shards.all_gather(last, counts, all.data());
    if (me > 0) std::copy(all.data() + (me - 1) * n, all.data() + me * n, tail.data<float>());
  }
  // Sequence-parallel prefill: the delta rule is affine in the state entering the shard, S_out = M S_in + S~ (M
  // [K, K] per head: the final state from the identity with zero values, KDA's K = V; S~: from zeros with the
  // real values). Every shard's (M, S~) is gathered and the earlier ones composed in order,
  // S_in(s) = M_{s-1} (... (M_1 S~_0 + S~_1) ...) + S~_{s-1}, which the shard then runs from (plain summation
  // would be wrong: the delta rule is not additive in the state).
  void state_from_earlier_shards(PrefillShards& shards, const float* q, const float* k, const float* g,
                                 const float* beta, const float* v, int64_t T, Tensor& S) const {
    const int64_t S_count = shards.count(), me = shards.index(), KK = H * K * K;
    if (S_count == 1) return;
    const KdaShape shape{1, T, H, K, K, chunk};
    std::vector<float> o(size_t(T * H * K)), zeros_v(size_t(T * H * K), 0.0f), eye(size_t(KK), 0.0f),
        zero_state(size_t(KK), 0.0f);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < K; ++i) eye[size_t((h * K + i) * K + i)] = 1.0f;
    std::vector<float> mine(size_t(2 * KK));  // [M | S~]
    const ops::KdaForm form = ops::kda_sequence_form(device);
    ops::kda_sequence_forward(device, form, o.data(), mine.data(), q, k, zeros_v.data(), g, beta, eye.data(), shape);
    ops::kda_sequence_forward(device, form, o.data(), mine.data() + KK, q, k, v, g, beta, zero_state.data(), shape);
    std::vector<int64_t> counts(size_t(S_count), 2 * KK);
    std::vector<float> all(size_t(S_count * 2 * KK));
    shards.all_gather(mine.data(), counts, all.data());
    std::vector<float> state(size_t(KK), 0.0f);
    for (int64_t p = 0; p < me; ++p) {
      const float* M = all.data() + p * 2 * KK;
      std::vector<float> next(M + KK, M + 2 * KK);  // S~_p + M_p S, per head
      ops::gemm(device, false, false, K, K, K, 1.0f, M, K, state.data(), K, 1.0f, next.data(), K, H, K * K, K * K,
                K * K);
      state.swap(next);
    }
    std::copy(state.begin(), state.end(), S.data<float>());
  }
  Tensor l2norm_heads(const Tensor& x, float eps) const {
    const PhaseScope phase("KDA gates and norms");
    thread_local std::vector<float> rnorm;  // the per-row statistics (unused here)
    if (rnorm.size() < size_t(N * H)) rnorm.resize(size_t(N * H));
    ops::l2norm_forward(device, x.data<float>(), rnorm.data(), x.data<float>(), N * H, K, eps);
    return x;
  }
  Tensor scale(const Tensor& x, float a) const {
    const PhaseScope phase("KDA gates and norms");
    ops::scale(device, x.data<float>(), x.data<float>(), a, x.numel());
    return x;
  }
  Tensor sigmoid(const Tensor& x) const {
    const PhaseScope phase("KDA gates and norms");
    ops::unary_forward(device, Unary::kSigmoid, x.data<float>(), x.data<float>(), x.numel());
    return x;
  }
  Tensor kda_gate(const Tensor& f, const Tensor& A_log, const Tensor& dt_bias, float lower_bound) const {
    const PhaseScope phase("KDA gates and norms");
    ops::kda_gate_forward(device, f.data<float>(), f.data<float>(), A_log.data<float>(), dt_bias.data<float>(), N, H, K,
                          lower_bound);
    return f;
  }
  Tensor delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta) const {
    const PhaseScope phase("KDA delta rule");
    const int64_t HK = H * K, V = K;
    Tensor o = Tensor::empty({N, H * V});
    std::vector<int64_t> row0(segs.size() + 1, 0);
    bool all_single = segs.size() > 1;
    for (size_t i = 0; i < segs.size(); ++i) {
      row0[i + 1] = row0[i] + segs[i].rows;
      all_single = all_single && segs[i].rows == 1;
    }
    auto run = [&](size_t i) {
      const KdaSegment& s = segs[i];
      const int64_t r0 = row0[i];
      if (s.shards)
        state_from_earlier_shards(*s.shards, q.data<float>() + r0 * HK, k.data<float>() + r0 * HK,
                                  g.data<float>() + r0 * HK, beta.data<float>() + r0 * H, v.data<float>() + r0 * H * V,
                                  s.rows, s.state->S);
      if (s.rows > 0 && s.history) {  // the recurrent form one row at a time, keeping each row's state
        const size_t base = s.history->size() - size_t(s.rows);
        for (int64_t j = 0; j < s.rows; ++j) {
          Tensor S_next = Tensor::empty(s.state->S.shape());
          const int64_t r = r0 + j;
          ops::kda_sequence_forward(device, ops::KdaForm::kRecurrent, o.data<float>() + r * H * V, S_next.data<float>(),
                                    q.data<float>() + r * HK, k.data<float>() + r * HK, v.data<float>() + r * H * V,
                                    g.data<float>() + r * HK, beta.data<float>() + r * H, s.state->S.data<float>(),
                                    KdaShape{1, 1, H, K, V, chunk});
          s.state->S = S_next;
          KdaState& h = (*s.history)[base + size_t(j)];
          h.S = S_next.clone();
          h.tokens = s.state->tokens + j + 1;
        }
      } else if (s.rows > 0) {
        Tensor S_next = Tensor::empty(s.state->S.shape());
        const KdaShape shape{1, s.rows, H, K, V, chunk};
        // One token: the recurrent form (decode). More: the sequence form (prefill, as training runs it). Same
        // state either way, to f32 rounding.
        const ops::KdaForm form = s.rows == 1 && !s.shards ? ops::KdaForm::kRecurrent : ops::kda_sequence_form(device);
        ops::kda_sequence_forward(device, form, o.data<float>() + r0 * H * V, S_next.data<float>(),
                                  q.data<float>() + r0 * HK, k.data<float>() + r0 * HK, v.data<float>() + r0 * H * V,
                                  g.data<float>() + r0 * HK, beta.data<float>() + r0 * H, s.state->S.data<float>(),
                                  shape);
        s.state->S = S_next;
      }
      s.state->tokens = (s.shards ? s.shards->offset(s.shards->index()) : s.state->tokens) + s.rows;
    };
    if (all_single) {  // a decode batch: one token per sequence, the sequences spread over the threads
#pragma omp parallel for schedule(static) num_threads(num_threads())
      for (size_t i = 0; i < segs.size(); ++i) run(i);
    } else {
      for (size_t i = 0; i < segs.size(); ++i) run(i);
    }
    return o;
  }
  Tensor gated_head_norm(const Tensor& o, const Tensor& o_norm, const Tensor& gate, float eps) const {
    const PhaseScope phase("KDA gates and norms");
    // RMSNorm per head with the output gate: o / rms(o) * o_norm * sigmoid(gate), as ag::rmsnorm_gated
    Tensor normed = Tensor::empty({N, H * K});
    thread_local std::vector<float> rstd;
    if (rstd.size() < size_t(N * H)) rstd.resize(size_t(N * H));
    ops::rmsnorm_forward(device, normed.data<float>(), rstd.data(), o.data<float>(), o_norm.data<float>(),
                         gate.data<float>(), N * H, K, eps);
    return normed;
  }
};

}  // namespace

Tensor KdaDecoder::forward(const Tensor& x_in, std::span<const KdaSegment> segs, int64_t chunk) const {
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.size(1) == D_ && x_in.dtype() == DType::kF32, kShape, "KdaDecoder: input ",
                 shape_str(x_in.shape()), " should be f32 [N, ", D_, "]");
  const Tensor x = x_in.contiguous();
  const int64_t N = x.size(0);
  int64_t total = 0;
  for (const KdaSegment& s : segs) {
    MYRIAD_REQUIRE(s.state != nullptr && s.rows >= 0, kValue, "KdaDecoder: a segment needs a state and rows >= 0");
    total += s.rows;
  }
  MYRIAD_REQUIRE(total == N, kShape, "KdaDecoder: the segments cover ", total, " rows, the input has ", N);
  for (const KdaSegment& s : segs)
    if (s.shards) {
      const int64_t need = std::max<int64_t>(dims_.conv_width - 1, 1);
      MYRIAD_REQUIRE(segs.size() == 1 && s.state->tokens == 0 && s.rows == s.shards->rows(s.shards->index()), kValue,
                     "KdaDecoder: a prefill shard runs alone, from a fresh state, over its own rows");
      for (int64_t p = 0; p < s.shards->count(); ++p)
        MYRIAD_REQUIRE(s.shards->rows(p) >= need, kValue, "KdaDecoder: prefill shard ", p, " has ", s.shards->rows(p),
                       " tokens, fewer than the short convolution's window needs before the next (", need, ")");
    }
  HostKda exec{w_->device(), segs, N, dims_.heads, dims_.head_dim, dims_.conv_width, chunk};
  return kda_forward(exec, weights_, x, dims_);
}

}  // namespace myriad

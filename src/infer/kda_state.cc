#include "infer/kda_state.h"

#include <cmath>
#include <vector>

#include "core/threads.h"
#include "infer/decode_weights.h"
#include "model/constants.h"
#include "ops/kernels.h"

namespace myriad {

size_t KdaState::bytes() const {
  return conv_q.nbytes() + conv_k.nbytes() + conv_v.nbytes() + S.nbytes();
}

KdaState KdaState::clone() const {
  return KdaState{conv_q.clone(), conv_k.clone(), conv_v.clone(), S.clone(), tokens};
}

KdaDecoder::KdaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer)
    : KdaDecoder(config, DecodeWeights::from_model(weights), layer) {}

KdaDecoder::KdaDecoder(const ModelConfig& c, std::shared_ptr<const DecodeWeights> weights, int64_t layer)
    : w_(std::move(weights)) {
  MYRIAD_REQUIRE(layer >= 0 && layer < c.num_hidden_layers && c.mixer(layer) == Mixer::kKda, kValue,
                 "KdaDecoder: layer ", layer, " is not a KDA layer");
  const LinearAttnConfig& la = *c.linear_attn_config;
  H_ = la.num_heads;
  K_ = la.head_dim;
  W_ = la.short_conv_kernel_size;
  D_ = c.hidden_size;
  rms_eps_ = float(c.rms_norm_eps);
  lower_bound_ = float(la.gate_lower_bound);
  const std::string a = "model.layers." + std::to_string(layer) + ".self_attn.";
  const DecodeWeights& w = *w_;
  q_proj_ = w.linear(a + "q_proj.weight");
  k_proj_ = w.linear(a + "k_proj.weight");
  v_proj_ = w.linear(a + "v_proj.weight");
  f_a_ = w.linear(a + "f_a_proj.weight");
  f_b_ = w.linear(a + "f_b_proj.weight");
  b_proj_ = w.linear(a + "b_proj.weight");
  g_proj_ = w.linear(a + "g_proj.weight");
  o_proj_ = w.linear(a + "o_proj.weight");
  auto conv = [&](const char* n) { return w.tensor(a + n + "_conv1d.weight").view({H_ * K_, W_}); };
  conv_q_ = conv("q");
  conv_k_ = conv("k");
  conv_v_ = conv("v");
  a_log_ = w.tensor(a + "A_log");
  dt_bias_ = w.tensor(a + "dt_bias");
  o_norm_ = w.tensor(a + "o_norm.weight");
}

KdaState KdaDecoder::make_state() const {
  KdaState st;
  st.conv_q = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.conv_k = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.conv_v = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.S = Tensor::zeros({1, H_, K_, K_});
  return st;
}

Tensor KdaDecoder::forward(const Tensor& x, KdaState& st, int64_t chunk) const {
  const KdaSegment seg{&st, x.ndim() == 2 ? x.size(0) : 0};
  return forward(x, std::span<const KdaSegment>(&seg, 1), chunk);
}

Tensor KdaDecoder::forward(const Tensor& x_in, std::span<const KdaSegment> segs, int64_t chunk) const {
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.size(1) == D_ && x_in.dtype() == DType::kF32, kShape, "KdaDecoder: input ",
                 shape_str(x_in.shape()), " should be f32 [N, ", D_, "]");
  const Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), H = H_, K = K_, V = K_, HK = H * K;
  int64_t total = 0;
  for (const KdaSegment& s : segs) {
    MYRIAD_REQUIRE(s.state != nullptr && s.rows >= 0, kValue, "KdaDecoder: a segment needs a state and rows >= 0");
    total += s.rows;
  }
  MYRIAD_REQUIRE(total == N, kShape, "KdaDecoder: the segments cover ", total, " rows, the input has ", N);
  // The same operations as Transformer::kda_mixer, with each short conv starting from its segment's carried tail,
  // run straight on the kernels (decode runs this per layer and token; the autograd ops' bookkeeping was a
  // noticeable part of a quantized token).
  // Every product of x at once (one quantization of x and one parallel region when the weights are quantized):
  // q, k, v [N, HK], the gate's first factor, beta [N, H] and the output gate [N, H V].
  Tensor lin_q = Tensor::empty({N, HK}), lin_k = Tensor::empty({N, HK}), lin_v = Tensor::empty({N, HK});
  Tensor fa = Tensor::empty({N, f_a_.rows()}), beta = Tensor::empty({N, H}), gate = Tensor::empty({N, H * V});
  {
    const LinearWeight* w[] = {&q_proj_, &k_proj_, &v_proj_, &f_a_, &b_proj_, &g_proj_};
    float* y[] = {lin_q.data<float>(), lin_k.data<float>(), lin_v.data<float>(),
                  fa.data<float>(),    beta.data<float>(),  gate.data<float>()};
    LinearWeight::apply_many(w, x.data<float>(), N, y);
  }
  auto short_conv = [&](const Tensor& lin, const Tensor& w, Tensor KdaState::*tail) {
    Tensor y = Tensor::empty({N, HK});
    int64_t r0 = 0;
    for (const KdaSegment& s : segs) {
      Tensor next = Tensor::empty({1, W_ - 1, HK});
      ops::conv1d_forward(w_->device(), y.data<float>() + r0 * HK, next.data<float>(), lin.data<float>() + r0 * HK,
                          w.data<float>(), (s.state->*tail).data<float>(), 1, s.rows, HK, W_);
      s.state->*tail = next;
      r0 += s.rows;
    }
    ops::unary_forward(w_->device(), Unary::kSiLU, y.data<float>(), y.data<float>(), N * HK);
    return y;
  };
  thread_local std::vector<float> rnorm;  // l2norm's per-row statistics (unused here)
  if (rnorm.size() < size_t(N * H)) rnorm.resize(size_t(N * H));
  Tensor q = short_conv(lin_q, conv_q_, &KdaState::conv_q);  // [N, H, K]
  ops::l2norm_forward(w_->device(), q.data<float>(), rnorm.data(), q.data<float>(), N * H, K, kKdaQkL2NormEps);
  ops::scale(w_->device(), q.data<float>(), q.data<float>(), 1.0f / std::sqrt(float(K)), N * HK);
  Tensor k = short_conv(lin_k, conv_k_, &KdaState::conv_k);
  ops::l2norm_forward(w_->device(), k.data<float>(), rnorm.data(), k.data<float>(), N * H, K, kKdaQkL2NormEps);
  const Tensor v = short_conv(lin_v, conv_v_, &KdaState::conv_v);
  // g = lb * sigmoid(exp(A_log_h) * (f + dt_bias)), in place over f = W_fb W_fa x  [N, H, K]
  Tensor g = f_b_.apply(fa);
  ops::kda_gate_forward(w_->device(), g.data<float>(), g.data<float>(), a_log_.data<float>(), dt_bias_.data<float>(), N,
                        H, K, lower_bound_);
  ops::unary_forward(w_->device(), Unary::kSigmoid, beta.data<float>(), beta.data<float>(), N * H);
  Tensor o = Tensor::empty({N, H, V});
  std::vector<int64_t> row0(segs.size() + 1, 0);
  bool all_single = segs.size() > 1;
  for (size_t i = 0; i < segs.size(); ++i) {
    row0[i + 1] = row0[i] + segs[i].rows;
    all_single = all_single && segs[i].rows == 1;
  }
  auto run = [&](size_t i) {
    const KdaSegment& s = segs[i];
    const int64_t r0 = row0[i];
    if (s.rows > 0) {
      Tensor S_next = Tensor::empty(s.state->S.shape());
      const KdaShape shape{1, s.rows, H, K, V, chunk};
      // One token: the recurrent form (decode). More: the chunkwise form (prefill). Same state either way.
      (s.rows == 1 ? ops::kda_recurrent_forward : ops::kda_chunk_forward)(
          w_->device(), o.data<float>() + r0 * H * V, S_next.data<float>(), q.data<float>() + r0 * HK,
          k.data<float>() + r0 * HK, v.data<float>() + r0 * H * V, g.data<float>() + r0 * HK,
          beta.data<float>() + r0 * H, s.state->S.data<float>(), shape);
      s.state->S = S_next;
    }
    s.state->tokens += s.rows;
  };
  if (all_single) {  // a decode batch: one token per sequence, the sequences spread over the threads
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (size_t i = 0; i < segs.size(); ++i) run(i);
  } else {
    for (size_t i = 0; i < segs.size(); ++i) run(i);
  }
  // RMSNorm per head with the output gate: normed = o / rms(o) * o_norm * sigmoid(gate), as ag::rmsnorm_gated
  Tensor normed = Tensor::empty({N, H * V});
  thread_local std::vector<float> rstd;
  if (rstd.size() < size_t(N * H)) rstd.resize(size_t(N * H));
  ops::rmsnorm_forward(w_->device(), normed.data<float>(), rstd.data(), o.data<float>(), o_norm_.data<float>(),
                       gate.data<float>(), N * H, V, rms_eps_);
  return o_proj_.apply(normed);
}

}  // namespace myriad

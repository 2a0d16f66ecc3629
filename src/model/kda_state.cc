#include "model/kda_state.h"

#include <cmath>

#include "autograd/functions.h"

namespace myriad {

using ag::Var;

size_t KdaState::bytes() const {
  return conv_q.nbytes() + conv_k.nbytes() + conv_v.nbytes() + S.nbytes();
}

KdaDecoder::KdaDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t layer)
    : c_(config), w_(weights), prefix_("model.layers." + std::to_string(layer) + ".self_attn.") {
  MYRIAD_REQUIRE(layer >= 0 && layer < config.num_hidden_layers && config.mixer(layer) == Mixer::kKda, kValue,
                 "KdaDecoder: layer ", layer, " is not a KDA layer");
  const LinearAttnConfig& la = *config.linear_attn_config;
  H_ = la.num_heads;
  K_ = la.head_dim;
  W_ = la.short_conv_kernel_size;
}

KdaState KdaDecoder::make_state() const {
  KdaState st;
  st.conv_q = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.conv_k = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.conv_v = Tensor::zeros({1, W_ - 1, H_ * K_});
  st.S = Tensor::zeros({1, H_, K_, K_});
  return st;
}

Tensor KdaDecoder::forward(const Tensor& x_in, KdaState& st, int64_t chunk) const {
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.size(1) == c_.hidden_size, kShape, "KdaDecoder: input ",
                 shape_str(x_in.shape()), " should be [T, ", c_.hidden_size, "]");
  ag::NoGradGuard no_grad;
  const int64_t T = x_in.size(0), H = H_, K = K_, V = K_;
  const LinearAttnConfig& la = *c_.linear_attn_config;
  auto p = [&](const std::string& n) -> const Var& { return w_.at(prefix_ + n); };
  Var x(x_in.contiguous(), false);
  // The same operations as Transformer::kda_mixer, with each short conv starting from its carried tail.
  auto short_conv = [&](const char* name, Tensor& tail) {
    Var lin = ag::linear(x, p(std::string(name) + "_proj.weight"));
    const Var& w = p(std::string(name) + "_conv1d.weight");
    auto [y, next] =
        ag::conv1d(ag::reshape(lin, {1, T, H * K}), ag::reshape(w, {w.shape()[0], w.shape()[2]}), Var(tail, false));
    tail = next;
    return ag::silu(ag::reshape(y, {T, H * K}));
  };
  Var q = ag::scale(ag::l2norm(ag::reshape(short_conv("q", st.conv_q), {T, H, K}), 1e-6f), 1.0f / std::sqrt(float(K)));
  Var k = ag::l2norm(ag::reshape(short_conv("k", st.conv_k), {T, H, K}), 1e-6f);
  Var v = ag::reshape(short_conv("v", st.conv_v), {T, H, V});
  Var f = ag::reshape(ag::linear(ag::linear(x, p("f_a_proj.weight")), p("f_b_proj.weight")), {T, H, K});
  Var g = ag::kda_gate(f, p("A_log"), p("dt_bias"), float(la.gate_lower_bound));
  Var beta = ag::sigmoid(ag::linear(x, p("b_proj.weight")));
  Tensor o = Tensor::empty({1, T, H, V}), S_next = Tensor::empty(st.S.shape());
  const KdaShape shape{1, T, H, K, V, chunk};
  // One token: the recurrent form (decode). More: the chunkwise form (prefill). Same state either way.
  (T == 1 ? cpu::kda_recurrent_forward : cpu::kda_chunk_forward)(
      o.data<float>(), S_next.data<float>(), q.value().data<float>(), k.value().data<float>(), v.value().data<float>(),
      g.value().data<float>(), beta.value().data<float>(), st.S.data<float>(), shape);
  st.S = S_next;
  st.tokens += T;
  Var gate = ag::reshape(ag::linear(x, p("g_proj.weight")), {T, H, V});
  Var normed = ag::rmsnorm_gated(Var(o.view({T, H, V}), false), p("o_norm.weight"), gate, float(c_.rms_norm_eps));
  return ag::linear(ag::reshape(normed, {T, H * V}), p("o_proj.weight")).value();
}

}  // namespace myriad

#include "model/transformer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>

#include "autograd/grouped_experts.h"
#include "core/memory_profile.h"
#include "model/balancing.h"
#include "model/constants.h"
#include "model/ffn_module.h"
#include "model/gradient_ready.h"
#include "model/kda_module.h"
#include "model/layer_module.h"
#include "model/mla_module.h"
#include "model/moe_dispatch.h"
#include "model/rope.h"
#include "model/routing.h"
#include "model/sequence_context.h"
#include "model/sparse_mla.h"
#include "ops/rope_table.h"

namespace myriad {

using ag::Var;

namespace {

std::string layer_prefix(int64_t l) {
  return "model.layers." + std::to_string(l) + ".";
}

Var constant(Tensor t) {
  return Var(std::move(t), false);
}

// [C, 1, W] depthwise conv weight viewed as [C, W] through the tape.
Var conv_weight(const Var& w) {
  return ag::reshape(w, {w.shape()[0], w.shape()[2]});
}

}  // namespace

namespace {

// kda_module.h's execution on the tape: one sequence of T rows, the chunkwise form; the states entering it come
// from the sequence context (zeros for a whole sequence) and, when the context continues a shard, what it leaves
// (the conv tails and the final state, on the tape) goes back there.
struct TapeKda {
  using Value = Var;
  struct Weights {
    Var q_proj, k_proj, v_proj, f_a_proj, f_b_proj, b_proj, g_proj, o_proj;
    Var g_a_proj, g_b_proj;      // the low-rank output gate (use_full_rank_gate false)
    Var q_conv, k_conv, v_conv;  // [C, W] views of the [C, 1, W] conv weights
    Var A_log, dt_bias, o_norm;
  };

  int64_t layer, T, H, K, W, chunk;
  SequenceContext& ctx;
  bool hand_over;  // ctx.wants_kda_shard_states()
  std::array<Var, 3> tails;

  std::array<Var, 6> project(const Var& x, std::array<const Var*, 6> w) const {
    std::array<Var, 6> y;
    for (size_t i = 0; i < 6; ++i) y[i] = ag::linear(x, *w[i]);
    return y;
  }
  Var linear(const Var& x, const Var& w) const { return ag::linear(x, w); }
  Var short_conv(const Var& lin, const Var& w, int which) {
    const int64_t HK = H * K;
    const Var state_in = ctx.kda_conv_state_in(layer, which, lin);
    auto [y, tail] = ag::conv1d(ag::reshape(lin, {1, T, HK}), w, state_in);
    (void)tail;
    if (hand_over) {  // the last W-1 inputs as a Var (conv1d's tail is a plain value): zeros or state_in, then lin
      const Var before = state_in.defined() ? ag::reshape(state_in, {W - 1, HK}) : constant(Tensor::zeros({W - 1, HK}));
      tails[size_t(which)] =
          ag::reshape(ag::slice_rows(ag::concat_rows({before, lin}, HK), T, T + W - 1), {1, W - 1, HK});
    }
    return ag::silu(ag::reshape(y, {T, HK}));
  }
  Var l2norm_heads(const Var& x, float eps) const { return ag::l2norm(ag::reshape(x, {T, H, K}), eps); }
  Var scale(const Var& x, float a) const { return ag::scale(x, a); }
  Var sigmoid(const Var& x) const { return ag::sigmoid(x); }
  Var kda_gate(const Var& f, const Var& A_log, const Var& dt_bias, float lower_bound) const {
    return ag::kda_gate(ag::reshape(f, {T, H, K}), A_log, dt_bias, lower_bound);
  }
  Var delta_rule(const Var& q_in, const Var& k_in, const Var& v_in, const Var& g_in, const Var& beta_in) {
    const Var q = ag::reshape(q_in, {1, T, H, K}), k = ag::reshape(k_in, {1, T, H, K}),
              v = ag::reshape(v_in, {1, T, H, K}), g = ag::reshape(g_in, {1, T, H, K}),
              beta = ag::reshape(beta_in, {1, T, H});
    Var state_in;
    if (ctx.kda_composes_states()) {
      // The shard's affine map of the state (the delta rule is linear in it): from zeros with the real values
      // (offset) and from the identity with zero values (transition, K x K: KDA's K = V); the context composes the
      // earlier shards' maps into the state entering this one, then the shard runs from it.
      Tensor eye = Tensor::zeros({1, H, K, K});
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < K; ++i) eye.data<float>()[(h * K + i) * K + i] = 1.0f;
      const Var offset = ag::kda(q, k, v, g, beta, Var(), chunk).second;
      const Var transition = ag::kda(q, k, constant(Tensor::zeros({1, T, H, K})), g, beta, constant(eye), chunk).second;
      state_in = ctx.kda_compose_state(layer, transition, offset);
    } else {
      state_in = ctx.kda_state_in(layer);
    }
    auto [o, state] = ag::kda(q, k, v, g, beta, state_in, chunk);
    if (hand_over) ctx.kda_shard_done(layer, tails, state);
    return o;
  }
  Var gated_head_norm(const Var& o, const Var& o_norm, const Var& gate, float eps) const {
    const Var normed = ag::rmsnorm_gated(ag::reshape(o, {T, H, K}), o_norm, ag::reshape(gate, {T, H, K}), eps);
    return ag::reshape(normed, {T, H * K});
  }
};

}  // namespace

// KDA (docs/design.md §1.2): model/kda_module.h on the tape.
Var Transformer::kda_mixer(int64_t l, const Var& x, const ForwardOptions& opt, SequenceContext& ctx) const {
  const KdaDims d = KdaDims::of(config_);
  const std::string a = layer_prefix(l) + "self_attn.";
  TapeKda::Weights w;
  w.q_proj = p(a + "q_proj.weight");
  w.k_proj = p(a + "k_proj.weight");
  w.v_proj = p(a + "v_proj.weight");
  w.f_a_proj = p(a + "f_a_proj.weight");
  w.f_b_proj = p(a + "f_b_proj.weight");
  w.b_proj = p(a + "b_proj.weight");
  if (d.full_rank_gate) {
    w.g_proj = p(a + "g_proj.weight");
  } else {
    w.g_a_proj = p(a + "g_a_proj.weight");
    w.g_b_proj = p(a + "g_b_proj.weight");
  }
  w.o_proj = p(a + "o_proj.weight");
  w.q_conv = conv_weight(p(a + "q_conv1d.weight"));
  w.k_conv = conv_weight(p(a + "k_conv1d.weight"));
  w.v_conv = conv_weight(p(a + "v_conv1d.weight"));
  w.A_log = p(a + "A_log");
  w.dt_bias = p(a + "dt_bias");
  w.o_norm = p(a + "o_norm.weight");
  TapeKda exec{l, x.shape()[0], d.heads, d.head_dim, d.conv_width, opt.kda_chunk, ctx, ctx.wants_kda_shard_states(),
               {}};
  return kda_forward(exec, w, x, d);
}

namespace {

// mla_module.h's execution on the tape, the naive form: per-head K and V are materialised from the latents, and
// ag::attention runs over them. The latents of earlier shards come from the sequence context.
struct TapeMla {
  using Value = Var;
  struct Weights {
    Var q_a_proj, q_a_layernorm, q_b_proj, q_proj, kv_a_proj, kv_a_layernorm, kv_b_proj, g_proj, o_proj;
  };
  struct Latents {
    Var c_kv;  // [Tk, C], normed
    Var k_pe;  // [Tk, 1, Dr], not rotated yet
  };

  const ModelConfig& c;
  const Weights& w;
  int64_t layer, T;
  SequenceContext& ctx;

  Var linear(const Var& x, const Var& weight) const { return ag::linear(x, weight); }
  Var latent_norm(const Var& x, const Var& weight) const { return ag::rmsnorm(x, weight, kMlaLatentNormEps); }
  Var mul(const Var& a, const Var& b) const { return ag::mul(a, b); }
  Var sigmoid(const Var& x) const { return ag::sigmoid(x); }
  Var scale_queries(const Var& q) const {
    Tensor f = Tensor::empty({T, 1});
    for (int64_t t = 0; t < T; ++t) f.data<float>()[t] = mla_query_scale(c, ctx.token_offset() + t);
    return ag::mul(q, constant(f));
  }
  Latents latents(const Var& kv_a_local, const Var& norm) const {
    // This shard's latents and, through the sequence context, the earlier ones: [Tk, C + Dr].
    const Var kv_a = ctx.mla_latents(layer, kv_a_local);
    const int64_t Tk = kv_a.shape()[0];
    MYRIAD_REQUIRE(Tk == T + ctx.token_offset(), kValue, "mla layer ", layer, ": ", Tk, " latent rows for a shard of ",
                   T, " tokens at offset ", ctx.token_offset(), " (the rows of every token up to the shard's last)");
    const int64_t C = c.kv_lora_rank, Dr = c.qk_rope_head_dim;
    const Var c_kv = ag::slice_last(kv_a, 0, C);
    const Var k_pe = ag::reshape(ag::slice_last(kv_a, C, C + Dr), {Tk, 1, Dr});
    return {ag::rmsnorm(c_kv, norm, kMlaLatentNormEps), k_pe};
  }
  Var attend(const Var& q_shard, const Latents& lat) const {
    const int64_t H = c.num_attention_heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim, Dv = c.v_head_dim,
                  Dq = Dn + Dr;
    // Keys of every token up to the shard's last (Tk = offset + T): the queries are padded in front to Tk rows
    // (zeros, their outputs dropped), so the causal square attention puts the shard's queries at their positions.
    // NOTE: that costs Tk x Tk scores for T x Tk useful ones; an attention with a query offset is the fix.
    const int64_t Tk = lat.c_kv.shape()[0];
    const Var q_rows =
        Tk == T ? q_shard : ag::concat_rows({constant(Tensor::zeros({Tk - T, H * Dq})), q_shard}, H * Dq);
    const Var q = ag::reshape(q_rows, {Tk, H, Dq});
    const Var kv = ag::reshape(ag::linear(lat.c_kv, w.kv_b_proj), {Tk, H, Dn + Dv});
    const Var k_nope = ag::slice_last(kv, 0, Dn), v = ag::slice_last(kv, Dn, Dn + Dv);
    Var q_nope = ag::slice_last(q, 0, Dn), q_pe = ag::slice_last(q, Dn, Dq), k_pe = lat.k_pe;
    if (!c.mla_use_nope && Dr > 0) {
      std::vector<int64_t> pos(static_cast<size_t>(Tk));  // the padded queries and the keys: positions 0 .. Tk - 1
      std::iota(pos.begin(), pos.end(), ctx.token_offset() - (Tk - T));
      const std::optional<YarnParams> yarn = mla_yarn_params(c);
      const RopeTables rt = make_rope_tables(pos, Dr, c.rope_theta, yarn ? &*yarn : nullptr);
      const RopeLayout layout{0, Dr, c.rope_interleave};
      q_pe = ag::rope(q_pe, rt.cos, rt.sin, layout);
      k_pe = ag::rope(k_pe, rt.cos, rt.sin, layout);
    }
    // k_pe is shared by every head: broadcast it over H through an add (its gradient sums over heads).
    const Var k_pe_h = ag::add(constant(Tensor::zeros({Tk, H, Dr})), k_pe);
    const Var qf = ag::concat_last({q_nope, q_pe}), kf = ag::concat_last({k_nope, k_pe_h});
    const float scale = mla_score_scale(c);
    Var att;
    if (c.mla_sparse_attention) {
      // Block-sparse (model/sparse_mla.h): each query's blocks chosen from the latent rows MLA caches, as decode
      // chooses them, then an exact attention over those keys.
      const SparseMlaConfig& sp = *c.mla_sparse_attention;
      const Tensor kvb = w.kv_b_proj.value().contiguous();
      const Tensor blocks = sparse_mla_blocks(sp, qf.value(), lat.c_kv.value(), k_pe.value(), H, Dn, kvb.data<float>(),
                                              (Dn + Dv) * c.kv_lora_rank, scale);
      att = ag::sparse_attention(ag::reshape(qf, {1, Tk, H, Dq}), ag::reshape(kf, {1, Tk, H, Dq}),
                                 ag::reshape(v, {1, Tk, H, Dv}), blocks, sp.block_size, sp.local_blocks(), scale);
    } else {
      att = ag::attention(ag::reshape(qf, {1, Tk, H, Dq}), ag::reshape(kf, {1, Tk, H, Dq}),
                          ag::reshape(v, {1, Tk, H, Dv}), scale);
    }
    const Var rows = ag::reshape(att, {Tk, H * Dv});
    return Tk == T ? rows : ag::slice_rows(rows, Tk - T, Tk);
  }
};

}  // namespace

// Gated MLA (docs/design.md §1.3): model/mla_module.h on the tape.
Var Transformer::mla_mixer(int64_t l, const Var& x, SequenceContext& ctx) const {
  const std::string a = layer_prefix(l) + "self_attn.";
  const ModelConfig& c = config_;
  TapeMla::Weights w;
  if (c.q_lora_rank) {
    w.q_a_proj = p(a + "q_a_proj.weight");
    w.q_a_layernorm = p(a + "q_a_layernorm.weight");
    w.q_b_proj = p(a + "q_b_proj.weight");
  } else {
    w.q_proj = p(a + "q_proj.weight");
  }
  w.kv_a_proj = p(a + "kv_a_proj_with_mqa.weight");
  w.kv_a_layernorm = p(a + "kv_a_layernorm.weight");
  w.kv_b_proj = p(a + "kv_b_proj.weight");
  if (c.mla_use_output_gate) w.g_proj = p(a + "g_proj.weight");
  w.o_proj = p(a + "o_proj.weight");
  TapeMla exec{c, w, l, x.shape()[0], ctx};
  return mla_forward(exec, w, x, c);
}

namespace {

// ffn_module.h's execution on the tape. The routing statistics of the forward go to `stats` (when given), with
// balancing "aux_loss"'s balance loss on the router scores.
struct TapeFfn {
  using Value = Var;
  using Linear = Var;
  struct Glu {
    Var gate, up, down;
  };
  struct Moe {
    Var router, latent_down, latent_up, latent_norm;
    Glu shared;
    std::vector<Var> w1, w3, w2;  // every routed expert's gate, up, down
  };

  const ModelConfig& c;
  int64_t layer;
  RoutingStats* stats;

  Var linear(const Var& x, const Var& w) const { return ag::linear(x, w); }
  Var glu(const Var& g, const Var& u) const {
    if (c.hidden_act == HiddenAct::kSilu) return ag::mul(ag::silu(g), u);
    return ag::situ_glu(g, u, glu_params(c).situ);
  }
  Var add(const Var& a, const Var& b) const { return ag::add(a, b); }
  Var rmsnorm(const Var& x, const Var& w, float eps) const { return ag::rmsnorm(x, w, eps); }
  Var router_scores(const Var& x, const Var& w) const {
    const Var logits = ag::linear(x, w);  // [T, E], f32
    return c.moe_router_activation_func == RouterActivation::kSoftmax ? ag::softmax(logits) : ag::sigmoid(logits);
  }
  const Tensor& values(const Var& v) const { return v.value(); }
  Var route_weights(const Var& s, const Tensor& idx, float scale, bool renormalize) const {
    return ag::route_weights(s, idx, scale, renormalize);
  }
  void routing_stats(const Var& s, const ExpertSelection& sel, const ExpertGroups& groups) const {
    if (!stats) return;
    const int64_t E = c.num_experts;
    // Switch-style balancing acts through the loss: coef E sum_e f_e P_e on the router scores (docs/design.md §1.6).
    if (c.balancing == Balancing::kAuxLoss) stats->aux_loss = aux_balance_loss(s, sel.idx, float(c.aux_loss_coef));
    stats->layer = layer;
    stats->load.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) stats->load[size_t(e)] = groups.load(e);
    stats->scores = s.value().clone();
    stats->copies = sel.idx.numel();
    stats->dropped = sel.dropped;
    stats->rerouted = sel.rerouted;
  }
  Var as_var(const Var& v) const { return v; }
  Var from_var(const Var& v) const { return v; }
  // Every local expert at once (one tape node); the copies of local expert i are rows [offsets[i], offsets[i + 1]).
  // w holds the local experts only (moe_ffn): a rank under expert parallelism holds no others.
  Var experts(const ExpertBatch& batch, MoeDispatcher::Range local, const Moe& w, const Var&) const {
    MYRIAD_CHECK(int64_t(w.w1.size()) == local.count, "moe: ", w.w1.size(), " expert weights for ", local.count,
                 " local experts");
    return ag::grouped_expert_glu(batch.rows, batch.offsets, w.w1, w.w3, w.w2, glu_params(c), batch.row_cuts);
  }
  Var shared_experts(const Moe& w, const Var& x) { return glu_ffn(*this, w.shared, x); }
};

}  // namespace

const MoeDispatcher& Transformer::moe_dispatcher() const {
  return moe_dispatcher_ ? *moe_dispatcher_ : local_moe_dispatcher();
}

Var Transformer::dense_ffn(int64_t l, const Var& x) const {
  const std::string m = layer_prefix(l) + "mlp.";
  TapeFfn exec{config_, l, nullptr};
  return glu_ffn(exec, {p(m + "gate_proj.weight"), p(m + "up_proj.weight"), p(m + "down_proj.weight")}, x);
}

// Latent MoE (docs/design.md §1.5): model/ffn_module.h on the tape.
Var Transformer::moe_ffn(int64_t l, const Var& x, RoutingStats* stats, const ForwardOptions& opt) const {
  const ModelConfig& c = config_;
  const std::string m = layer_prefix(l) + "block_sparse_moe.";
  TapeFfn::Moe w;
  w.router = p(m + "gate.weight");
  if (c.routed_expert_hidden_size.has_value()) {
    w.latent_down = p(m + "routed_expert_down_proj.weight");
    w.latent_up = p(m + "routed_expert_up_proj.weight");
    if (c.latent_moe_use_norm) w.latent_norm = p(m + "routed_expert_norm.weight");
  }
  if (c.num_shared_experts > 0) {
    const std::string sh = m + "shared_experts.";
    w.shared = {p(sh + "gate_proj.weight"), p(sh + "up_proj.weight"), p(sh + "down_proj.weight")};
  }
  const MoeDispatcher& dispatcher = opt.moe_dispatcher ? *opt.moe_dispatcher : moe_dispatcher();
  const MoeDispatcher::Range local = dispatcher.local_experts(c.num_experts);
  for (int64_t e = local.first; e < local.first + local.count; ++e) {
    const std::string ex = m + "experts." + std::to_string(e) + ".";
    w.w1.push_back(p(ex + "w1.weight"));
    w.w3.push_back(p(ex + "w3.weight"));
    w.w2.push_back(p(ex + "w2.weight"));
  }
  const float* bias =
      c.topk_method == TopkMethod::kNoauxTc ? p(m + "gate.e_score_correction_bias").value().data<float>() : nullptr;
  const std::optional<double> capacity =
      c.has_capacity_limit() ? std::optional<double>(c.capacity_factor_at(opt.step)) : std::nullopt;
  TapeFfn exec{c, l, stats};
  RoutingTap tap;
  if (opt.routing_replay && size_t(l) < opt.routing_replay->size()) tap.replay = (*opt.routing_replay)[size_t(l)];
  return moe_forward(exec, w, x, c, bias, capacity, dispatcher, tap.replay.defined() ? &tap : nullptr);
}

// AttnRes read (docs/design.md §1.4): score_c = sum_d (w_norm * w_proj)_d V_c,d / rms(V_c); softmax over candidates.
Var Transformer::attn_res_read(const std::string& norm, const std::string& proj, const std::vector<Var>& cands,
                               bool checkpoint) const {
  if (checkpoint && ag::grad_enabled())
    return ag::checkpoint(
        [this, norm, proj](const std::vector<Var>& in) { return attn_res_read(norm, proj, in, false); }, cands);
  return ag::attn_res_read(cands, p(norm), p(proj), float(config_.rms_norm_eps));  // one tape node
}

// model/layer_module.h's execution on the tape: the layer's norms and modules, AttnRes reads by their weight names,
// and per layer the routing statistics (with gradient checkpointing, each layer runs inside ag::checkpoint and is
// recomputed in the backward).
struct Transformer::Stack {
  using Value = Var;

  const Transformer& m;
  ForwardOptions opt;
  ForwardResult* result = nullptr;  // receives each layer's routing statistics and balance loss
  RoutingStats* stats = nullptr;    // the running layer's
  LocalSequenceContext whole;       // the whole sequence, when no context is given

  Var mixer(int64_t l, const Var& h) {
    memory_profile::Part part(m.config_.mixer(l) == Mixer::kKda ? "kda" : "mla");
    const Var n = ag::rmsnorm(h, m.p(layer_prefix(l) + "input_layernorm.weight"), float(m.config_.rms_norm_eps));
    SequenceContext& ctx = opt.sequence ? *opt.sequence : whole;
    return m.config_.mixer(l) == Mixer::kKda ? m.kda_mixer(l, n, opt, ctx) : m.mla_mixer(l, n, ctx);
  }
  Var ffn(int64_t l, const Var& h) {
    memory_profile::Part part(m.config_.is_moe_layer(l) ? "moe" : "dense ffn");
    const Var n =
        ag::rmsnorm(h, m.p(layer_prefix(l) + "post_attention_layernorm.weight"), float(m.config_.rms_norm_eps));
    return m.config_.is_moe_layer(l) ? m.moe_ffn(l, n, stats, opt) : m.dense_ffn(l, n);
  }
  Var add(const Var& a, const Var& b) const { return ag::add(a, b); }
  Var res_read(int64_t l, ResRead which, const std::vector<Var>& cands) const {
    memory_profile::Part part("attn_res");
    if (which == ResRead::kOutputRead)
      return m.attn_res_read("model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight", cands,
                             opt.checkpoint_layers);
    const std::string pre = layer_prefix(l) + (which == ResRead::kMixerRead ? "self_attention_res_" : "mlp_res_");
    return m.attn_res_read(pre + "norm.weight", pre + "proj.weight", cands, opt.checkpoint_layers);
  }
  Var layer(int64_t l, const std::vector<Var>& sealed, const Var& running, Var* mixer_out) {
    memory_profile::Part part("residual stream");  // the adds, and with checkpointing each layer's kept output
    // Layer l's weights are used only by the nodes recorded from here to the next layer's marker: when the
    // backward reaches this point, their gradients are complete.
    if (opt.gradient_ready && ag::grad_enabled())
      ag::Tape::current().on_backward([listener = opt.gradient_ready, l] { listener->layer_ready(l); });
    auto st = std::make_shared<RoutingStats>();
    Var next;
    if (!mixer_out && opt.checkpoint_layers && ag::grad_enabled()) {
      std::vector<Var> inputs = sealed;
      inputs.push_back(running);
      auto first = std::make_shared<bool>(true);
      const Transformer* self = &m;
      const ForwardOptions o = opt;
      next = ag::checkpoint(
          [self, l, o, st, first](const std::vector<Var>& in) {
            Stack inner{*self, o, nullptr, *first ? st.get() : nullptr, {}};  // statistics from the first pass only
            *first = false;
            return attn_res_layer(inner, l, self->config_, std::vector<Var>(in.begin(), in.end() - 1), in.back(),
                                  nullptr);
          },
          inputs);
    } else {
      stats = st.get();
      next = attn_res_layer(*this, l, m.config_, sealed, running, mixer_out);
      stats = nullptr;
    }
    if (st->aux_loss.defined())
      result->aux_loss = result->aux_loss.defined() ? ag::add(result->aux_loss, st->aux_loss) : st->aux_loss;
    if (st->layer >= 0) result->routing.push_back(std::move(*st));
    return next;
  }
};

Var Transformer::with_images(const Var& embedded, const Tensor& tokens, const Var* features) const {
  if (!features) return embedded;
  const ModelConfig& c = config_;
  MYRIAD_REQUIRE(c.media_placeholder_token_id.has_value(), kValue,
                 "forward: images given but the config has no media_placeholder_token_id to place them at");
  const int64_t T = tokens.numel(), D = c.hidden_size, ph = *c.media_placeholder_token_id;
  MYRIAD_REQUIRE(features->value().ndim() == 2 && features->shape()[1] == D, kShape, "forward: image features ",
                 shape_str(features->shape()), " must be [tokens, hidden_size ", D, "]");
  const Tensor ids = tokens.contiguous();
  // Row t of [embedded; features]: t itself, or T + k at the k-th placeholder.
  std::vector<int32_t> rows(static_cast<size_t>(T));
  int64_t k = 0;
  for (int64_t t = 0; t < T; ++t) rows[size_t(t)] = int32_t(ids.data<int64_t>()[t] == ph ? T + k++ : t);
  MYRIAD_REQUIRE(k == features->shape()[0], kShape, "forward: the text has ", k, " image placeholder tokens (id ", ph,
                 ") but the images give ", features->shape()[0], " tokens");
  return ag::gather_rows(ag::concat_rows({embedded, *features}, D), Tensor::from_vector(rows, {T}));
}

ForwardResult Transformer::forward(const Tensor& tokens, const Tensor& targets, const ForwardOptions& opt) const {
  const ModelConfig& c = config_;
  MYRIAD_REQUIRE(tokens.dtype() == DType::kI64 && tokens.ndim() == 1, kShape, "forward: tokens must be I64 [T], got ",
                 dtype_name(tokens.dtype()), " ", shape_str(tokens.shape()));
  const int64_t T = tokens.numel();
  MYRIAD_REQUIRE(T <= c.max_position_embeddings, kValue, "forward: sequence of ", T,
                 " tokens is longer than max_position_embeddings (", c.max_position_embeddings, ")");
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = tokens.contiguous().data<int64_t>()[t];
    MYRIAD_REQUIRE(id >= 0 && id < c.vocab_size, kValue, "forward: token id ", id, " at position ", t,
                   " is outside the vocabulary [0, ", c.vocab_size, ")");
  }
  ForwardResult result;
  const float eps = float(c.rms_norm_eps);
  std::optional<memory_profile::Part> part(std::in_place, "embedding");
  const Var running = with_images(ag::embedding(p("model.embed_tokens.weight"), tokens), tokens, opt.image_features);
  part.reset();
  const bool skip = c.attn_res_mode == AttnResMode::kSkip;
  MYRIAD_REQUIRE(!(skip && opt.checkpoint_layers), kUnsupported,
                 "attn_res_mode \"skip\" with gradient checkpointing: the held mixer output would need a second "
                 "checkpoint output; use \"block\" or \"none\", or turn checkpointing off");
  MYRIAD_REQUIRE(!(c.balancing == Balancing::kAuxLoss && opt.checkpoint_layers && ag::grad_enabled()), kUnsupported,
                 "balancing \"aux_loss\" with gradient checkpointing: the balance loss is computed inside the "
                 "recomputed layer and would get no gradient; use balancing \"qb\" or \"sign_update\", or turn "
                 "gradient_checkpointing off");
  Stack stack{*this, opt, &result, nullptr, {}};
  const Var h = layer_stack(stack, c, running);
  part.emplace("lm head + loss");
  result.hidden = ag::rmsnorm(h, p("model.norm.weight"), eps);
  if (targets.defined()) {
    const Var& head = c.tie_word_embeddings ? p("model.embed_tokens.weight") : p("lm_head.weight");
    result.loss = ag::cross_entropy(result.hidden, head, targets, -100, opt.target_weights,
                                    opt.target_weights ? &result.token_nll : nullptr);
  }
  return result;
}

Tensor Transformer::logits(const Var& hidden) const {
  ag::NoGradGuard no_grad;
  const Var& head = config_.tie_word_embeddings ? p("model.embed_tokens.weight") : p("lm_head.weight");
  return ag::linear(Var(hidden.value(), false), head).value();
}

Var Transformer::distillation_loss(const Var& hidden, const Tensor& teacher_probs, const Tensor& targets) const {
  const Var& head = config_.tie_word_embeddings ? p("model.embed_tokens.weight") : p("lm_head.weight");
  const int64_t T = hidden.shape()[0], V = head.shape()[0];
  MYRIAD_REQUIRE(teacher_probs.dtype() == DType::kF32 && teacher_probs.ndim() == 2 && teacher_probs.size(0) == T &&
                     teacher_probs.size(1) == V && targets.numel() == T,
                 kShape, "distillation: teacher probabilities ", shape_str(teacher_probs.shape()), " and ",
                 targets.numel(), " targets for ", T, " positions of a ", V, "-token vocabulary");
  // The ignored positions' rows zeroed: they add nothing, and the mean runs over the counted ones.
  Tensor w = teacher_probs.contiguous().clone();
  const Tensor t = targets.contiguous();
  int64_t counted = 0;
  for (int64_t i = 0; i < T; ++i) {
    if (t.data<int64_t>()[i] == -100)
      std::fill(w.data<float>() + i * V, w.data<float>() + (i + 1) * V, 0.0f);
    else
      ++counted;
  }
  const Var log_q = ag::log_softmax(ag::linear(hidden, head));
  return ag::scale(ag::sum(ag::mul(log_q, Var(w, false))), -1.0f / float(std::max<int64_t>(counted, 1)));
}

}  // namespace myriad

#include "infer/inference_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "autograd/functions.h"
#include "core/phase_profile.h"
#include "core/threads.h"
#include "infer/weight_layout.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "model/ffn_module.h"
#include "model/layer_module.h"
#include "model/moe_dispatch.h"
#include "model/param_spec.h"
#include "model/routing.h"
#include "ops/kernels.h"
#include "ops/serial_blas.h"

namespace myriad {

namespace fs = std::filesystem;

namespace {

std::string layer_prefix(int64_t l) {
  return "model.layers." + std::to_string(l) + ".";
}

}  // namespace

size_t SequenceState::kda_bytes() const {
  size_t b = 0;
  for (const KdaState& s : kda) b += s.S.defined() ? s.bytes() : 0;
  return b;
}

size_t SequenceState::mla_bytes() const {
  size_t b = 0;
  for (const MlaCache& c : mla) b += c.bytes();
  return b;
}

void SequenceState::begin_speculation() {
  spec_.active = true;
  spec_.start = tokens;
  spec_.kda.assign(kda.size(), {});
  for (size_t l = 0; l < kda.size(); ++l)
    if (kda[l].S.defined()) spec_.kda[l].push_back(kda[l].clone());
  spec_.routing_start.assign(routing.size(), 0);
  for (size_t l = 0; l < routing.size(); ++l) spec_.routing_start[l] = routing[l].size();
}

void SequenceState::rewind(int64_t n) {
  MYRIAD_REQUIRE(spec_.active && n >= spec_.start && n <= tokens, kValue, "sequence: rewinding to ", n,
                 " tokens needs speculation begun at or before it (begun: ", spec_.active ? "yes" : "no", ", at ",
                 spec_.start, " tokens; now ", tokens, ")");
  if (n == tokens) return;
  const auto back = size_t(n - spec_.start);
  for (size_t l = 0; l < kda.size(); ++l) {
    std::vector<KdaState>& h = spec_.kda[l];
    if (kda[l].S.defined()) {
      MYRIAD_CHECK(h.size() == size_t(tokens - spec_.start) + 1, "sequence: KDA layer ", l, " kept ", h.size(),
                   " states for ", tokens - spec_.start, " tokens");
      kda[l] = h[back].clone();
      h.resize(back + 1);
    } else {
      mla[l].truncate(mla[l].size() - (tokens - n));  // an MLA layer's cache holds every processed token
    }
  }
  const int64_t since = tokens - spec_.start;
  for (size_t l = 0; l < routing.size(); ++l) {
    const size_t r0 = l < spec_.routing_start.size() ? spec_.routing_start[l] : 0;
    const size_t per = (routing[l].size() - r0) / size_t(since);  // entries per token (k on MoE layers)
    routing[l].resize(r0 + per * back);
  }
  tokens = n;
}

void SequenceState::end_speculation() {
  spec_ = {};
}

InferenceModel::InferenceModel(ModelConfig config, std::shared_ptr<const DecodeWeights> weights, Tokenizer tokenizer)
    : config_(std::move(config)), w_(std::move(weights)), tokenizer_(std::move(tokenizer)) {
  const int64_t Lc = config_.num_hidden_layers;
  kda_.resize(size_t(Lc));
  mla_.resize(size_t(Lc));
  auto vec = [&](const std::string& name) { return w_->tensor(name).data<float>(); };
  auto glu = [&](const std::string& prefix) {
    return GluLinears{&lin(prefix + "gate_proj.weight"), &lin(prefix + "up_proj.weight"),
                      &lin(prefix + "down_proj.weight")};
  };
  const bool block = config_.attn_res_mode == AttnResMode::kBlock;
  layers_.resize(size_t(Lc));
  for (int64_t l = 0; l < Lc; ++l) {
    LayerRefs& r = layers_[size_t(l)];
    const std::string pre = layer_prefix(l);
    r.input_norm = vec(pre + "input_layernorm.weight");
    r.post_norm = vec(pre + "post_attention_layernorm.weight");
    if (block) {
      r.pre_res_norm = vec(pre + "self_attention_res_norm.weight");
      r.pre_res_proj = vec(pre + "self_attention_res_proj.weight");
      r.post_res_norm = vec(pre + "mlp_res_norm.weight");
      r.post_res_proj = vec(pre + "mlp_res_proj.weight");
    }
    if (config_.is_moe_layer(l)) {
      const std::string m = pre + "block_sparse_moe.";
      r.router = &lin(m + "gate.weight");
      if (config_.topk_method == TopkMethod::kNoauxTc) r.router_bias = vec(m + "gate.e_score_correction_bias");
      if (config_.routed_expert_hidden_size.has_value()) {
        r.latent_down = &lin(m + "routed_expert_down_proj.weight");
        r.latent_up = &lin(m + "routed_expert_up_proj.weight");
        if (config_.latent_moe_use_norm) r.latent_norm = vec(m + "routed_expert_norm.weight");
      }
      if (config_.num_shared_experts > 0) r.shared = glu(m + "shared_experts.");
      for (int64_t e = 0; e < config_.num_experts; ++e)
        for (const char* w : {"w1", "w3", "w2"}) {
          const std::string name = m + "experts." + std::to_string(e) + "." + w + ".weight";
          r.experts.push_back(w_->contains(name) ? &lin(name) : nullptr);  // null: another rank's expert
        }
    } else {
      r.mlp = glu(pre + "mlp.");
    }
    if (config_.mixer(l) == Mixer::kKda)
      kda_[size_t(l)] = std::make_unique<KdaDecoder>(config_, w_, l);
    else
      mla_[size_t(l)] = std::make_unique<MlaDecoder>(config_, w_, l);
  }
  if (block) {
    out_res_norm_ = vec("model.output_attn_res_norm.weight");
    out_res_proj_ = vec("model.output_attn_res_proj.weight");
  }
  final_norm_ = vec("model.norm.weight");
  embed_ = vec("model.embed_tokens.weight");
  lm_head_ = &lin(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

std::shared_ptr<InferenceModel> InferenceModel::load(const std::string& dir_in,
                                                     const std::function<ParamFilter(const ModelConfig&)>& keep_for,
                                                     const std::string& tokenizer) {
  MYRIAD_REQUIRE(fs::is_directory(dir_in), kIo, "model: ", dir_in, " is not a directory");
  const std::string dir = model_or_latest_checkpoint(dir_in);
  ModelConfig mc = load_model_config(dir, nullptr);
  const Checkpoint ck = open_model_checkpoint(dir, mc);
  // The vision tower runs on the op layer (encode_images), from Vars; the text model from DecodeWeights.
  auto vision = [](const ParamSpec& s) {
    return s.component == Component::kVision || s.component == Component::kProjector;
  };
  const ParamFilter keep = keep_for ? keep_for(mc) : ParamFilter{};
  auto m = std::make_shared<InferenceModel>(
      mc, DecodeWeights::from_checkpoint(ck, mc, [&](const ParamSpec& s) { return !vision(s) && (!keep || keep(s)); }));
  if (mc.vision_config) m->vision_ = std::make_shared<ModelWeights>(ModelWeights::from_checkpoint(ck, mc, vision));
  const std::string tok = tokenizer.empty() ? find_model_tokenizer(dir, dir_in) : tokenizer;
  m->tokenizer_ = Tokenizer::load(tok);
  MYRIAD_REQUIRE(m->tokenizer_.vocab_size() <= mc.vocab_size, kFormat, "model: the tokenizer in ", tok, " has ",
                 m->tokenizer_.vocab_size(), " tokens, more than the model's vocab_size ", mc.vocab_size);
  m->source_ = dir;
  return m;
}

int64_t InferenceModel::text_vocab_size() const {
  return tokenizer_.loaded() ? std::min(tokenizer_.vocab_size(), vocab_size()) : vocab_size();
}

void InferenceModel::mask_padded_ids(float* logits, int64_t rows) const {
  const int64_t V = vocab_size(), text = text_vocab_size();
  for (int64_t r = 0; r < rows; ++r)
    std::fill(logits + r * V + text, logits + (r + 1) * V, -std::numeric_limits<float>::infinity());
}

SequenceState InferenceModel::new_sequence(int64_t page_tokens, DType cache_dtype) const {
  SequenceState s;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    s.kda.push_back(kda_[size_t(l)] ? kda_[size_t(l)]->make_state() : KdaState{});
    s.mla.push_back(MlaCache::for_config(config_, page_tokens, cache_dtype));
  }
  return s;
}

Tensor InferenceModel::rmsnorm(const Tensor& x_in, const float* weight) const {
  const PhaseScope phase("norms");
  const Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), D = x.size(1);
  Tensor y = Tensor::empty({N, D});
  thread_local std::vector<float> rstd;
  if (rstd.size() < size_t(N)) rstd.resize(size_t(N));
  ops::rmsnorm_forward(w_->device(), y.data<float>(), rstd.data(), x.data<float>(), weight, nullptr, N, D,
                       float(config_.rms_norm_eps));
  return y;
}

Tensor InferenceModel::attn_res_read(const float* norm, const float* proj, const std::vector<Tensor>& cands) const {
  // The AttnRes read as training runs it (ops::attn_res_read_forward: one op, docs/design.md §1.4).
  const PhaseScope phase("AttnRes reads");
  std::vector<Tensor> held;  // contiguous copies where a candidate is a view
  std::vector<const float*> v;
  for (const Tensor& c : cands) {
    held.push_back(c.contiguous());
    v.push_back(held.back().data<float>());
  }
  const int64_t T = cands[0].size(0), D = cands[0].size(1), C = int64_t(cands.size());
  std::vector<float> u(static_cast<size_t>(D));
  for (int64_t j = 0; j < D; ++j) u[size_t(j)] = norm[j] * proj[j];
  Tensor out = Tensor::empty({T, D});
  std::vector<float> p(static_cast<size_t>(T * C)), r(static_cast<size_t>(T * C));
  ops::attn_res_read_forward(w_->device(), out.data<float>(), p.data(), r.data(), v.data(), C, T, D, u.data(),
                             float(config_.rms_norm_eps));
  return out;
}

namespace {

// ffn_module.h's execution without the tape: LinearWeight products (dense or block-quantized), values are f32
// tensors changed in place where a step allows.
struct HostFfn {
  using Value = Tensor;
  using Linear = const LinearWeight*;
  using Glu = GluLinears;
  struct Moe {
    const LinearWeight *router = nullptr, *latent_down = nullptr, *latent_up = nullptr;
    const float* latent_norm = nullptr;
    GluLinears shared;
    const std::vector<const LinearWeight*>* experts = nullptr;  // [3 e + 0] w1, [3 e + 1] w3, [3 e + 2] w2
  };

  const ModelConfig& c;
  Device device;
  Tensor shared_out;  // the shared experts' output, when experts() computed it beside the routed ones

  Tensor linear(const Tensor& x, const LinearWeight* w) const {
    const PhaseScope phase("FFN products (dense, shared, latent)");
    return w->apply(x);
  }
  Tensor glu(const Tensor& g, const Tensor& u) const {
    const PhaseScope phase("FFN activations");
    ops::glu_forward(device, glu_params(c), g.data<float>(), g.data<float>(), u.data<float>(), g.size(0), g.size(1));
    return g;
  }
  Tensor add(const Tensor& a, const Tensor& b) const {
    const PhaseScope phase("residual adds");
    ops::axpy(device, a.data<float>(), b.data<float>(), 1.0f, a.numel());
    return a;
  }
  Tensor rmsnorm(const Tensor& x, const float* weight, float eps) const {
    const PhaseScope phase("norms");
    const int64_t N = x.size(0), D = x.size(1);
    Tensor y = Tensor::empty({N, D});
    thread_local std::vector<float> rstd;
    if (rstd.size() < size_t(N)) rstd.resize(size_t(N));
    ops::rmsnorm_forward(device, y.data<float>(), rstd.data(), x.data<float>(), weight, nullptr, N, D, eps);
    return y;
  }
  Tensor router_scores(const Tensor& x, const LinearWeight* w) const {
    const PhaseScope phase("MoE routing");
    Tensor s = w->apply(x);  // [N, E] f32
    if (c.moe_router_activation_func == RouterActivation::kSoftmax)
      ops::softmax_forward(device, s.data<float>(), s.data<float>(), s.size(0), s.size(1));
    else
      ops::unary_forward(device, Unary::kSigmoid, s.data<float>(), s.data<float>(), s.numel());
    return s;
  }
  const Tensor& values(const Tensor& v) const { return v; }
  Tensor route_weights(const Tensor& s, const Tensor& idx, float scale, bool renormalize) const {
    const PhaseScope phase("MoE routing");
    const int64_t N = idx.size(0), k = idx.size(1);
    Tensor p = Tensor::empty({N, k});
    ops::route_weights_forward(device, p.data<float>(), nullptr, s.data<float>(), idx.data<int32_t>(), N, s.size(1), k,
                               scale, renormalize);
    return p;
  }
  void routing_stats(const Tensor&, const ExpertSelection&, const ExpertGroups&) const {}
  ag::Var as_var(const Tensor& t) const { return ag::Var(t, false); }
  Tensor from_var(const ag::Var& v) const { return v.value(); }

  // The local experts that received copies. Decode-sized batches give each a handful of rows: too little work to
  // split one expert's products over threads, so the experts themselves are spread over the threads (each
  // computing into its own rows of the outputs), with the shared experts as one more task (first, being the
  // largest) instead of three products of their own after them. Larger batches run the experts in turn, each
  // product threaded inside.
  Tensor experts(const ExpertBatch& batch, MoeDispatcher::Range local, const Moe& w, const Tensor& x) {
    const PhaseScope phase("MoE experts (routed + shared)");
    const Tensor& rows = batch.rows.value();  // [copies, L]
    const std::vector<int64_t>& off = batch.offsets;
    const int64_t L = rows.size(1), F = c.moe_intermediate_size;
    std::vector<int64_t> active;
    for (int64_t i = 0; i < local.count; ++i)
      if (off[size_t(i + 1)] > off[size_t(i)]) active.push_back(i);
    Tensor outs = Tensor::empty({rows.size(0), L});  // local expert i writes rows off[i] .. off[i+1]
    const std::vector<const LinearWeight*>& ew = *w.experts;
    auto run_expert = [&](size_t a) {
      const int64_t i = active[a], e = local.first + i, e0 = off[size_t(i)], e1 = off[size_t(i + 1)];
      MYRIAD_CHECK(ew[size_t(3 * e)], "moe: expert ", e, " is not held by this process");
      // One product per piece (each source rank's copies under expert parallelism: ExpertBatch::row_cuts).
      const auto cut0 = std::upper_bound(batch.row_cuts.begin(), batch.row_cuts.end(), e0);
      for (auto cut = cut0;; ++cut) {
        const int64_t b0 = cut == cut0 ? e0 : *(cut - 1);
        const int64_t b1 = cut != batch.row_cuts.end() && *cut < e1 ? *cut : e1, n = b1 - b0;
        thread_local std::vector<float> g, up;  // [n, F] each
        if (g.size() < size_t(n * F)) g.resize(size_t(n * F)), up.resize(size_t(n * F));
        const float* ze = rows.data<float>() + b0 * L;
        ew[size_t(3 * e)]->apply(ze, n, g.data());       // w1 (gate)
        ew[size_t(3 * e + 1)]->apply(ze, n, up.data());  // w3 (up)
        ops::glu_forward(device, glu_params(c), g.data(), g.data(), up.data(), n, F);
        ew[size_t(3 * e + 2)]->apply(g.data(), n, outs.data<float>() + b0 * L);  // w2 (down)
        if (b1 == e1) break;
      }
    };
    const bool shared = c.num_shared_experts > 0;
    if (x.size(0) * c.num_experts_per_token <= 64 && active.size() > 1) {
      const size_t tasks = active.size() + (shared ? 1 : 0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
      for (size_t a = 0; a < tasks; ++a) {
        if (shared && a == 0)
          shared_out = glu_ffn(*this, w.shared, x);
        else
          run_expert(a - (shared ? 1 : 0));
      }
    } else {
      for (size_t a = 0; a < active.size(); ++a) run_expert(a);
    }
    return outs;
  }
  Tensor shared_experts(const Moe& w, const Tensor& x) {
    return shared_out.defined() ? shared_out : glu_ffn(*this, w.shared, x);
  }
};

}  // namespace

Tensor InferenceModel::ffn(int64_t l, const Tensor& x_in, std::span<const BatchEntry> batch) const {
  const Tensor x = x_in.contiguous();
  const LayerRefs& lw = layers_[size_t(l)];
  HostFfn exec{config_, w_->device(), {}};
  if (!config_.is_moe_layer(l)) return glu_ffn(exec, lw.mlp, x);
  const HostFfn::Moe w{lw.router, lw.latent_down, lw.latent_up, lw.latent_norm, lw.shared, &lw.experts};
  RoutingTap tap;
  if (std::any_of(batch.begin(), batch.end(), [](const BatchEntry& b) { return b.seq->record_routing; }))
    tap.record = [&](const Tensor& idx) {  // each recording sequence's rows, appended to its state
      const int64_t k = idx.size(1), layers = config_.num_hidden_layers;
      const int32_t* p = idx.data<int32_t>();
      int64_t row = 0;
      for (const BatchEntry& b : batch) {
        const auto n = int64_t(b.tokens.size());
        if (b.seq->record_routing) {
          std::vector<std::vector<int32_t>>& r = b.seq->routing;
          if (int64_t(r.size()) < layers) r.resize(size_t(layers));
          r[size_t(l)].insert(r[size_t(l)].end(), p + row * k, p + (row + n) * k);
        }
        row += n;
      }
    };
  // Serving has no capacity limit.
  return moe_forward(exec, w, x, config_, lw.router_bias, std::nullopt,
                     moe_dispatcher_ ? *moe_dispatcher_ : local_moe_dispatcher(), tap.record ? &tap : nullptr);
}

void InferenceModel::serve_remote_experts(int64_t l, const MoeDispatcher& dispatcher) const {
  MYRIAD_REQUIRE(config_.is_moe_layer(l), kValue, "serve_remote_experts: layer ", l, " is not an MoE layer");
  const LayerRefs& lw = layers_[size_t(l)];
  HostFfn exec{config_, w_->device(), {}};
  const HostFfn::Moe w{lw.router, lw.latent_down, lw.latent_up, lw.latent_norm, lw.shared, &lw.experts};
  const int64_t k = config_.num_experts_per_token, L = config_.expert_width();
  const ExpertGroups none = group_by_expert(Tensor::empty({0, k}, DType::kI32), config_.num_experts);
  const ExpertBatch batch =
      dispatcher.dispatch(ag::Var(Tensor::empty({0, L}), false), none, ag::Var(Tensor::empty({0, k}), false));
  const Tensor out =
      exec.experts(batch, dispatcher.local_experts(config_.num_experts), w, Tensor::empty({0, config_.hidden_size}));
  (void)dispatcher.combine(ag::Var(out, false), batch, 0);
}

// model/layer_module.h's execution without the tape: the mixers as decoders over each sequence's state (the
// batch's segments), the FFN through ffn_module.h, the AttnRes read through layer_module.h.
struct InferenceModel::Stack {
  using Value = Tensor;

  const InferenceModel& m;
  std::span<const BatchEntry> batch;

  Tensor mixer(int64_t l, const Tensor& h) const {
    const Tensor n = m.rmsnorm(h, m.layers_[size_t(l)].input_norm);
    if (m.kda_[size_t(l)]) {
      std::vector<KdaSegment> segs;
      for (const BatchEntry& b : batch)
        segs.push_back({&b.seq->kda[size_t(l)], int64_t(b.tokens.size()), b.shards, b.seq->kda_history(size_t(l))});
      return m.kda_[size_t(l)]->forward(n, segs, m.kda_chunk);
    }
    std::vector<MlaSegment> segs;
    for (const BatchEntry& b : batch)
      segs.push_back({&b.seq->mla[size_t(l)], int64_t(b.tokens.size()), b.seq->tokens, b.shards});
    return m.mla_[size_t(l)]->forward(n, segs);
  }
  Tensor ffn(int64_t l, const Tensor& h) const { return m.ffn(l, m.rmsnorm(h, m.layers_[size_t(l)].post_norm), batch); }
  Tensor add(const Tensor& a, const Tensor& b) const {
    const PhaseScope phase("residual adds");
    Tensor r = a.clone();
    ops::axpy(r.device(), r.data<float>(), b.contiguous().data<float>(), 1.0f, r.numel());
    return r;
  }
  Tensor res_read(int64_t l, ResRead which, const std::vector<Tensor>& cands) const {
    if (which == ResRead::kOutputRead) return m.attn_res_read(m.out_res_norm_, m.out_res_proj_, cands);
    const LayerRefs& lr = m.layers_[size_t(l)];
    return which == ResRead::kMixerRead ? m.attn_res_read(lr.pre_res_norm, lr.pre_res_proj, cands)
                                        : m.attn_res_read(lr.post_res_norm, lr.post_res_proj, cands);
  }
  Tensor layer(int64_t l, const std::vector<Tensor>& sealed, const Tensor& running, Tensor* mixer_out) {
    return attn_res_layer(*this, l, m.config_, sealed, running, mixer_out);
  }
};

void InferenceModel::place_images(std::span<const BatchEntry> batch, Tensor& running) const {
  const int64_t D = config_.hidden_size;
  int64_t row = 0;
  for (const BatchEntry& b : batch) {
    if (!b.image_rows.empty()) {
      MYRIAD_REQUIRE(config_.media_placeholder_token_id.has_value(), kValue,
                     "inference: images given but the config has no media_placeholder_token_id to place them at");
      const int32_t ph = int32_t(*config_.media_placeholder_token_id);
      const int64_t placeholders = std::count(b.tokens.begin(), b.tokens.end(), ph);
      MYRIAD_REQUIRE(int64_t(b.image_rows.size()) == placeholders * D, kValue, "inference: ", placeholders,
                     " image placeholder tokens (id ", ph, ") but ", double(b.image_rows.size()) / double(D),
                     " image token rows of width ", D);
      const float* src = b.image_rows.data();
      for (size_t t = 0; t < b.tokens.size(); ++t)
        if (b.tokens[t] == ph) {
          std::copy(src, src + D, running.data<float>() + (row + int64_t(t)) * D);
          src += D;
        }
    }
    row += int64_t(b.tokens.size());
  }
}

Tensor InferenceModel::encode_images(const Tensor& patches, const std::vector<PatchGrid>& grids) const {
  MYRIAD_REQUIRE(vision_ != nullptr && config_.vision_config.has_value(), kValue, "model ", source_,
                 ": images given but the model has no vision tower (its config.json has no vision_config)");
  ag::NoGradGuard no_grad;
  return myriad::encode_images(*config_.vision_config, *vision_, ag::Var(patches), grids).value();
}

Tensor InferenceModel::forward(std::span<const BatchEntry> batch, bool all_logits) const {
  ag::NoGradGuard no_grad;
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  std::vector<int64_t> ids;
  for (const BatchEntry& b : batch) {
    MYRIAD_REQUIRE(b.seq != nullptr && int64_t(b.seq->kda.size()) == c.num_hidden_layers, kValue,
                   "inference: a batch entry without a sequence state of this model");
    if (b.shards) {  // a sequence-parallel prefill shard: positions from its offset in the whole prompt
      const int64_t me = b.shards->index();
      MYRIAD_REQUIRE(batch.size() == 1 && b.seq->tokens == 0 && int64_t(b.tokens.size()) == b.shards->rows(me) &&
                         b.shards->rows(me) > 0,
                     kValue, "inference: a prefill shard runs alone, on a fresh sequence, over its own ",
                     b.shards->rows(me), " tokens (got ", b.tokens.size(), " after ", b.seq->tokens, ")");
      b.seq->tokens = b.shards->offset(me);
    }
    MYRIAD_REQUIRE(b.seq->tokens + int64_t(b.tokens.size()) <= c.max_position_embeddings, kValue,
                   "inference: ", b.seq->tokens, " + ", b.tokens.size(),
                   " tokens is longer than max_position_embeddings (", c.max_position_embeddings, ")");
    for (int32_t t : b.tokens) {
      MYRIAD_REQUIRE(t >= 0 && t < c.vocab_size, kValue, "inference: token id ", t, " is outside the vocabulary [0, ",
                     c.vocab_size, ")");
      ids.push_back(t);
    }
  }
  const int64_t N = int64_t(ids.size());
  // Decode-sized batches run their weight products in skinny_matmul (OpenMP) and only small sgemm calls
  // (attention over a page); OpenBLAS's own threads would spin between those calls and take the cores from the
  // OpenMP threads, so they are kept out of decode steps.
  std::optional<ops::ScopedSerialBlas> single_blas;
  if (N <= 16) single_blas.emplace();
  Tensor running = Tensor::empty({N, D});
  if (N > 0) {
    const PhaseScope phase("embedding");
    ops::embedding_forward(w_->device(), running.data<float>(), embed_, ids.data(), N, c.vocab_size, D);
  }
  place_images(batch, running);
  Stack stack{*this, batch};
  const Tensor h = layer_stack(stack, c, running);
  for (const BatchEntry& b : batch) b.seq->tokens += int64_t(b.tokens.size());
  Tensor rows = h;
  if (!all_logits) {  // the last logit_rows rows of each entry
    int64_t out_rows = 0;
    for (const BatchEntry& b : batch) {
      MYRIAD_REQUIRE(b.logit_rows >= 1 && b.logit_rows <= int64_t(b.tokens.size()), kValue,
                     "inference: a batch entry of ", b.tokens.size(), " tokens asks for the logits of ", b.logit_rows,
                     " (1 to its tokens)");
      out_rows += b.logit_rows;
    }
    rows = Tensor::empty({out_rows, D});
    int64_t r = 0, o = 0;
    for (const BatchEntry& b : batch) {
      r += int64_t(b.tokens.size());
      std::copy(h.data<float>() + (r - b.logit_rows) * D, h.data<float>() + r * D, rows.data<float>() + o * D);
      o += b.logit_rows;
    }
  }
  const Tensor normed = rmsnorm(rows, final_norm_);
  const PhaseScope phase("lm_head");
  return lm_head_->apply(normed);
}

size_t InferenceModel::active_weight_bytes(int64_t tokens) const {
  return weight_bytes_read(tokens, /*routed_only=*/false);
}

size_t InferenceModel::routed_expert_bytes(int64_t tokens) const {
  return weight_bytes_read(tokens, /*routed_only=*/true);
}

size_t InferenceModel::weight_bytes_read(int64_t tokens, bool routed_only) const {
  const double E = double(config_.num_experts), k = double(config_.num_experts_per_token);
  const double routed_fraction = 1.0 - std::pow(1.0 - k / E, double(std::max<int64_t>(tokens, 1)));
  double b = 0;
  for (const ParamSpec& spec : model_param_specs(config_)) {
    const bool routed = spec.component == Component::kRoutedExperts;
    if (routed_only && !routed) continue;
    if (!w_->contains(spec.name) && spec.component != Component::kEmbeddings) continue;  // another rank's expert
    if (spec.component == Component::kEmbeddings) {
      b += double(std::max<int64_t>(tokens, 1) * config_.hidden_size) * sizeof(float);  // a row per token
      continue;
    }
    const size_t bytes = spec.shape.size() == 2 ? w_->linear(spec.name).bytes() : w_->tensor(spec.name).nbytes();
    b += routed ? double(bytes) * routed_fraction : double(bytes);
  }
  return size_t(b);
}

}  // namespace myriad

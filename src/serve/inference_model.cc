#include "serve/inference_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "autograd/functions.h"
#include "core/threads.h"
#include "io/checkpoint.h"
#include "model/param_spec.h"
#include "ops/cpu/parallel.h"
#include "ops/kernels.h"
#include "train/run_checkpoint.h"

namespace myriad {

namespace fs = std::filesystem;
using ag::Var;

namespace {

std::string layer_prefix(int64_t l) {
  return "model.layers." + std::to_string(l) + ".";
}

Var constant(const Tensor& t) {
  return Var(t, false);
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

InferenceModel::InferenceModel(ModelConfig config, std::shared_ptr<const DecodeWeights> weights, Tokenizer tokenizer)
    : config_(std::move(config)), w_(std::move(weights)), tokenizer_(std::move(tokenizer)) {
  const int64_t Lc = config_.num_hidden_layers;
  kda_.resize(size_t(Lc));
  mla_.resize(size_t(Lc));
  experts_.resize(size_t(Lc));
  for (int64_t l = 0; l < Lc; ++l) {
    if (config_.is_moe_layer(l))
      for (int64_t e = 0; e < config_.num_experts; ++e)
        for (const char* w : {"w1", "w3", "w2"})
          experts_[size_t(l)].push_back(
              &lin(layer_prefix(l) + "block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight"));
    if (config_.mixer(l) == Mixer::kKda)
      kda_[size_t(l)] = std::make_unique<KdaDecoder>(config_, w_, l);
    else
      mla_[size_t(l)] = std::make_unique<MlaDecoder>(config_, w_, l);
  }
}

std::shared_ptr<InferenceModel> InferenceModel::load(const std::string& dir_in) {
  std::string dir = dir_in;
  MYRIAD_REQUIRE(fs::is_directory(dir), kIo, "model: ", dir, " is not a directory");
  if (!fs::exists(fs::path(dir) / "model.safetensors") && !fs::exists(fs::path(dir) / "model.safetensors.index.json"))
    dir = latest_checkpoint(dir_in);
  ModelConfig mc = load_model_config(dir, nullptr);
  const Checkpoint ck = Checkpoint::open(dir);
  auto m = std::make_shared<InferenceModel>(mc, DecodeWeights::from_checkpoint(ck, mc));
  const fs::path tok =
      fs::exists(fs::path(dir) / "tokenizer") ? fs::path(dir) / "tokenizer" : fs::path(dir_in) / "tokenizer";
  m->tokenizer_ = Tokenizer::load(tok.string());
  MYRIAD_REQUIRE(m->tokenizer_.vocab_size() <= mc.vocab_size, kFormat, "model: the tokenizer in ", tok.string(),
                 " has ", m->tokenizer_.vocab_size(), " tokens, more than the model's vocab_size ", mc.vocab_size);
  m->source_ = dir;
  return m;
}

SequenceState InferenceModel::new_sequence(int64_t page_tokens) const {
  SequenceState s;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    s.kda.push_back(kda_[size_t(l)] ? kda_[size_t(l)]->make_state() : KdaState{});
    s.mla.push_back(MlaCache(config_.kv_lora_rank, config_.qk_rope_head_dim, page_tokens));
  }
  return s;
}

Tensor InferenceModel::rmsnorm(const Tensor& x, const std::string& weight) const {
  return ag::rmsnorm(constant(x), constant(w_->tensor(weight)), float(config_.rms_norm_eps)).value();
}

void InferenceModel::glu_rows(float* g, const float* u, int64_t rows, int64_t F) const {
  if (config_.hidden_act == "silu") {
    for (int64_t i = 0; i < rows * F; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    return;
  }
  cpu::situ_glu_forward(g, F, g, F, u, F, rows, F,
                        SituParams{float(config_.activation_situ_beta), float(config_.activation_situ_linear_beta)});
}

Tensor InferenceModel::attn_res_read(const std::string& norm, const std::string& proj,
                                     const std::vector<Tensor>& cands) const {
  std::vector<Var> scores;
  for (const Tensor& v : cands) scores.push_back(constant(lin(proj).apply(rmsnorm(v, norm))));  // [N, 1]
  const Tensor prob = ag::softmax(ag::concat_last(scores)).value().contiguous();                // [N, C]
  const int64_t N = cands[0].size(0), D = cands[0].size(1), C = int64_t(cands.size());
  Tensor read = Tensor::zeros({N, D});
  float* r = read.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    const Tensor v = cands[size_t(c)].contiguous();
    const float* vp = v.data<float>();
    for (int64_t t = 0; t < N; ++t) cpu::axpy(r + t * D, vp + t * D, prob.data<float>()[t * C + c], D);
  }
  return read;
}

Tensor InferenceModel::ffn(int64_t l, const Tensor& x) const {
  if (config_.is_moe_layer(l)) return moe(l, x);
  return glu_ffn(layer_prefix(l) + "mlp.", x);
}

// down(glu(gate x, up x)): the dense FFN or a shared expert under `prefix`.
Tensor InferenceModel::glu_ffn(const std::string& prefix, const Tensor& x) const {
  Tensor g = lin(prefix + "gate_proj.weight").apply(x);
  const Tensor u = lin(prefix + "up_proj.weight").apply(x);
  glu_rows(g.data<float>(), u.data<float>(), g.size(0), g.size(1));
  return lin(prefix + "down_proj.weight").apply(g);
}

// Latent MoE as Transformer::moe_ffn (no capacity limit): sigmoid/softmax router in f32, top-k of s + b,
// renormalised weights times the scaling factor, copies grouped by expert, experts in the latent width.
Tensor InferenceModel::moe(int64_t l, const Tensor& x) const {
  const ModelConfig& c = config_;
  const std::string m = layer_prefix(l) + "block_sparse_moe.";
  const int64_t N = x.size(0), E = c.num_experts, k = c.num_experts_per_token;
  const Var logits = constant(lin(m + "gate.weight").apply(x));
  const Var s = c.moe_router_activation_func == "softmax" ? ag::softmax(logits) : ag::sigmoid(logits);
  Tensor biased = s.value().clone();
  if (c.topk_method == "noaux_tc") {
    const float* b = w_->tensor(m + "gate.e_score_correction_bias").data<float>();
    float* bs = biased.data<float>();
    for (int64_t t = 0; t < N; ++t)
      for (int64_t e = 0; e < E; ++e) bs[t * E + e] += b[e];
  }
  Tensor idx = Tensor::empty({N, k}, DType::kI32), top = Tensor::empty({N, k});
  cpu::topk(idx.data<int32_t>(), top.data<float>(), biased.data<float>(), N, E, k);
  const Tensor weights =
      ag::route_weights(s, idx, float(c.routed_scaling_factor), c.moe_renormalize).value().contiguous();  // [N, k]
  const bool latent = c.routed_expert_hidden_size.has_value();
  const Tensor z = latent ? lin(m + "routed_expert_down_proj.weight").apply(x) : x.contiguous();  // [N, L]
  const int64_t L = z.size(1);
  // copies grouped by expert (counting sort, stable in token order)
  const int32_t* id = idx.data<int32_t>();
  std::vector<int64_t> start(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < N * k; ++i) ++start[size_t(id[i]) + 1];
  for (int64_t e = 0; e < E; ++e) start[size_t(e + 1)] += start[size_t(e)];
  std::vector<int32_t> copy_token(static_cast<size_t>(N * k)), copy_slot(static_cast<size_t>(N * k));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < N * k; ++i) {
      const int64_t pos = fill[size_t(id[i])]++;
      copy_token[size_t(pos)] = int32_t(i / k);
      copy_slot[size_t(pos)] = int32_t(i);
    }
  }
  Tensor u = Tensor::zeros({N, L});
  // The experts that received copies. Decode-sized batches give each a handful of rows: too little work to
  // split one expert's products over threads, so the experts themselves are spread over the threads (each
  // computing into its own buffer; the weighted scatter into u stays sequential, as copies of one token go to
  // different experts). Larger batches run the experts in turn, each product threaded inside.
  std::vector<int64_t> active;
  for (int64_t e = 0; e < E; ++e)
    if (start[size_t(e + 1)] > start[size_t(e)]) active.push_back(e);
  // Expert outputs [N k, L] in copy order: expert e writes rows start[e] .. start[e+1].
  Tensor outs = Tensor::empty({N * k, L});
  const int64_t F = c.moe_intermediate_size;
  const std::vector<const LinearWeight*>& ew = experts_[size_t(l)];
  auto run_expert = [&](size_t a) {
    const int64_t e = active[a], b0 = start[size_t(e)], n = start[size_t(e + 1)] - b0;
    // Per-thread buffers: ze [n, L], g and up [n, F].
    thread_local std::vector<float> ze, g, up;
    if (ze.size() < size_t(n * L)) ze.resize(size_t(n * L));
    if (g.size() < size_t(n * F)) g.resize(size_t(n * F)), up.resize(size_t(n * F));
    cpu::gather_rows(ze.data(), z.data<float>(), copy_token.data() + b0, n, N, L);
    ew[size_t(3 * e)]->apply(ze.data(), n, g.data());                        // w1 (gate)
    ew[size_t(3 * e + 1)]->apply(ze.data(), n, up.data());                   // w3 (up)
    glu_rows(g.data(), up.data(), n, F);                                     // in place into g
    ew[size_t(3 * e + 2)]->apply(g.data(), n, outs.data<float>() + b0 * L);  // w2 (down)
  };
  if (N * k <= 64 && active.size() > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
    for (size_t a = 0; a < active.size(); ++a) run_expert(a);
  } else {
    for (size_t a = 0; a < active.size(); ++a) run_expert(a);
  }
  for (size_t a = 0; a < active.size(); ++a) {
    const int64_t e = active[a], b0 = start[size_t(e)], n = start[size_t(e + 1)] - b0;
    std::vector<float> wsel(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) wsel[size_t(i)] = weights.data<float>()[copy_slot[size_t(b0 + i)]];
    cpu::scatter_add_rows(u.data<float>(), outs.data<float>() + b0 * L, copy_token.data() + b0, wsel.data(), n, N, L);
  }
  Tensor y = u;
  if (latent) {
    if (c.latent_moe_use_norm) u = rmsnorm(u, m + "routed_expert_norm.weight");
    y = lin(m + "routed_expert_up_proj.weight").apply(u);
  }
  if (c.num_shared_experts > 0) {
    const Tensor ys = glu_ffn(m + "shared_experts.", x);
    cpu::axpy(y.data<float>(), ys.data<float>(), 1.0f, y.numel());
  }
  return y;
}

Tensor InferenceModel::forward(std::span<const BatchEntry> batch, bool all_logits) const {
  ag::NoGradGuard no_grad;
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size;
  std::vector<int64_t> ids;
  for (const BatchEntry& b : batch) {
    MYRIAD_REQUIRE(b.seq != nullptr && int64_t(b.seq->kda.size()) == c.num_hidden_layers, kValue,
                   "inference: a batch entry without a sequence state of this model");
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
  std::optional<cpu::BlasSingleThread> single_blas;
  if (N <= 16) single_blas.emplace();
  Tensor running = Tensor::empty({N, D});
  if (N > 0) {
    cpu::embedding_forward(running.data<float>(), w_->tensor("model.embed_tokens.weight").data<float>(), ids.data(), N,
                           c.vocab_size, D);
  }
  const bool block = c.attn_res_mode == AttnResMode::kBlock, skip = c.attn_res_mode == AttnResMode::kSkip;
  std::vector<Tensor> sealed;
  Tensor skip_buffer;
  auto add = [](const Tensor& a, const Tensor& b) {
    Tensor r = a.clone();
    cpu::axpy(r.data<float>(), b.contiguous().data<float>(), 1.0f, r.numel());
    return r;
  };
  auto mixer = [&](int64_t l, const Tensor& h) {
    const Tensor n = rmsnorm(h, layer_prefix(l) + "input_layernorm.weight");
    if (kda_[size_t(l)]) {
      std::vector<KdaSegment> segs;
      for (const BatchEntry& b : batch) segs.push_back({&b.seq->kda[size_t(l)], int64_t(b.tokens.size())});
      return kda_[size_t(l)]->forward(n, segs, kda_chunk);
    }
    std::vector<MlaSegment> segs;
    for (const BatchEntry& b : batch) segs.push_back({&b.seq->mla[size_t(l)], int64_t(b.tokens.size()), b.seq->tokens});
    return mla_[size_t(l)]->forward(n, segs);
  };
  auto ffn_of = [&](int64_t l, const Tensor& h) {
    return ffn(l, rmsnorm(h, layer_prefix(l) + "post_attention_layernorm.weight"));
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = layer_prefix(l);
    if (!block) {  // as Transformer::layer_forward / forward for "none" and "skip"
      const Tensor mixed = mixer(l, running);
      const Tensor r = add(running, mixed);
      Tensor next = add(r, ffn_of(l, r));
      if (skip) {
        const int64_t B = c.attn_res_block_size;
        if (l % B == 0) skip_buffer = mixed;
        if ((l + 1) % B == 0 && skip_buffer.defined()) next = add(next, skip_buffer);
      }
      running = next;
      continue;
    }
    auto with = [](std::vector<Tensor> base, const Tensor& r) {
      base.push_back(r);
      return base;
    };
    const Tensor h = sealed.empty() ? running
                                    : attn_res_read(pre + "self_attention_res_norm.weight",
                                                    pre + "self_attention_res_proj.weight", with(sealed, running));
    const Tensor mixed = mixer(l, h);
    Tensor run2;
    if (l % c.attn_res_block_size == 0) {
      sealed.push_back(running);
      run2 = mixed;
    } else {
      run2 = add(running, mixed);
    }
    const Tensor hf = attn_res_read(pre + "mlp_res_norm.weight", pre + "mlp_res_proj.weight", with(sealed, run2));
    running = add(run2, ffn_of(l, hf));
  }
  for (const BatchEntry& b : batch) b.seq->tokens += int64_t(b.tokens.size());
  Tensor h = running;
  if (block) {
    std::vector<Tensor> cands = sealed;
    cands.push_back(running);
    h = attn_res_read("model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight", cands);
  }
  Tensor rows = h;
  if (!all_logits) {  // the last row of each entry
    rows = Tensor::empty({int64_t(batch.size()), D});
    int64_t r = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      r += int64_t(batch[i].tokens.size());
      MYRIAD_REQUIRE(!batch[i].tokens.empty(), kValue, "inference: a batch entry with no tokens has no last logits");
      std::copy(h.data<float>() + (r - 1) * D, h.data<float>() + r * D, rows.data<float>() + int64_t(i) * D);
    }
  }
  const Tensor normed = rmsnorm(rows, "model.norm.weight");
  return lin(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").apply(normed);
}

size_t InferenceModel::active_weight_bytes() const {
  size_t b = 0;
  for (const ParamSpec& spec : model_param_specs(config_)) {
    if (spec.component == Component::kEmbeddings) {
      b += size_t(config_.hidden_size) * sizeof(float);  // one row is read
      continue;
    }
    const size_t bytes = spec.shape.size() == 2 ? w_->linear(spec.name).bytes() : w_->tensor(spec.name).nbytes();
    if (spec.component == Component::kRoutedExperts)
      b += bytes * size_t(config_.num_experts_per_token) / size_t(config_.num_experts);
    else
      b += bytes;
  }
  return b;
}

}  // namespace myriad

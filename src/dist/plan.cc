#include "dist/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/accounting.h"

namespace myriad {

GpuSpec gpu_spec(const std::string& name) {
  // Dense bf16 tensor-core peaks and link speeds as the vendors state them (per accelerator, per direction):
  // NVLink 4 (H100/H200) 450 GB/s, NVLink 5 (B200) 900 GB/s; one 400 Gb/s NIC per accelerator (50 GB/s).
  if (name == "h200") return {"h200", 141e9, 989e12, 450e9, 50e9, 8};
  if (name == "h100") return {"h100", 80e9, 989e12, 450e9, 50e9, 8};
  if (name == "b200") return {"b200", 192e9, 2250e12, 900e9, 50e9, 8};
  if (name == "cpu") return {"cpu", 0, 0, 0, 0, 1};
  throw_error(ErrorKind::kConfig, "--gpu ", name, ": unknown accelerator (known: h200, h100, b200, cpu; override its ",
              "figures with --mem-gb, --peak-tflops, --intra-gbs, --inter-gbs, --per-node)");
}

namespace {

struct Sizes {
  ModelAccounting acc;
  double dense = 0, experts = 0;  // parameters
  double layer_dense_max = 0;     // the largest layer's non-routed parameters (mixer + FFN without experts)
  double head = 0;                // lm_head (gathered like a layer)
  double act_kda = 0, act_mla = 0, act_moe = 0, act_dense = 0;  // elements per token per layer
  int64_t kda_layers = 0, mla_layers = 0, moe_layers = 0, dense_layers = 0, blocks = 0;
  double kda_map = 0;     // one KDA layer's chunk-state affine map per rank: H K (K + V)
  double mla_latent = 0;  // Ckv + Dr per token per MLA layer
};

Sizes sizes_of(const ModelConfig& c) {
  Sizes s;
  s.acc = account_model(c);
  const ModelAccounting& a = s.acc;
  s.experts = double(a.components[size_t(Component::kRoutedExperts)].params);
  s.dense = double(a.total_params) - s.experts;
  s.head = double(a.components[size_t(Component::kHead)].params);
  const double moe_non_routed = double(a.moe_ffn.params) - double(c.num_experts) * double(a.expert_params);
  s.layer_dense_max = double(std::max(a.kda_mixer.params, a.mla_mixer.params)) +
                      std::max(moe_non_routed, double(a.dense_ffn.params)) + double(a.layer_extras.params);
  s.kda_layers = c.num_kda_layers();
  s.mla_layers = c.num_mla_layers();
  s.moe_layers = c.num_moe_layers();
  s.dense_layers = c.num_hidden_layers - s.moe_layers;
  const double D = double(c.hidden_size);
  if (c.linear_attn_config) {
    const double HK = double(c.linear_attn_config->num_heads * c.linear_attn_config->head_dim);
    s.act_kda = D + 10 * HK;
    s.kda_map = HK * 2 * double(c.linear_attn_config->head_dim);
  }
  const double H = double(c.num_attention_heads), Dn = double(c.qk_nope_head_dim), Dr = double(c.qk_rope_head_dim),
               Dv = double(c.v_head_dim);
  s.act_mla = D + double(c.q_lora_rank.value_or(0)) + double(c.kv_lora_rank) + Dr + H * (2 * (Dn + Dr) + 3 * Dv);
  s.mla_latent = double(c.kv_lora_rank) + Dr;
  const double L = double(c.expert_width()), F = double(c.moe_intermediate_size), k = double(c.num_experts_per_token);
  s.act_moe = D + double(c.num_experts) + 2 * L + k * (2 * L + 3 * F) + 3 * F * double(c.num_shared_experts);
  s.act_dense = D + 3 * double(c.intermediate_size);
  s.blocks = c.attn_res_mode == AttnResMode::kNone
                 ? 0
                 : (c.num_hidden_layers + c.attn_res_block_size - 1) / std::max<int64_t>(1, c.attn_res_block_size);
  return s;
}

double bytes_per_activation(PlanRecipe r) {
  return r == PlanRecipe::kBf16Sharded ? 2.0 : 4.0;
}

PlanMemory memory_of(const ModelConfig& c, const Sizes& s, const PlanRequest& q, const ParallelDims& d) {
  PlanMemory m;
  const double N = double(q.gpus), ep = double(d.ep), sp = double(d.sp);
  const double buffers = double(s.acc.buffer_params);  // the router biases: dense, no gradient, no Adam state
  if (q.recipe == PlanRecipe::kBf16Sharded) {
    const double shard = (s.dense + s.experts) / N;  // dense over N, an ep slice over its N / ep replicas
    m.weights = 2 * shard;
    m.gradients = 4 * (shard - buffers / N);
    m.optimizer = 12 * (shard - buffers / N);
    const double layer = s.layer_dense_max + double(c.num_experts) / ep * double(s.acc.expert_params);
    m.gathered = 2 * 2 * std::max(layer, s.head);  // this layer's and the next's (prefetch), bf16
  } else {
    const double held = s.dense + s.experts / ep;
    m.weights = 4 * held;
    m.gradients = 4 * (held - buffers);
    m.optimizer = 8 * (held - buffers);
  }
  const double b = bytes_per_activation(q.recipe), t = double(q.seq_len) / sp, D = double(c.hidden_size);
  const double per_token_layers = double(s.kda_layers) * s.act_kda + double(s.mla_layers) * s.act_mla +
                                  double(s.moe_layers) * s.act_moe + double(s.dense_layers) * s.act_dense;
  const double largest = std::max({s.act_kda, s.act_mla}) + std::max(s.act_moe, s.act_dense);
  const double blocks = double(s.blocks) * D;
  m.activations_full = t * b * (per_token_layers + blocks);
  m.activations_checkpointed = t * b * (double(c.num_hidden_layers) * D + blocks + largest);
  m.kda_states = b * double(s.acc.kda_state_elems_per_sequence) + (sp > 1 ? b * sp * s.kda_map : 0.0);
  m.mla_latents = sp > 1 && s.mla_layers > 0 ? 2 * b * double(q.seq_len) * s.mla_latent : 0.0;
  return m;
}

// Bandwidth of a group of `span` consecutive ranks (its members spread over them).
double link_bw(const PlanRequest& q, int64_t span) {
  return span <= q.gpu.per_node ? q.gpu.intra_node_bw : q.gpu.inter_node_bw;
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

}  // namespace

PlanMemory plan_memory(const ModelConfig& config, const PlanRequest& request, const ParallelDims& dims) {
  return memory_of(config, sizes_of(config), request, dims);
}

Plan make_plan(const ModelConfig& c, const PlanRequest& q_in) {
  PlanRequest q = q_in;
  MYRIAD_REQUIRE(q.gpus >= 1, kConfig, "--gpus ", q.gpus, ": must be at least 1");
  MYRIAD_REQUIRE(q.seq_len >= 1 && q.seq_len <= c.max_position_embeddings, kConfig, "--seq ", q.seq_len,
                 ": must be in [1, ", c.max_position_embeddings, "] (the config's max_position_embeddings)");
  MYRIAD_REQUIRE(q.gpu.memory_bytes > 0 && q.gpu.peak_flops > 0 && q.gpu.intra_node_bw > 0 && q.gpu.inter_node_bw > 0 &&
                     q.gpu.per_node >= 1,
                 kConfig, "--gpu ", q.gpu.name,
                 ": memory, peak and bandwidths must all be positive (give --mem-gb, --peak-tflops, --intra-gbs, "
                 "--inter-gbs)");
  MYRIAD_REQUIRE(q.mfu > 0 && q.mfu <= 1, kConfig, "--mfu ", q.mfu, ": must be in (0, 1]");
  const Sizes s = sizes_of(c);
  Plan p;
  p.total_params = s.acc.total_params;
  p.active_params = s.acc.active_params;
  p.dense_params = int64_t(s.dense);
  p.expert_params = int64_t(s.experts);
  p.flops_per_token = training_flops_per_token(c, s.acc, q.seq_len).total();
  if (q.tokens_per_step <= 0) q.tokens_per_step = std::max<int64_t>(int64_t(1) << 24, q.seq_len);
  MYRIAD_REQUIRE(q.tokens_per_step % q.seq_len == 0, kConfig, "--batch-tokens ", q.tokens_per_step,
                 " is not a whole number of ", q.seq_len, "-token sequences");
  p.request = q;
  p.tokens_per_step = q.tokens_per_step;
  const int64_t seqs = q.tokens_per_step / q.seq_len;
  const double usable = q.memory_headroom * q.gpu.memory_bytes;
  p.min_gpus_for_state = (q.recipe == PlanRecipe::kBf16Sharded ? 18.0 : 16.0) * double(p.total_params) / usable;

  std::vector<ParallelDims> candidates;
  if (q.forced) {
    candidates.push_back(*q.forced);
  } else {
    for (int ep = 1; ep <= q.gpus; ++ep) {
      if (q.gpus % ep || (ep > 1 && (c.num_experts == 0 || c.num_experts % ep))) continue;
      for (int sp = 1; sp <= q.gpus / ep; ++sp)
        if ((q.gpus / ep) % sp == 0) candidates.push_back({q.gpus / ep / sp, ep, sp});
    }
  }
  const double b = bytes_per_activation(q.recipe);
  for (const ParallelDims& d : candidates) {
    PlanLayout l;
    l.dims = d;
    const int64_t data_ranks = int64_t(d.dp) * d.ep;
    if (d.world() != q.gpus) continue;
    if (q.seq_len % d.sp || seqs % data_ranks) {
      if (!q.forced) continue;
      l.why = q.seq_len % d.sp
                  ? "sp " + std::to_string(d.sp) + " does not divide the sequence"
                  : std::to_string(seqs) +
                        " sequences per step do not split over dp x ep = " + std::to_string(data_ranks) + " data ranks";
      p.layouts.push_back(l);
      continue;
    }
    l.micro_batches = seqs / data_ranks;
    l.tokens_per_rank = q.seq_len / d.sp;
    l.memory = memory_of(c, s, q, d);
    const double full = l.memory.total(false), ckpt = l.memory.total(true);
    l.fits = full <= usable || ckpt <= usable;
    l.checkpointing = full > usable;
    // Communication per step.
    const double N = double(q.gpus), ep = double(d.ep), sp = double(d.sp), mb = double(l.micro_batches);
    const double t = double(l.tokens_per_rank);
    if (q.recipe == PlanRecipe::kBf16Sharded) {
      const double dense = 8 * s.dense * (N - 1) / N;  // gathers 2 x 2 B, reduce-scatter 4 B
      const double R_e = N / ep;
      const double experts = R_e > 1 ? 8 * s.experts / ep * (R_e - 1) / R_e : 0.0;
      l.comm.fsdp = mb * (dense + experts);
    } else {  // one all-reduce of f32 gradients per step: dense over the world, experts over dp
      l.comm.fsdp = 2 * 4 * s.dense * (N - 1) / N + (d.dp > 1 ? 2 * 4 * s.experts / ep * (d.dp - 1) / d.dp : 0.0);
    }
    const double a2a_passes = l.checkpointing ? 6.0 : 4.0;  // dispatch + combine, forward (again) and backward
    l.comm.all_to_all = ep > 1 ? mb * double(s.moe_layers) * a2a_passes * t * double(c.num_experts_per_token) *
                                     double(c.expert_width()) * b * (ep - 1) / ep
                               : 0.0;
    l.comm.sp_gather = sp > 1 ? mb * 2 *
                                    (double(s.kda_layers) * (sp - 1) * s.kda_map * b +
                                     double(s.mla_layers) * (sp - 1) * t * s.mla_latent * b)
                              : 0.0;
    l.comm.fsdp_s = l.comm.fsdp / link_bw(q, q.gpus);
    l.comm.all_to_all_s = l.comm.all_to_all / link_bw(q, int64_t(d.ep) * d.sp);
    l.comm.sp_gather_s = l.comm.sp_gather / link_bw(q, d.sp);
    l.compute_s = p.flops_per_token * double(q.tokens_per_step) / N / (q.gpu.peak_flops * q.mfu) *
                  (l.checkpointing ? 4.0 / 3.0 : 1.0);
    l.step_s_serial = l.compute_s + l.comm.seconds();
    l.step_s_overlap = std::max(l.compute_s, l.comm.seconds());
    if (!l.fits) {
      l.why = "needs " + gb(ckpt) + " with activation checkpointing, over the " + gb(usable) + " usable";
    } else {
      const double comm = l.comm.seconds();
      const char* limit = l.compute_s >= comm ? "compute"
                          : l.comm.all_to_all_s >= l.comm.fsdp_s && l.comm.all_to_all_s >= l.comm.sp_gather_s
                              ? "the expert all-to-all"
                          : l.comm.fsdp_s >= l.comm.sp_gather_s ? "the weight gathers / gradient reductions"
                                                                : "the sequence-parallel gathers";
      l.why = "fits in " + gb(l.checkpointing ? ckpt : full) + (l.checkpointing ? " with" : " without") +
              " activation checkpointing; bound by " + limit;
    }
    p.layouts.push_back(l);
  }
  std::stable_sort(p.layouts.begin(), p.layouts.end(), [](const PlanLayout& a, const PlanLayout& b2) {
    if (a.fits != b2.fits) return a.fits;
    if (a.fits)  // then the less communication (overlap is never perfect)
      return a.step_s_overlap != b2.step_s_overlap ? a.step_s_overlap < b2.step_s_overlap
                                                   : a.step_s_serial < b2.step_s_serial;
    return a.memory.total(true) < b2.memory.total(true);
  });
  if (!p.layouts.empty() && p.layouts[0].fits) p.chosen = 0;
  return p;
}

}  // namespace myriad

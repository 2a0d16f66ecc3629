// The parallel planner behind `myriad plan` (issue 16): for a model config, a number of accelerators and their
// speeds, the memory one accelerator needs under each dp x ep x sp layout, the communication of a step, a
// step-time estimate, and the layout it picks (the fastest that fits) with the reasons. Every parameter count
// comes from model/accounting.h (the checkpoint's tensors), every FLOP from training_flops_per_token.
//
// Recipes (what a parameter costs, and how it is spread):
//   kBf16Sharded  the flagship recipe: bf16 weights (2 B), fp32 gradients (4 B), fp32 master weights, Adam m and v
//                 (12 B): 18 B per parameter, every tensor fully sharded over the ranks that replicate it (dense
//                 tensors over all N ranks, an ep slice of the experts over its N / ep replicas), each layer's
//                 weights all-gathered for its forward and again for its backward and its gradients
//                 reduce-scattered (FSDP / ZeRO-3); activations in bf16.
//   kMyriadCpu    what src/train does today: f32 weights, gradients, Adam m and v (16 B per parameter), dense
//                 tensors replicated, routed experts split over ep; activations in f32. The cross-check against a
//                 measured run uses this one.
//
// Activations (per token, what the backward keeps; elementwise temporaries and flash-attention's statistics are
// not counted, so this is a floor): KDA  D + 10 H K (the normed input, q k v g, the conv inputs, o, the gate);
// MLA  D + q_lora + Ckv + Dr + H (2 (Dn + Dr) + 3 Dv); MoE  D + E + 2 L + k (2 L + 3 F) + 3 F_shared x shared;
// dense FFN D + 3 F. With checkpointing a layer keeps only its input (D), plus one layer's full set while it is
// recomputed; AttnRes's block summaries (ceil(layers / B) x D per token) are kept either way.
//
// Communication per step and rank (bytes leaving the rank): FSDP gathers 2 x (bf16 weights) and reduce-scatters
// the fp32 gradients of each micro-batch, x (R - 1) / R over R replicas; the expert all-to-all moves each token
// copy's latent (bf16) there and back, forward and backward: 4 t k L x 2 B per MoE layer x (ep - 1) / ep;
// sequence parallelism all-gathers the KDA chunk-state maps (H K (K + V) per layer and rank: M and S~) and MLA's
// compressed latents of the sequence (T (Ckv + Dr) per MLA layer), forward and backward. A group that fits in
// one node moves at the intra-node bandwidth, else at the inter-node one. The step-time estimate: compute at
// `mfu` of the peak, communication at the link bandwidths, shown without overlap and with perfect overlap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/parallel_dims.h"
#include "model/config.h"

namespace myriad {

struct GpuSpec {
  std::string name;
  double memory_bytes = 0;   // per accelerator
  double peak_flops = 0;     // dense bf16 (or f32 for a CPU), per accelerator
  double intra_node_bw = 0;  // bytes/s per accelerator per direction (NVLink)
  double inter_node_bw = 0;  // bytes/s per accelerator per direction (InfiniBand / RoCE)
  int per_node = 8;
};

// "h200", "h100", "b200" (the vendors' dense bf16 figures and link speeds), or "cpu" (this machine's kind of
// node: peak and bandwidths must come from flags). One kConfig error naming the known ones otherwise.
GpuSpec gpu_spec(const std::string& name);

enum class PlanRecipe { kBf16Sharded, kMyriadCpu };

struct PlanRequest {
  int gpus = 1;
  GpuSpec gpu;
  int64_t seq_len = 8192;       // T
  int64_t tokens_per_step = 0;  // global batch; 0: 2^24 (16M) or one sequence per data rank if larger
  double mfu = 0.4;             // achievable fraction of peak_flops
  PlanRecipe recipe = PlanRecipe::kBf16Sharded;
  double memory_headroom = 0.9;        // a layout fits when it needs at most this fraction of the memory
  std::optional<ParallelDims> forced;  // evaluate this layout only
};

struct PlanMemory {  // bytes per accelerator
  double weights = 0, gradients = 0, optimizer = 0;
  double gathered = 0;  // FSDP working set: two layers' weights gathered (bf16 recipe)
  double activations_checkpointed = 0, activations_full = 0;
  double kda_states = 0, mla_latents = 0;  // per micro-batch: KDA states of its sequences, MLA latents gathered (sp)
  double total(bool checkpointing) const {
    return weights + gradients + optimizer + gathered + (checkpointing ? activations_checkpointed : activations_full) +
           kda_states + mla_latents;
  }
};

struct PlanComm {  // bytes per rank per step
  double fsdp = 0, all_to_all = 0, sp_gather = 0;
  double fsdp_s = 0, all_to_all_s = 0, sp_gather_s = 0;  // at the link the group uses
  double seconds() const { return fsdp_s + all_to_all_s + sp_gather_s; }
};

struct PlanLayout {
  ParallelDims dims;
  int64_t micro_batches = 0;    // sequences per data rank per step
  int64_t tokens_per_rank = 0;  // per micro-batch: T / sp
  PlanMemory memory;
  PlanComm comm;
  bool checkpointing = false;  // needed to fit
  bool fits = false;
  double compute_s = 0;
  double step_s_serial = 0, step_s_overlap = 0;
  std::string why;  // a sentence: why it fits or not, what limits it
};

struct Plan {
  PlanRequest request;
  int64_t total_params = 0, active_params = 0, dense_params = 0, expert_params = 0;
  double flops_per_token = 0;
  int64_t tokens_per_step = 0;
  std::vector<PlanLayout> layouts;  // every valid layout, fastest fitting first, then the others by memory
  int chosen = -1;                  // index into layouts, -1 when none fits
  double min_gpus_for_state = 0;    // the weights + gradients + optimizer floor over the memory (bf16 recipe)
};

Plan make_plan(const ModelConfig& config, const PlanRequest& request);

// The layout's memory on one accelerator (public for the cross-check against a measured run).
PlanMemory plan_memory(const ModelConfig& config, const PlanRequest& request, const ParallelDims& dims);

}  // namespace myriad

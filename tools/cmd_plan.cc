// `myriad plan --config F --gpus N --gpu h200 [--seq T] ...`: argument parsing and printing; the planner is
// src/dist/plan.h (its formulas are stated there).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "dist/plan.h"
#include "model/config.h"

namespace {

using myriad::Plan;
using myriad::PlanLayout;

std::string gb(double bytes) {
  char buf[32];
  if (bytes >= 1e9 || bytes == 0)
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f KB", bytes / 1e3);
  return buf;
}

std::string human(double v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%s", v, units[u]);
  return buf;
}

nlohmann::ordered_json layout_json(const PlanLayout& l) {
  const auto& m = l.memory;
  return {{"dp", l.dims.dp},
          {"ep", l.dims.ep},
          {"sp", l.dims.sp},
          {"fits", l.fits},
          {"checkpointing", l.checkpointing},
          {"micro_batches", l.micro_batches},
          {"memory_bytes",
           {{"weights", m.weights},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"gathered", m.gathered},
            {"activations_checkpointed", m.activations_checkpointed},
            {"activations_full", m.activations_full},
            {"kda_states", m.kda_states},
            {"mla_latents", m.mla_latents},
            {"total", m.total(l.checkpointing)}}},
          {"comm_bytes", {{"fsdp", l.comm.fsdp}, {"all_to_all", l.comm.all_to_all}, {"sp_gather", l.comm.sp_gather}}},
          {"comm_s", {{"fsdp", l.comm.fsdp_s}, {"all_to_all", l.comm.all_to_all_s}, {"sp_gather", l.comm.sp_gather_s}}},
          {"compute_s", l.compute_s},
          {"step_s_serial", l.step_s_serial},
          {"step_s_overlap", l.step_s_overlap},
          {"why", l.why}};
}

int run_plan(const myriad::cli::Args& args) {
  using namespace myriad;
  const std::string config_path = args.get_or("config", "");
  MYRIAD_REQUIRE(!config_path.empty(), kValue, "plan needs --config FILE (e.g. configs/kimi-k3.json)");
  const ModelConfig c = load_model_config(config_path, nullptr);
  PlanRequest q;
  q.gpus = int(args.get_int("gpus", 0, 1, 1 << 24));
  MYRIAD_REQUIRE(args.has("gpus"), kValue, "plan needs --gpus N");
  q.gpu = gpu_spec(args.get_or("gpu", "h200"));
  q.gpu.memory_bytes = args.get_double("mem-gb", q.gpu.memory_bytes / 1e9, 0, 1e30, /*open_min=*/true) * 1e9;
  q.gpu.peak_flops = args.get_double("peak-tflops", q.gpu.peak_flops / 1e12, 0, 1e30, /*open_min=*/true) * 1e12;
  q.gpu.intra_node_bw = args.get_double("intra-gbs", q.gpu.intra_node_bw / 1e9, 0, 1e30, /*open_min=*/true) * 1e9;
  q.gpu.inter_node_bw = args.get_double("inter-gbs", q.gpu.inter_node_bw / 1e9, 0, 1e30, /*open_min=*/true) * 1e9;
  q.gpu.per_node = int(args.get_int("per-node", q.gpu.per_node, 1, 1 << 20));
  q.seq_len = args.get_int("seq", std::min<int64_t>(8192, c.max_position_embeddings), 1, 1L << 40);
  q.tokens_per_step = args.get_int("batch-tokens", 0, 1, 1L << 50);
  q.mfu = args.get_double("mfu", 0.4, 0, 1, /*open_min=*/true);
  const std::string recipe = args.get_or("recipe", "bf16");
  MYRIAD_REQUIRE(recipe == "bf16" || recipe == "myriad-cpu", kValue, "--recipe ", recipe,
                 ": expected bf16 (the flagship recipe) or myriad-cpu (what myriad train does today)");
  q.recipe = recipe == "bf16" ? PlanRecipe::kBf16Sharded : PlanRecipe::kMyriadCpu;
  if (args.has("dp") || args.has("ep") || args.has("sp"))
    q.forced = ParallelDims{int(args.get_int("dp", 1, 1, 1 << 24)), int(args.get_int("ep", 1, 1, 1 << 24)),
                            int(args.get_int("sp", 1, 1, 1 << 24))};
  if (q.forced)
    MYRIAD_REQUIRE(q.forced->world() == q.gpus, kConfig, "--dp ", q.forced->dp, " x --ep ", q.forced->ep, " x --sp ",
                   q.forced->sp, " = ", q.forced->world(), ", not --gpus ", q.gpus);
  const Plan p = make_plan(c, q);

  if (args.has("json")) {
    nlohmann::ordered_json j;
    j["config"] = config_path;
    j["gpus"] = q.gpus;
    j["gpu"] = {{"name", q.gpu.name},
                {"memory_bytes", q.gpu.memory_bytes},
                {"peak_flops", q.gpu.peak_flops},
                {"intra_node_bw", q.gpu.intra_node_bw},
                {"inter_node_bw", q.gpu.inter_node_bw},
                {"per_node", q.gpu.per_node}};
    j["seq_len"] = q.seq_len;
    j["tokens_per_step"] = p.tokens_per_step;
    j["recipe"] = recipe;
    j["total_params"] = p.total_params;
    j["active_params"] = p.active_params;
    j["flops_per_token"] = p.flops_per_token;
    j["min_gpus_for_state"] = p.min_gpus_for_state;
    j["chosen"] = p.chosen >= 0 ? layout_json(p.layouts[size_t(p.chosen)]) : nlohmann::ordered_json();
    for (const PlanLayout& l : p.layouts) j["layouts"].push_back(layout_json(l));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "myriad plan: %s on %d x %s (%.0f GB, %.0f TFLOP/s at MFU %.0f%%, intra-node %.0f GB/s, inter-node %.0f "
      "GB/s per accelerator, %d per node)\n",
      config_path.c_str(), q.gpus, q.gpu.name.c_str(), q.gpu.memory_bytes / 1e9, q.gpu.peak_flops / 1e12, 100 * q.mfu,
      q.gpu.intra_node_bw / 1e9, q.gpu.inter_node_bw / 1e9, q.gpu.per_node);
  std::printf(
      "model: %s parameters (%s in routed experts, %s dense), %s activated; %.3e training FLOPs per token at "
      "T = %lld\n",
      human(double(p.total_params)).c_str(), human(double(p.expert_params)).c_str(),
      human(double(p.dense_params)).c_str(), human(double(p.active_params)).c_str(), p.flops_per_token,
      (long long)q.seq_len);
  std::printf("step: %lld sequences of %lld tokens (%s tokens); recipe %s (%s per parameter)\n",
              (long long)(p.tokens_per_step / q.seq_len), (long long)q.seq_len,
              human(double(p.tokens_per_step)).c_str(), recipe.c_str(),
              q.recipe == PlanRecipe::kBf16Sharded ? "18 B, fully sharded" : "16 B, dense replicated");
  std::printf(
      "state floor: weights, gradients and optimizer alone need %.0f accelerators at %.0f%% of their memory\n\n",
      std::ceil(p.min_gpus_for_state), 100 * q.memory_headroom);
  if (p.chosen >= 0) {
    const PlanLayout& l = p.layouts[size_t(p.chosen)];
    const auto& m = l.memory;
    std::printf("chosen: %s: %s\n", l.dims.str().c_str(), l.why.c_str());
    std::printf(
        "  memory per accelerator: weights %s, gradients %s, optimizer %s, gathered layers %s, activations %s "
        "(checkpointed; %s without), KDA states %s, MLA latents %s; total %s\n",
        gb(m.weights).c_str(), gb(m.gradients).c_str(), gb(m.optimizer).c_str(), gb(m.gathered).c_str(),
        gb(m.activations_checkpointed).c_str(), gb(m.activations_full).c_str(), gb(m.kda_states).c_str(),
        gb(m.mla_latents).c_str(), gb(m.total(l.checkpointing)).c_str());
    std::printf(
        "  communication per rank and step: weights/gradients %s (%.2f s), expert all-to-all %s (%.2f s), "
        "sequence-parallel gathers %s (%.2f s)\n",
        gb(l.comm.fsdp).c_str(), l.comm.fsdp_s, gb(l.comm.all_to_all).c_str(), l.comm.all_to_all_s,
        gb(l.comm.sp_gather).c_str(), l.comm.sp_gather_s);
    std::printf(
        "  step: compute %.2f s (%lld micro-batches of %lld tokens per rank%s); %.2f s with communication "
        "serial, %.2f s overlapped: %.0f tokens/s\n\n",
        l.compute_s, (long long)l.micro_batches, (long long)l.tokens_per_rank,
        l.checkpointing ? ", recomputing each layer" : "", l.step_s_serial, l.step_s_overlap,
        double(p.tokens_per_step) / l.step_s_overlap);
  } else {
    std::printf("chosen: none fits on %d x %s%s\n\n", q.gpus, q.gpu.name.c_str(),
                p.layouts.empty()
                    ? ""
                    : (" (the smallest: " + p.layouts[0].dims.str() + ", " + p.layouts[0].why + ")").c_str());
  }
  int fit = 0;
  for (const PlanLayout& l : p.layouts) fit += l.fits;
  std::printf("layouts (%d valid, %d fit; fastest fitting first):\n", int(p.layouts.size()), fit);
  std::printf("  %6s %5s %5s %10s %5s %10s %10s %10s  %s\n", "dp", "ep", "sp", "memory", "ckpt", "compute s", "comm s",
              "step s", "why");
  const size_t shown = args.has("all") ? p.layouts.size() : std::min<size_t>(p.layouts.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    const PlanLayout& l = p.layouts[i];
    std::printf("  %6d %5d %5d %10s %5s %10.2f %10.2f %10.2f  %s\n", l.dims.dp, l.dims.ep, l.dims.sp,
                gb(l.memory.total(l.checkpointing)).c_str(), l.checkpointing ? "yes" : "no", l.compute_s,
                l.comm.seconds(), l.step_s_overlap, l.why.c_str());
  }
  if (shown < p.layouts.size()) std::printf("  ... %zu more (--all)\n", p.layouts.size() - shown);
  return 0;
}

}  // namespace

MYRIAD_COMMAND("plan", "memory, layout, communication and step time of training a model on N accelerators",
               "myriad plan --config F --gpus N [--gpu h200|h100|b200|cpu] [--seq T] [--batch-tokens B] [--mfu F] "
               "[--recipe bf16|myriad-cpu] [--dp A --ep B --sp C] [--json]",
               {{"config", "FILE", "model config.json"},
                {"gpus", "N", "accelerators (ranks)"},
                {"gpu", "NAME", "h200 (default), h100, b200, or cpu (then give every figure below)"},
                {"mem-gb", "G", "memory per accelerator, GB"},
                {"peak-tflops", "X", "dense bf16 peak per accelerator, TFLOP/s"},
                {"intra-gbs", "X", "intra-node bandwidth per accelerator and direction, GB/s"},
                {"inter-gbs", "X", "inter-node bandwidth per accelerator and direction, GB/s"},
                {"per-node", "N", "accelerators per node"},
                {"seq", "T", "sequence length (default min(8192, max_position_embeddings))"},
                {"batch-tokens", "B", "tokens per step (default 16M, or one sequence if longer)"},
                {"mfu", "F", "achievable fraction of the peak (default 0.4)"},
                {"recipe", "R",
                 "bf16: bf16 weights, fp32 grads and Adam, fully sharded; myriad-cpu: myriad train "
                 "today (f32, dense replicated)"},
                {"dp", "A", "evaluate this layout only (with --ep, --sp)"},
                {"ep", "B", "expert-parallel degree of the forced layout"},
                {"sp", "C", "sequence-parallel degree of the forced layout"},
                {"all", "", "list every layout"},
                {"json", "", "print the plan as JSON"}},
               run_plan);

// Reading a run's metrics.jsonl (docs/training.md) into bounded series (internal to src/report).
//
// Reading: one JSON object per line. A line that is not JSON, not an object, or lacks a string "type" or a
// numeric "step" is malformed: skipped, counted, and named on the page (a run killed mid-write leaves a torn last
// line). Records of an unknown type are counted apart. A missing or mistyped field leaves that point out of its
// curve; nothing else. Every series is a Curve or Timeline (curve.h: bounded however long the run); samples keep
// the last kMaxSamples.
//
// "skipped" in a step record is the trainer's running count of skipped optimizer steps (a resume from an earlier
// checkpoint may rewind it): where it rises, steps were skipped. "time_s" restarts at 0 in a resumed process, so
// the wall time adds up the clock's runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/curve.h"

namespace myriad::report {

constexpr size_t kMaxStageMarks = 64;  // stage switches drawn

struct StageMark {
  double step = 0;
  int64_t stage = -1;    // -1: not given
  int64_t seq_len = -1;  // -1: not given
};

struct StageTotals {
  int64_t steps = 0;
  double tokens = 0;
  int64_t seq_len = -1;
};

struct Sample {
  double step = 0;
  std::string prompt, text, want;
};

struct LayerLast {
  double step = 0;
  std::vector<double> load;  // [E]
  std::optional<double> max_violation, dropped_fraction, router_entropy, dead_experts;
};

// A "longctx" record (train/trainer.h: the long-context grid at a stage's end), as written.
struct LongContextRecord {
  double step = 0;
  nlohmann::json grid;  // LongContextReport::to_json() with "stage" and "seq_len"
};
constexpr size_t kMaxLongContextRecords = 64;

struct Metrics {
  std::string path;
  int64_t lines = 0, records = 0, malformed = 0, first_malformed_line = 0, ignored = 0;
  int64_t n_step = 0, n_eval = 0, n_stage = 0, n_sample = 0, n_moe = 0;
  double first_step = kInf, last_step = -kInf;

  Curve loss, lr, grad_norm, tokens_per_s, mfu, skipped;
  double tokens = 0, skipped_steps = 0, skipped_prev = 0;
  double time_done = 0, time_last = kNaN;  // wall time: earlier runs of the clock + the current one
  bool has_tokens = false;

  Curve val_loss, val_bpb;
  std::map<std::string, Curve> tasks;
  std::optional<Point> best_val;

  // GRPO's step records (rl/grpo.h): "reward <name>" for each reward and the total, and the rates: success,
  // violations per episode, clip fraction, dropped groups (fraction of the step's groups), KL, log-prob mismatch.
  std::map<std::string, Curve> rewards, rl_rates;
  Curve kl, mismatch;

  std::vector<StageMark> stages;       // "stage" records
  std::vector<StageMark> step_stages;  // where (stage, seq_len) of the step records changes
  std::map<int64_t, StageTotals> stage_totals;

  std::deque<Sample> samples;
  std::deque<LongContextRecord> longctx;  // the last kMaxLongContextRecords
  std::optional<nlohmann::json> memory;   // the last "memory" record (bytes of weights, gradients, optimizer, RSS)
  std::optional<nlohmann::json> memory_profile;  // the last "memory_profile" record (train --memory-profile)

  std::map<int64_t, Curve> violation;  // per MoE layer
  Curve violation_mean, violation_max, dead_experts;
  std::map<int64_t, LayerLast> last_load;
  Timeline timeline;
};

// Reads RUN/metrics.jsonl. Throws kIo when RUN or RUN/metrics.jsonl is missing or unreadable, kFormat when it
// has no records.
Metrics read_metrics(const std::string& run_dir);

}  // namespace myriad::report

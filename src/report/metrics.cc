// Reading a run's metrics.jsonl: see metrics.h.
#include "report/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "report/format.h"

namespace myriad::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxSamples = 100;       // the last ones are kept
constexpr size_t kMaxSampleBytes = 2000;  // per prompt and per text

std::optional<double> number(const json& j, const char* key, bool allow_bool = false) {
  const auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number()) {
    const double v = it->get<double>();
    if (std::isfinite(v)) return v;
  }
  if (allow_bool && it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
  return std::nullopt;
}

std::optional<int64_t> integer(const json& j, const char* key) {
  const auto v = number(j, key);
  if (!v || *v != std::floor(*v) || std::abs(*v) > 9e15) return std::nullopt;
  return int64_t(*v);
}

std::string string_field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

void add_moe(Metrics& m, const json& moe, double step) {
  ++m.n_moe;
  // The step x expert heatmap follows the first MoE layer: the smallest layer with a load in the first record.
  if (m.timeline.layer < 0) {
    for (const json& l : moe) {
      const auto layer = l.is_object() ? integer(l, "layer") : std::nullopt;
      const auto it = l.is_object() ? l.find("load") : l.end();
      if (!layer || it == l.end() || !it->is_array() || it->empty()) continue;
      if (m.timeline.layer < 0 || *layer < m.timeline.layer) {
        m.timeline.layer = *layer;
        m.timeline.experts = it->size();
      }
    }
  }
  double sum_v = 0, max_v = -kInf, dead = 0;
  int n_v = 0, n_dead = 0;
  for (const json& l : moe) {
    if (!l.is_object()) continue;
    const auto layer = integer(l, "layer");
    if (!layer) continue;
    LayerLast& last = m.last_load[*layer];
    last.step = step;
    last.max_violation = number(l, "max_violation");
    last.dropped_fraction = number(l, "dropped_fraction");
    last.router_entropy = number(l, "router_entropy");
    last.dead_experts = number(l, "dead_experts");
    last.load.clear();
    const auto it = l.find("load");
    if (it != l.end() && it->is_array()) {
      for (const json& v : *it) {
        if (!v.is_number() || !std::isfinite(v.get<double>())) {
          last.load.clear();
          break;
        }
        last.load.push_back(v.get<double>());
      }
    }
    if (last.max_violation) {
      m.violation[*layer].add(step, *last.max_violation);
      sum_v += *last.max_violation;
      max_v = std::max(max_v, *last.max_violation);
      ++n_v;
    }
    if (last.dead_experts) {
      dead += *last.dead_experts;
      ++n_dead;
    }
    if (*layer == m.timeline.layer && last.load.size() == m.timeline.experts) {
      double mean = 0;
      for (double v : last.load) mean += v;
      mean /= double(last.load.size());
      if (mean > 0) {
        std::vector<double> ratio_E(last.load.size());
        for (size_t e = 0; e < ratio_E.size(); ++e) ratio_E[e] = last.load[e] / mean;
        m.timeline.add(step, ratio_E);
      }
    }
  }
  if (n_v > 0) {
    m.violation_mean.add(step, sum_v / n_v);
    m.violation_max.add(step, max_v);
  }
  if (n_dead > 0) m.dead_experts.add(step, dead);
}

// A "longctx" record with every field the heatmap reads, of the right type (metrics.jsonl is outside data).
bool drawable_grid(const json& r) {
  auto numbers = [&](const char* key) {
    const auto it = r.find(key);
    return it != r.end() && it->is_array() && it->size() <= 64 &&
           std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_number_integer(); });
  };
  const auto task = r.find("task"), acc = r.find("accuracy"), cells = r.find("cells");
  if (!numbers("lengths") || !numbers("depths") || task == r.end() || !task->is_string() || acc == r.end() ||
      !acc->is_number() || cells == r.end() || !cells->is_array() || cells->size() > 4096)
    return false;
  for (const json& c : *cells) {
    if (!c.is_object()) return false;
    for (const char* k : {"length", "depth", "correct", "samples"}) {
      const auto it = c.find(k);
      if (it == c.end() || !it->is_number_integer()) return false;
    }
    const auto a = c.find("accuracy");
    if (a == c.end() || !a->is_number()) return false;
  }
  return true;
}

void add_step(Metrics& m, const json& r, double step) {
  ++m.n_step;
  if (auto v = number(r, "loss")) m.loss.add(step, *v);
  if (auto v = number(r, "lr")) m.lr.add(step, *v);
  if (auto v = number(r, "grad_norm")) m.grad_norm.add(step, *v);
  if (auto v = number(r, "tokens_per_s")) m.tokens_per_s.add(step, *v);
  if (auto v = number(r, "mfu")) m.mfu.add(step, *v);
  const auto tokens = number(r, "tokens");
  if (tokens) {
    m.tokens += *tokens;
    m.has_tokens = true;
  }
  if (auto v = number(r, "skipped", /*allow_bool=*/true)) {
    if (*v > m.skipped_prev) {
      m.skipped.add(step, *v - m.skipped_prev);
      m.skipped_steps += *v - m.skipped_prev;
    }
    m.skipped_prev = *v;
  }
  if (auto v = number(r, "time_s")) {
    if (*v < m.time_last) m.time_done += m.time_last;  // a resumed process restarted the clock
    m.time_last = *v;
  }

  const auto stage = integer(r, "stage"), seq_len = integer(r, "seq_len");
  if (stage || seq_len) {
    const StageMark prev = m.step_stages.empty() ? StageMark{} : m.step_stages.back();
    if (m.step_stages.empty() || (stage && *stage != prev.stage) || (seq_len && *seq_len != prev.seq_len)) {
      if (m.step_stages.size() < 4 * kMaxStageMarks)
        m.step_stages.push_back({step, stage.value_or(prev.stage), seq_len.value_or(prev.seq_len)});
    }
  }
  if (stage) {
    StageTotals& t = m.stage_totals[*stage];
    ++t.steps;
    t.tokens += tokens.value_or(0.0);
    if (seq_len) t.seq_len = *seq_len;
  }
  const auto moe = r.find("moe");
  if (moe != r.end() && moe->is_array() && !moe->empty()) add_moe(m, *moe, step);
  const auto rewards = r.find("rewards");  // a GRPO step
  if (rewards != r.end() && rewards->is_object()) {
    for (const auto& [name, v] : rewards->items())
      if (v.is_number() && std::isfinite(v.get<double>())) m.rewards[name].add(step, v.get<double>());
    for (const char* k : {"success", "violations", "clip_fraction"})
      if (auto v = number(r, k)) m.rl_rates[k].add(step, *v);
    const auto dropped = number(r, "groups_dropped"), groups = number(r, "groups");
    if (dropped && groups && *groups > 0) m.rl_rates["groups dropped"].add(step, *dropped / *groups);
    if (auto v = number(r, "kl")) m.kl.add(step, *v);
    if (auto v = number(r, "logprob_mismatch_mean")) m.mismatch.add(step, *v);
  }
}

void add_eval(Metrics& m, const json& r, double step) {
  ++m.n_eval;
  if (auto v = number(r, "val_loss")) {
    m.val_loss.add(step, *v);
    if (!m.best_val || *v < m.best_val->y) m.best_val = Point{step, *v};
  }
  if (auto v = number(r, "val_bpb")) m.val_bpb.add(step, *v);
  const auto tasks = r.find("tasks");
  if (tasks != r.end() && tasks->is_object()) {
    for (const auto& [name, v] : tasks->items()) {
      if (v.is_number() && std::isfinite(v.get<double>())) m.tasks[name].add(step, v.get<double>());
    }
  }
  // The agent evaluation (SFT, GRPO): the held-out tool-task success per family, on the same chart.
  const auto agent = r.find("agent");
  if (agent != r.end() && agent->is_object()) {
    if (auto v = number(*agent, "success")) m.tasks["agent (all)"].add(step, *v);
    const auto families = agent->find("families");
    if (families != agent->end() && families->is_object())
      for (const auto& [name, f] : families->items())
        if (auto v = f.is_object() ? number(f, "success") : std::nullopt) m.tasks["agent " + name].add(step, *v);
  }
}

}  // namespace

Metrics read_metrics(const std::string& run_dir) {
  const fs::path run(run_dir);
  std::error_code ec;
  MYRIAD_REQUIRE(fs::exists(run, ec), kIo, "run directory '", run_dir, "' does not exist");
  MYRIAD_REQUIRE(fs::is_directory(run, ec), kIo, "'", run_dir, "' is not a directory (expected a run directory ",
                 "holding metrics.jsonl)");
  Metrics m;
  m.path = (run / "metrics.jsonl").string();
  MYRIAD_REQUIRE(fs::exists(m.path, ec), kIo, "'", m.path, "' does not exist (is '", run_dir,
                 "' a run directory written by myriad train?)");
  std::ifstream in(m.path, std::ios::binary);
  MYRIAD_REQUIRE(in.is_open(), kIo, "cannot open '", m.path, "': ", std::strerror(errno));

  std::string line;
  while (std::getline(in, line)) {
    ++m.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool object = !r.is_discarded() && r.is_object();
    const auto type = object ? r.find("type") : r.end();
    const auto step = object ? number(r, "step") : std::nullopt;
    if (!object || type == r.end() || !type->is_string() || !step) {
      if (m.malformed++ == 0) m.first_malformed_line = m.lines;
      continue;
    }
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "step") {
      add_step(m, r, *step);
    } else if (t == "eval") {
      add_eval(m, r, *step);
    } else if (t == "stage") {
      ++m.n_stage;
      m.stages.push_back({*step, integer(r, "stage").value_or(-1), integer(r, "seq_len").value_or(-1)});
    } else if (t == "sample") {
      ++m.n_sample;
      m.samples.push_back({*step, truncate_utf8(string_field(r, "prompt"), kMaxSampleBytes),
                           truncate_utf8(string_field(r, "text"), kMaxSampleBytes),
                           truncate_utf8(string_field(r, "want"), kMaxSampleBytes)});
      if (m.samples.size() > kMaxSamples) m.samples.pop_front();
    } else if (t == "longctx") {
      if (!drawable_grid(r)) {
        ++m.ignored;  // not a grid this report can draw
        continue;
      }
      m.longctx.push_back({*step, r});
      if (m.longctx.size() > kMaxLongContextRecords) m.longctx.pop_front();
    } else if (t == "memory") {
      m.memory = r;
    } else if (t == "memory_profile") {
      m.memory_profile = r;
    } else {
      ++m.ignored;
      continue;
    }
    ++m.records;
    m.first_step = std::min(m.first_step, *step);
    m.last_step = std::max(m.last_step, *step);
  }
  MYRIAD_REQUIRE(!in.bad(), kIo, "error reading '", m.path, "'");
  if (m.records == 0) {
    std::string why;
    if (m.malformed > 0) why += str(m.malformed, " malformed line", m.malformed == 1 ? "" : "s", " skipped");
    if (m.ignored > 0) why += str(why.empty() ? "" : ", ", m.ignored, " record(s) of unknown type");
    throw_error(ErrorKind::kFormat, m.path, " has no records", why.empty() ? "" : " (" + why + ")");
  }
  return m;
}

}  // namespace myriad::report

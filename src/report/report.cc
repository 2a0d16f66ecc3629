// Training report: metrics.jsonl (docs/training.md) -> one self-contained HTML page with inline SVG charts.
//
// This file is the page: its sections (summary, configuration, stages, the charts, mixture of experts,
// samples) and render_report / write_report. Its parts: metrics.h reads metrics.jsonl into bounded series
// (curve.h), svg.h draws the charts and heatmaps, format.h formats text and numbers, page.h holds what every page
// of the report layer shares (CSS, cards, figures, the step axis). Several runs side by side: compare.h.
//
// Leaves out: anything the page would have to fetch (no scripts, fonts, images or links).
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "model/accounting.h"
#include "model/config.h"
#include "report/curve.h"
#include "report/format.h"
#include "report/longctx_page.h"
#include "report/metrics.h"
#include "report/page.h"
#include "report/svg.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace report;  // the page's parts: format.h, curve.h, metrics.h, svg.h

constexpr size_t kMaxHeatCells = 24000;  // fewer step columns for very many experts: keeps the page small
constexpr size_t kMaxLayerLines = 8;     // more MoE layers: the mean and the worst layer instead of one each

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return grouped(v.get<double>());
  if (v.is_number()) return sfmt("%.6g", v.get<double>());
  return v.dump();
}

// train.json has no fixed schema here: its scalars (nested objects flattened as a.b), short lists inline, and
// each list of objects (the stages) as a table of its own.
void flatten(const json& j, const std::string& prefix, int depth,
             std::vector<std::pair<std::string, std::string>>* rows,
             std::vector<std::pair<std::string, const json*>>* tables) {
  for (const auto& [k, v] : j.items()) {
    const std::string key = prefix.empty() ? k : prefix + "." + k;
    if (rows->size() >= 60) return;
    if (v.is_object()) {
      if (depth < 2) {
        flatten(v, key, depth + 1, rows, tables);
      } else {
        rows->push_back({key, cut(v.dump(), 120)});
      }
    } else if (v.is_array()) {
      const bool objects = !v.empty() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_object(); });
      if (objects) {
        tables->push_back({key, &v});
      } else {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i].is_primitive() ? scalar_text(v[i]) : "...");
        rows->push_back({key, cut(s + "]", 120)});
      }
    } else {
      rows->push_back({key, cut(scalar_text(v), 120)});
    }
  }
}

std::string kv_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string s = "<table>\n";
  for (const auto& [k, v] : rows) s += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n";
  return s + "</table>\n";
}

std::string object_table(const json& list) {
  std::vector<std::string> keys;
  for (const json& e : list)
    for (const auto& [k, v] : e.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end() && keys.size() < 12) keys.push_back(k);
  std::string s = "<table>\n<tr>";
  for (const auto& k : keys) s += "<th>" + esc(k) + "</th>";
  s += "</tr>\n";
  size_t n = 0;
  for (const json& e : list) {
    if (++n > 50) break;
    s += "<tr>";
    for (const auto& k : keys) {
      const auto it = e.find(k);
      const bool num = it != e.end() && it->is_number();
      s += std::string(num ? "<td class=\"n\">" : "<td>") +
           (it == e.end() ? "" : esc(cut(it->is_primitive() ? scalar_text(*it) : it->dump(), 80))) + "</td>";
    }
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string config_section(const fs::path& run) {
  std::string s = "<h2>Configuration</h2>\n<div class=\"cols\">\n";
  std::string note;
  // Model.
  s += "<div>\n<h3>Model (config.json)</h3>\n";
  if (const auto cfg = read_json(run / "config.json", &note)) {
    static const char* const kKeys[] = {"model_type",
                                        "vocab_size",
                                        "hidden_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "intermediate_size",
                                        "max_position_embeddings",
                                        "num_experts",
                                        "num_experts_per_token",
                                        "num_shared_experts",
                                        "moe_intermediate_size",
                                        "first_k_dense_replace",
                                        "balancing",
                                        "attn_res_mode"};
    std::vector<std::pair<std::string, std::string>> rows;
    for (const char* k : kKeys) {
      const auto it = cfg->find(k);
      if (it != cfg->end() && it->is_primitive()) rows.push_back({k, scalar_text(*it)});
    }
    std::string summary;
    try {
      std::vector<std::string> warnings;
      const ModelConfig c = parse_model_config(*cfg, (run / "config.json").string(), &warnings);
      const ModelAccounting a = account_model(c);
      rows.insert(rows.begin(), {"parameters (total)",
                                 grouped(double(a.total_params)) + " (" + fmt_value(double(a.total_params)) + ")"});
      rows.insert(rows.begin() + 1, {"activated per token", grouped(double(a.active_params)) + " (" +
                                                                fmt_value(double(a.active_params)) + ")"});
      summary = model_config_summary(c);
    } catch (const std::exception& e) {
      summary = std::string("not a valid model config: ") + e.what();
    }
    s += kv_table(rows);
    if (!summary.empty()) s += "<pre>" + esc(summary) + "</pre>\n";
  } else {
    s += "<p class=\"note\">" + esc(note.empty() ? "no config.json in the run directory" : note) + "</p>\n";
  }
  s += "</div>\n";
  // Training.
  note.clear();
  s += "<div>\n<h3>Training (train.json)</h3>\n";
  if (const auto tc = read_json(run / "train.json", &note)) {
    std::vector<std::pair<std::string, std::string>> rows;
    std::vector<std::pair<std::string, const json*>> tables;
    flatten(*tc, "", 0, &rows, &tables);
    s += kv_table(rows);
    for (const auto& [name, list] : tables) s += "<h3>" + esc(name) + "</h3>\n" + object_table(*list);
  } else {
    s += "<p class=\"note\">" + esc(note.empty() ? "no train.json in the run directory" : note) + "</p>\n";
  }
  s += "</div>\n</div>\n";
  return s;
}

bool want_log(const Curve& a, double ratio) {
  return !a.empty() && a.min_y() > 0 && a.max_y() / a.min_y() >= ratio;
}

std::string envelope_note(const Curve& c) {
  if (c.exact()) return "";
  return " Many points: the light band is the min and max of every " + fmt_step(c.bucket_width()) +
         " steps, the bold line their moving average.";
}

std::string chart_sections(const Metrics& m, const Frame& f) {
  std::string s;
  // Loss.
  s += "<h2>Loss</h2>\n";
  if (m.loss.empty() && m.val_loss.empty() && m.val_bpb.empty()) {
    s += missing("No loss, val_loss or val_bpb values in metrics.jsonl.");
  } else {
    LineChart c;
    c.title = "Loss";
    c.y.label = "loss, bits/byte";
    double lo = kInf, hi = -kInf;
    for (const Curve* k : {&m.loss, &m.val_loss, &m.val_bpb})
      if (!k->empty()) lo = std::min(lo, k->min_y()), hi = std::max(hi, k->max_y());
    c.y.log = lo > 0 && hi / lo >= 3;
    if (!m.loss.empty()) add_noisy(&c, f, m.loss, "train loss", palette(0));
    if (!m.val_loss.empty()) add_points(&c, m.val_loss, "val loss", palette(1));
    if (!m.val_bpb.empty()) add_points(&c, m.val_bpb, "val bits/byte", palette(3), 0, true);
    s += figure(render_line_chart(c, f),
                "Training loss per step; validation loss and bits per byte from the eval "
                "records, on the same step axis." +
                    envelope_note(m.loss));
  }
  // Learning rate.
  s += "<h2>Learning rate</h2>\n";
  if (m.lr.empty()) {
    s += missing("No lr values in the step records.");
  } else {
    LineChart c;
    c.title = "Learning rate";
    c.y.label = "learning rate";
    c.y.zero = true;
    c.lines.push_back({"lr", palette(0), m.lr.envelope(), 2, 1, true, false, false, true, 0});
    s += figure(render_line_chart(c, f), "");
  }
  // Throughput.
  s += "<h2>Throughput</h2>\n";
  if (m.tokens_per_s.empty() && m.mfu.empty()) {
    s += missing("No tokens_per_s or mfu values in the step records.");
  } else {
    LineChart c;
    c.title = "Throughput";
    const bool both = !m.tokens_per_s.empty() && !m.mfu.empty();
    if (!m.tokens_per_s.empty()) {
      c.y.label = "tokens/s";
      c.y.zero = true;
      add_noisy(&c, f, m.tokens_per_s, "tokens/s", palette(0));
    }
    if (!m.mfu.empty()) {
      Axis& a = both ? c.y2 : c.y;
      a.label = "MFU";
      a.percent = true;
      a.zero = true;
      add_noisy(&c, f, m.mfu, "MFU (model FLOPs utilisation)", palette(1), both ? 1 : 0);
    }
    std::string cap;
    if (!m.tokens_per_s.empty()) cap += "Mean " + fmt_value(m.tokens_per_s.mean_y()) + " tokens/s";
    if (!m.mfu.empty())
      cap += std::string(cap.empty() ? "Mean" : ", mean") + " MFU " + sfmt("%.1f%%", 100 * m.mfu.mean_y());
    s += figure(render_line_chart(c, f), cap + "." + envelope_note(m.tokens_per_s.empty() ? m.mfu : m.tokens_per_s));
  }
  // Gradient norm and skipped steps.
  s += "<h2>Gradient norm</h2>\n";
  if (m.grad_norm.empty() && m.skipped.empty()) {
    s += missing("No grad_norm values and no skipped steps in the step records.");
  } else {
    LineChart c;
    c.title = "Gradient norm and skipped steps";
    c.y.label = "gradient norm";
    c.y.log = want_log(m.grad_norm, 20);
    c.y.zero = !c.y.log;
    if (!m.grad_norm.empty()) add_noisy(&c, f, m.grad_norm, "gradient norm (before clipping)", palette(0));
    c.events.color = "#d62728";
    c.events.name = "skipped step (" + fmt_step(m.skipped_steps) + " in all)";
    for (const Point& p : m.skipped.envelope()) c.events.xs.push_back(p.x);
    s += figure(render_line_chart(c, f),
                m.skipped_steps > 0 ? "Red triangles: steps whose update was skipped." : "No step was skipped.");
  }
  // Task accuracy.
  s += "<h2>Task accuracy</h2>\n";
  if (m.tasks.empty()) {
    s += missing("No task accuracies in the eval records.");
  } else {
    LineChart c;
    c.title = "Task accuracy";
    c.y.label = "accuracy";
    c.y.zero = true;
    double hi = 0;
    for (const auto& [name, k] : m.tasks) hi = std::max(hi, k.max_y());
    c.y.percent = hi <= 1;
    size_t i = 0;
    for (const auto& [name, k] : m.tasks) add_points(&c, k, name, palette(i++));
    std::string last;
    for (const auto& [name, k] : m.tasks)
      last += (last.empty() ? "" : ", ") + name + " " +
              (c.y.percent ? sfmt("%.1f%%", 100 * k.last().y) : fmt_value(k.last().y));
    s += figure(render_line_chart(c, f), "From the eval records. Last: " + last + ".");
  }
  return s;
}

// GRPO runs: the rewards, the rates, and the KL and log-prob mismatch, per step.
std::string rl_section(const Metrics& m, const Frame& f) {
  if (m.rewards.empty()) return "";
  std::string s = "<h2>Reinforcement learning (GRPO)</h2>\n";
  auto chart = [&](const std::string& title, const std::string& label, const std::map<std::string, Curve>& series,
                   bool percent, const std::string& caption) {
    LineChart c;
    c.title = title;
    c.y.label = label;
    c.y.percent = percent;
    size_t i = 0;
    std::string last;
    for (const auto& [name, k] : series) {
      add_noisy(&c, f, k, name, palette(i++));
      last += (last.empty() ? "" : ", ") + name + " " +
              (percent ? sfmt("%.1f%%", 100 * k.last().y) : fmt_value(k.last().y));
    }
    s += figure(render_line_chart(c, f), caption + " Last: " + last + ".");
  };
  chart("Rewards", "mean reward per episode", m.rewards, false,
        "The step's rollouts: each reward (completion, efficiency, safety, length) and the weighted total.");
  chart("Rollout rates", "fraction", m.rl_rates, true,
        "Success of the training rollouts, violations per episode, the fraction of policy tokens whose ratio was "
        "clipped, and the groups dropped for equal rewards.");
  std::map<std::string, Curve> drift;
  if (!m.kl.empty()) drift["KL to the reference"] = m.kl;
  if (!m.mismatch.empty()) drift["|log pi - log pi_engine|"] = m.mismatch;
  if (!drift.empty())
    chart("Policy drift", "nats per token", drift, false,
          "The KL estimate to the frozen start (when kl_coef > 0) and the mean gap between the trainer's and the "
          "engine's log-probabilities.");
  return s;
}

std::string moe_section(const Metrics& m, const Frame& f) {
  std::string s = "<h2>Mixture of experts</h2>\n";
  if (m.n_moe == 0) return s + missing("No MoE statistics in the step records (a dense model, or none logged).");
  // Load violation over training.
  if (!m.violation.empty()) {
    LineChart c;
    c.title = "MoE load imbalance";
    c.y.label = "max violation";
    c.y.zero = true;
    std::string cap = "max_violation: how far the most loaded expert of a layer is above a balanced load.";
    if (m.violation.size() <= kMaxLayerLines) {
      size_t i = 0;
      for (const auto& [layer, k] : m.violation) add_noisy(&c, f, k, "layer " + std::to_string(layer), palette(i++));
    } else {
      add_noisy(&c, f, m.violation_mean, "mean over " + std::to_string(m.violation.size()) + " layers", palette(0));
      add_noisy(&c, f, m.violation_max, "worst layer", palette(2));
    }
    s += figure(render_line_chart(c, f), cap);
  }
  // The last recorded values per layer.
  // The last recorded values per layer; columns no layer has are left out.
  using Field = std::optional<double> LayerLast::*;
  const std::pair<const char*, Field> kFields[] = {{"max violation", &LayerLast::max_violation},
                                                   {"dropped", &LayerLast::dropped_fraction},
                                                   {"router entropy", &LayerLast::router_entropy},
                                                   {"dead experts", &LayerLast::dead_experts}};
  std::vector<std::pair<const char*, Field>> fields;
  for (const auto& fd : kFields)
    if (std::any_of(m.last_load.begin(), m.last_load.end(),
                    [&](const auto& e) { return (e.second.*fd.second).has_value(); }))
      fields.push_back(fd);
  s += "<h3>Per layer, last recorded step</h3>\n<table>\n<tr><th>layer</th><th>step</th><th>experts</th>";
  for (const auto& fd : fields) s += std::string("<th>") + fd.first + "</th>";
  s += "<th>min / mean load</th><th>max / mean load</th></tr>\n";
  size_t max_e = 0;
  for (const auto& [layer, l] : m.last_load) {
    double mean = 0, lo = kInf, hi = -kInf;
    for (double v : l.load) mean += v, lo = std::min(lo, v), hi = std::max(hi, v);
    mean = l.load.empty() ? 0 : mean / double(l.load.size());
    max_e = std::max(max_e, l.load.size());
    const bool ok = mean > 0;
    s += "<tr><td class=\"n\">" + std::to_string(layer) + "</td><td class=\"n\">" + fmt_step(l.step) +
         "</td><td class=\"n\">" + (l.load.empty() ? "-" : std::to_string(l.load.size())) + "</td>";
    for (const auto& fd : fields) {
      const std::optional<double>& v = l.*fd.second;
      s += "<td class=\"n\">" + (v ? fmt_value(*v) : std::string("-")) + "</td>";
    }
    s += "<td class=\"n\">" + (ok ? sfmt("%.2f", lo / mean) : "-") + "</td><td class=\"n\">" +
         (ok ? sfmt("%.2f", hi / mean) : "-") + "</td></tr>\n";
  }
  s += "</table>\n";
  if (max_e == 0) return s + missing("The MoE records carry no per-expert load arrays: no heatmaps.");

  // Layer x expert at the last recorded step.
  {
    Heatmap h;
    h.title = "Expert load by layer (last recorded step)";
    h.x_label = "expert";
    h.y_label = "MoE layer";
    h.cols = max_e;
    std::vector<const std::pair<const int64_t, LayerLast>*> layers;
    for (const auto& e : m.last_load)
      if (!e.second.load.empty()) layers.push_back(&e);
    h.rows = layers.size();
    h.ratio.assign(h.rows * h.cols, kNaN);
    for (size_t r = 0; r < h.rows; ++r) {
      const auto& load = layers[r]->second.load;
      double mean = 0;
      for (double v : load) mean += v;
      mean /= double(load.size());
      h.row_labels.push_back("layer " + std::to_string(layers[r]->first));
      if (mean > 0)
        for (size_t e = 0; e < load.size(); ++e) h.ratio[r * h.cols + e] = load[e] / mean;
    }
    h.numbers = h.cols <= 16 && h.rows <= 24;
    h.tooltip = [&](size_t r, size_t c) {
      const auto& l = layers[r]->second;
      if (c >= l.load.size())
        return "layer " + std::to_string(layers[r]->first) + ", expert " + std::to_string(c) + ": no value";
      return "layer " + std::to_string(layers[r]->first) + ", expert " + std::to_string(c) + ": load " +
             fmt_value(l.load[c]) + " = " + sfmt("%.2f", h.ratio[r * h.cols + c]) + "x mean (step " + fmt_step(l.step) +
             ")";
    };
    s += figure(render_heatmap(h, nullptr),
                "Each cell: the expert's load / the mean load of its layer, at the layer's last recorded step. "
                "1 (white) is balanced; red is overloaded, blue underused, deepest blue a dead expert.");
  }
  // Step x expert for the first MoE layer.
  if (!m.timeline.cols.empty()) {
    Timeline t = m.timeline;
    while (t.cols.size() > 1 && t.cols.size() * t.experts > kMaxHeatCells) t.coarsen();
    Heatmap h;
    h.title = "Expert load over training (layer " + std::to_string(t.layer) + ", the first MoE layer)";
    h.x_label = "step";
    h.y_label = "expert";
    h.rows = t.experts;
    h.cols = t.cols.size();
    h.ratio.assign(h.rows * h.cols, kNaN);
    std::vector<int64_t> counts;
    size_t c = 0;
    for (const auto& [k, col] : t.cols) {
      h.col_x0.push_back(double(k) * t.width);
      h.col_x1.push_back(double(k + 1) * t.width);
      counts.push_back(col.n);
      for (size_t e = 0; e < t.experts; ++e) h.ratio[e * h.cols + c] = col.sum[e] / double(col.n);
      ++c;
    }
    for (size_t e = 0; e < t.experts; ++e) h.row_labels.push_back(std::to_string(e));
    h.tooltip = [&](size_t r, size_t col) {
      return "expert " + std::to_string(r) + ", steps " + fmt_step(h.col_x0[col]) + "-" + fmt_step(h.col_x1[col] - 1) +
             ": " + sfmt("%.2f", h.ratio[r * h.cols + col]) + "x mean (" + std::to_string(counts[col]) + " record" +
             (counts[col] == 1 ? "" : "s") + ")";
    };
    s +=
        figure(render_heatmap(h, &f), "Each column: the mean over " +
                                          (t.width == 1 ? std::string("one step") : fmt_step(t.width) + " steps") +
                                          " of load / mean load, per expert of layer " + std::to_string(t.layer) + ".");
  }
  return s;
}

// The long-context grids of the trainer's "longctx" records (one per stage end); only when there are some.
std::string longctx_section(const Metrics& m) {
  if (m.longctx.empty()) return "";
  std::string s =
      "<h2>Long context</h2>\n<table>\n<tr><th>step</th><th>after stage</th><th>trained length</th>"
      "<th>task</th><th>accuracy</th><th>cells</th></tr>\n";
  for (const LongContextRecord& r : m.longctx) {
    const json& g = r.grid;
    auto integer_text = [&](const char* k) {
      const auto it = g.find(k);
      return it != g.end() && it->is_number_integer() ? grouped(it->get<double>()) : std::string("-");
    };
    s += "<tr><td class=\"n\">" + fmt_step(r.step) + "</td><td class=\"n\">" + integer_text("stage") +
         "</td><td class=\"n\">" + integer_text("seq_len") + "</td><td>" + esc(g["task"].get<std::string>()) +
         "</td><td class=\"n\">" + sfmt("%.1f%%", 100 * g["accuracy"].get<double>()) + "</td><td class=\"n\">" +
         std::to_string(g["cells"].size()) + "</td></tr>\n";
  }
  s += "</table>\n";
  const LongContextRecord& last = m.longctx.back();
  s += figure(render_longctx_heatmap(last.grid),
              "The last grid (step " + fmt_step(last.step) +
                  "): accuracy by generated answer over prompt length (rows) and the hidden fact's depth (columns).");
  return s;
}

// The first step's tensor memory at its peak by phase and model part (`myriad train --memory-profile`); only when
// the run has one. Entries that are not {phase, part, bytes} are left out (a hand-edited file is not trusted).
std::string memory_profile_section(const Metrics& m) {
  if (!m.memory_profile) return "";
  const json& r = *m.memory_profile;
  const auto peak = r.find("tensor_peak_bytes");
  const auto parts = r.find("at_peak");
  if (peak == r.end() || !peak->is_number() || parts == r.end() || !parts->is_array()) return "";
  const double total = std::max(peak->get<double>(), 1.0);
  std::string s = "<h2>Memory profile</h2>\n<p>Tensors allocated in step " + fmt_step(r.value("step", 0.0)) +
                  " peaked at <b>" + fmt_value(peak->get<double>()) +
                  "B</b> (weights and optimizer state made before the step are not counted, nor memory that is not "
                  "a tensor); the split at that moment:</p>\n<table>\n<tr><th>phase</th><th>part</th><th>bytes</th>"
                  "<th>share</th></tr>\n";
  for (const json& e : *parts) {
    if (!e.is_object() || !e.contains("phase") || !e["phase"].is_string() || !e.contains("part") ||
        !e["part"].is_string() || !e.contains("bytes") || !e["bytes"].is_number())
      continue;
    const double b = e["bytes"].get<double>();
    s += "<tr><td>" + esc(e["phase"].get<std::string>()) + "</td><td>" + esc(e["part"].get<std::string>()) +
         "</td><td class=\"n\">" + fmt_value(b) + "B</td><td class=\"n\">" + sfmt("%.1f%%", 100 * b / total) +
         "</td></tr>\n";
  }
  return s + "</table>\n";
}

std::string samples_section(const Metrics& m) {
  std::string s = "<h2>Samples</h2>\n";
  if (m.samples.empty()) return s + missing("No sample records.");
  if (m.n_sample > int64_t(m.samples.size()))
    s += missing("Showing the last " + std::to_string(m.samples.size()) + " of " + std::to_string(m.n_sample) +
                 " samples.");
  // One table per step (an eval writes a sample per task): prompt, output, and the expected answer if given.
  for (size_t i = 0; i < m.samples.size();) {
    size_t j = i;
    bool want = false;
    for (; j < m.samples.size() && m.samples[j].step == m.samples[i].step; ++j)
      want = want || !m.samples[j].want.empty();
    s += "<h3>step " + fmt_step(m.samples[i].step) +
         "</h3>\n<table class=\"samples\">\n<tr><th>prompt</th>"
         "<th>output</th>" +
         (want ? "<th>expected</th>" : "") + "</tr>\n";
    for (; i < j; ++i) {
      const Sample& x = m.samples[i];
      s += "<tr><td class=\"prompt\">" + esc(x.prompt) + "</td><td>" + esc(x.text) + "</td>" +
           (want ? "<td>" + esc(x.want) + "</td>" : "") + "</tr>\n";
    }
    s += "</table>\n";
  }
  return s;
}

}  // namespace

std::string render_report(const std::string& run_dir, ReportSummary* summary) {
  const Metrics m = read_metrics(run_dir);
  const fs::path run(run_dir);

  const Frame f = step_frame(m);

  std::string h = page_begin(run_name(run_dir) + " \xE2\x80\x94 myriad training report");
  h += "<h1>" + esc(run_name(run_dir)) + "</h1>\n";
  h += "<p class=\"sub\">Training report for <code>" + esc(run_dir) + "</code>: " + counted(m.records, "record") +
       " in metrics.jsonl (" + counted(m.n_step, "step") + ", " + counted(m.n_eval, "eval") + ", " +
       counted(m.n_stage, "stage switch", "stage switches") + ", " + counted(m.n_sample, "sample") + "), steps " +
       fmt_step(m.first_step) + " to " + fmt_step(m.last_step) + ".</p>\n";
  if (m.malformed > 0)
    h += "<p class=\"warn\"><b>" + grouped(double(m.malformed)) + " malformed line" + (m.malformed == 1 ? "" : "s") +
         "</b> in metrics.jsonl " + (m.malformed == 1 ? "was" : "were") + " skipped (the first is line " +
         std::to_string(m.first_malformed_line) +
         "): not a JSON object with a string \"type\" and a numeric \"step\".</p>\n";
  if (m.ignored > 0)
    h += "<p class=\"warn\">" + grouped(double(m.ignored)) + " record(s) of an unknown type were ignored.</p>\n";

  // Summary numbers.
  h += "<h2>Summary</h2>\n<div class=\"cards\">\n";
  h += card("steps", fmt_step(m.last_step), grouped(double(m.n_step)) + " step records");
  if (m.has_tokens) h += card("tokens seen", fmt_value(m.tokens), grouped(m.tokens) + " tokens");
  if (!std::isnan(m.time_last)) {
    const double t = m.time_done + m.time_last;
    h += card("wall time", fmt_duration(t), sfmt("%.0f s", t));
  }
  if (!m.loss.empty())
    h += card("train loss (last)", sfmt("%.4g", m.loss.last().y), "at step " + fmt_step(m.loss.last().x));
  if (m.best_val) h += card("best val loss", sfmt("%.4g", m.best_val->y), "at step " + fmt_step(m.best_val->x));
  if (!m.val_bpb.empty())
    h += card("val bits/byte (last)", sfmt("%.4g", m.val_bpb.last().y), "at step " + fmt_step(m.val_bpb.last().x));
  if (!m.tokens_per_s.empty())
    h += card("tokens/s (mean)", fmt_value(m.tokens_per_s.mean_y()), "last " + fmt_value(m.tokens_per_s.last().y));
  if (!m.mfu.empty())
    h += card("MFU (mean)", sfmt("%.1f%%", 100 * m.mfu.mean_y()), sfmt("last %.1f%%", 100 * m.mfu.last().y));
  if (m.memory) {
    const auto peak = m.memory->find("resident_peak_bytes");
    if (peak != m.memory->end() && peak->is_number())
      h += card("peak memory (RSS)", fmt_value(peak->get<double>()) + "B", grouped(peak->get<double>()) + " bytes");
  }
  h += card("skipped steps", fmt_step(m.skipped_steps),
            m.n_step > 0 ? sfmt("%.2f%% of step records", 100 * m.skipped_steps / double(m.n_step)) : "");
  if (m.malformed > 0) h += card("malformed lines", grouped(double(m.malformed)), "skipped");
  h += "</div>\n";

  h += config_section(run);

  // Stages.
  h += "<h2>Stages</h2>\n";
  if (f.stages.empty() && m.stage_totals.empty()) {
    h += missing("No stage information in metrics.jsonl.");
  } else {
    h += "<table>\n<tr><th>stage</th><th>from step</th><th>sequence length</th><th>step records</th>"
         "<th>tokens</th></tr>\n";
    for (const StageMark& st : f.stages) {
      const auto it = m.stage_totals.find(st.stage);
      const bool t = it != m.stage_totals.end();
      h += "<tr><td class=\"n\">" + (st.stage >= 0 ? std::to_string(st.stage) : "-") + "</td><td class=\"n\">" +
           fmt_step(st.step) + "</td><td class=\"n\">" + (st.seq_len >= 0 ? grouped(double(st.seq_len)) : "-") +
           "</td><td class=\"n\">" + (t ? grouped(double(it->second.steps)) : "-") + "</td><td class=\"n\">" +
           (t && m.has_tokens ? fmt_value(it->second.tokens) : "-") + "</td></tr>\n";
    }
    h += "</table>\n";
  }

  h += chart_sections(m, f);
  h += rl_section(m, f);
  h += moe_section(m, f);
  h += longctx_section(m);
  h += memory_profile_section(m);
  h += samples_section(m);
  h += "<footer>Written by <code>myriad report</code> from <code>" + esc(m.path) +
       "</code>. Self-contained: nothing on this page is fetched.</footer>\n";
  h += "</main>\n</body>\n</html>\n";

  if (summary) {
    summary->records = m.records;
    summary->skipped_lines = m.malformed;
    summary->ignored_records = m.ignored;
  }
  return h;
}

ReportSummary write_report(const std::string& run_dir, const std::string& out_path) {
  ReportSummary summary;
  const std::string html = render_report(run_dir, &summary);
  summary.path = out_path.empty() ? (fs::path(run_dir) / "report.html").string() : out_path;
  write_file_atomic(summary.path, html);
  return summary;
}

}  // namespace myriad

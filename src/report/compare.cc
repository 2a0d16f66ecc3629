// Several runs on one page: see compare.h.
#include "report/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "report/curve.h"
#include "report/format.h"
#include "report/metrics.h"
#include "report/page.h"
#include "report/svg.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace report;

constexpr size_t kMaxDifferingFields = 40;

struct Run {
  std::string dir, label;
  Metrics m;
  std::map<std::string, std::string> fields;  // config.json and train.json, flattened: "train.lr" -> "0.004"
};

// Every leaf of a JSON object as "prefix.key.sub" -> its JSON text (arrays as one value).
void flatten_leaves(const json& j, const std::string& prefix, std::map<std::string, std::string>* out) {
  for (const auto& [k, v] : j.items()) {
    const std::string key = prefix + "." + k;
    if (v.is_object())
      flatten_leaves(v, key, out);
    else
      (*out)[key] = v.is_string() ? v.get<std::string>() : v.dump();
  }
}

std::string cell(double v, const char* f = "%.4g") {
  return std::isfinite(v) ? sfmt(f, v) : std::string("-");
}

// The mean over the run of each layer's max violation, worst layer (NaN without MoE records).
double worst_mean_violation(const Metrics& m) {
  double worst = kNaN;
  for (const auto& [layer, c] : m.violation)
    if (!c.empty() && !(c.mean_y() <= worst)) worst = c.mean_y();
  return worst;
}

double last_worst_violation(const Metrics& m) {
  double worst = kNaN;
  for (const auto& [layer, l] : m.last_load)
    if (l.max_violation && !(*l.max_violation <= worst)) worst = *l.max_violation;
  return worst;
}

double last_dead_experts(const Metrics& m) {
  double dead = 0;
  bool any = false;
  for (const auto& [layer, l] : m.last_load)
    if (l.dead_experts) dead += *l.dead_experts, any = true;
  return any ? dead : kNaN;
}

std::string summary_table(const std::vector<Run>& runs, bool moe) {
  std::string s =
      "<table>\n<tr><th>run</th><th>last step</th><th>train loss (last)</th><th>best val loss</th>"
      "<th>val loss (last)</th><th>tokens/s (mean)</th>";
  if (moe)
    s += "<th>mean max violation, worst layer</th><th>max violation at the end, worst layer</th>"
         "<th>dead experts at the end</th>";
  s += "</tr>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Metrics& m = runs[i].m;
    s += "<tr><td><span style=\"color:" + std::string(palette(i)) + "\">&#9632;</span> " + esc(runs[i].label) +
         "</td><td class=\"n\">" + fmt_step(m.last_step) + "</td><td class=\"n\">" +
         (m.loss.empty() ? "-" : cell(m.loss.last().y)) + "</td><td class=\"n\">" +
         (m.best_val ? cell(m.best_val->y) + " (step " + fmt_step(m.best_val->x) + ")" : "-") +
         "</td><td class=\"n\">" + (m.val_loss.empty() ? "-" : cell(m.val_loss.last().y)) + "</td><td class=\"n\">" +
         (m.tokens_per_s.empty() ? "-" : fmt_value(m.tokens_per_s.mean_y())) + "</td>";
    if (moe)
      s += "<td class=\"n\">" + cell(worst_mean_violation(m), "%.3f") + "</td><td class=\"n\">" +
           cell(last_worst_violation(m), "%.3f") + "</td><td class=\"n\">" + cell(last_dead_experts(m), "%.0f") +
           "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

// The configuration fields whose values are not the same in every run (absent counts as a value).
std::string differences_table(const std::vector<Run>& runs) {
  std::set<std::string> keys;
  for (const Run& r : runs)
    for (const auto& [k, v] : r.fields) keys.insert(k);
  std::string rows;
  size_t n = 0, more = 0;
  for (const std::string& k : keys) {
    std::vector<const std::string*> values;
    for (const Run& r : runs) {
      const auto it = r.fields.find(k);
      values.push_back(it == r.fields.end() ? nullptr : &it->second);
    }
    const bool same = std::all_of(values.begin(), values.end(), [&](const std::string* v) {
      return (v == nullptr) == (values[0] == nullptr) && (v == nullptr || *v == *values[0]);
    });
    if (same) continue;
    if (n++ >= kMaxDifferingFields) {
      ++more;
      continue;
    }
    rows += "<tr><th><code>" + esc(k) + "</code></th>";
    for (const std::string* v : values) rows += "<td>" + (v ? esc(cut(*v, 80)) : std::string("(absent)")) + "</td>";
    rows += "</tr>\n";
  }
  if (rows.empty()) return missing("config.json and train.json are the same in every run (or absent).");
  std::string s = "<table>\n<tr><th>field</th>";
  for (const Run& r : runs) s += "<th>" + esc(r.label) + "</th>";
  s += "</tr>\n" + rows + "</table>\n";
  if (more > 0) s += missing(counted(int64_t(more), "more field differs", "more fields differ") + " (not shown).");
  return s;
}

// One run's curve in an overlay: its moving average (every point while short), no envelope band, so that several
// runs stay readable on one chart.
void add_run_curve(LineChart* c, const Frame& f, const Curve& curve, const std::string& name, const std::string& color,
                   bool points) {
  if (curve.empty()) return;
  if (points || curve.count() < 50) {
    add_points(c, curve, name, color);
    return;
  }
  c->lines.push_back({name, color, curve.smoothed(f.breaks), 2.0, 1, true, false, false, true, 0});
}

std::string overlay(const std::vector<Run>& runs, const Frame& f, const Curve Metrics::*series, const char* title,
                    const char* y_label, bool zero, bool points, const std::string& caption) {
  if (std::all_of(runs.begin(), runs.end(), [&](const Run& r) { return (r.m.*series).empty(); }))
    return "<h2>" + esc(title) + "</h2>\n" + missing(std::string("No run has ") + y_label + " values.");
  LineChart c;
  c.title = title;
  c.y.label = y_label;
  c.y.zero = zero;
  double lo = kInf, hi = -kInf;
  for (const Run& r : runs)
    if (!(r.m.*series).empty()) lo = std::min(lo, (r.m.*series).min_y()), hi = std::max(hi, (r.m.*series).max_y());
  c.y.log = !zero && lo > 0 && hi / lo >= 3;
  for (size_t i = 0; i < runs.size(); ++i) add_run_curve(&c, f, runs[i].m.*series, runs[i].label, palette(i), points);
  return "<h2>" + esc(title) + "</h2>\n" + figure(render_line_chart(c, f), caption);
}

}  // namespace

std::string render_comparison(const std::vector<std::string>& run_dirs, ComparisonSummary* summary) {
  MYRIAD_REQUIRE(run_dirs.size() >= 2, kValue, "a comparison needs at least two run directories, got ",
                 run_dirs.size());
  std::vector<Run> runs(run_dirs.size());
  std::map<std::string, int> name_count;
  for (const std::string& d : run_dirs) ++name_count[run_name(d)];
  double first = kInf, last = -kInf;
  int64_t records = 0, malformed = 0;
  std::string warnings;
  for (size_t i = 0; i < runs.size(); ++i) {
    Run& r = runs[i];
    r.dir = run_dirs[i];
    r.label = name_count[run_name(r.dir)] > 1 ? r.dir : run_name(r.dir);
    r.m = read_metrics(r.dir);
    first = std::min(first, r.m.first_step);
    last = std::max(last, r.m.last_step);
    records += r.m.records;
    malformed += r.m.malformed;
    if (r.m.malformed > 0)
      warnings +=
          "<p class=\"warn\">" + esc(r.label) + ": " + counted(r.m.malformed, "malformed line", "malformed lines") +
          " of metrics.jsonl skipped (the first is line " + std::to_string(r.m.first_malformed_line) + ").</p>\n";
    for (const char* file : {"config.json", "train.json"}) {
      std::string note;
      if (const auto j = read_json(fs::path(r.dir) / file, &note))
        flatten_leaves(*j, file == std::string("config.json") ? "config" : "train", &r.fields);
      if (!note.empty()) warnings += "<p class=\"warn\">" + esc(r.label) + ": " + esc(note) + "</p>\n";
    }
  }
  const Frame f = step_frame(first, last);
  const bool moe = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return r.m.n_moe > 0; });

  std::string h = page_begin(std::to_string(runs.size()) + " runs \xE2\x80\x94 myriad comparison");
  h += "<h1>" + std::to_string(runs.size()) + " runs side by side</h1>\n<p class=\"sub\">";
  for (size_t i = 0; i < runs.size(); ++i) h += std::string(i ? ", " : "") + "<code>" + esc(runs[i].dir) + "</code>";
  h += ": " + counted(records, "record") + " in their metrics.jsonl, steps " + fmt_step(first) + " to " +
       fmt_step(last) + ".</p>\n" + warnings;
  h += "<h2>Summary</h2>\n" + summary_table(runs, moe);
  h += "<h2>What differs</h2>\n" + differences_table(runs);
  h += overlay(runs, f, &Metrics::loss, "Training loss", "train loss", false, false,
               "Each run's training loss per step (a moving average once a run has many points).");
  h += overlay(runs, f, &Metrics::val_loss, "Validation loss", "val loss", false, true,
               "The eval records' validation loss.");
  if (moe) {
    h += overlay(runs, f, &Metrics::violation_max, "MoE load imbalance, worst layer", "max violation", true, false,
                 "max_violation of the worst MoE layer at each step: how far its most loaded expert is above a "
                 "balanced load (0 is perfect).");
    h += overlay(runs, f, &Metrics::dead_experts, "Dead experts", "dead experts (all layers)", true, false,
                 "Experts that received no token at the step, summed over the MoE layers.");
  }
  h += "<footer>Written by <code>myriad report</code> from " + counted(int64_t(runs.size()), "run") +
       ". Self-contained: nothing on this page is fetched.</footer>\n</main>\n</body>\n</html>\n";
  if (summary) {
    summary->records = records;
    summary->skipped_lines = malformed;
  }
  return h;
}

ComparisonSummary write_comparison(const std::vector<std::string>& run_dirs, const std::string& out_path) {
  ComparisonSummary summary;
  const std::string html = render_comparison(run_dirs, &summary);
  if (out_path.empty()) {
    fs::path parent = fs::path(run_dirs[0]).lexically_normal();
    if (parent.filename().empty()) parent = parent.parent_path();
    parent = parent.parent_path();
    summary.path = (parent.empty() ? fs::path("compare.html") : parent / "compare.html").string();
  } else {
    summary.path = out_path;
  }
  write_file_atomic(summary.path, html);
  return summary;
}

}  // namespace myriad

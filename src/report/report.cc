// Training report: metrics.jsonl (docs/training.md) -> one self-contained HTML page with inline SVG charts.
//
// Reading: one JSON object per line. A line that is not JSON, not an object, or lacks a string "type" or a
// numeric "step" is malformed: skipped, counted, and named on the page (a run killed mid-write leaves a torn last
// line). Records of an unknown type are counted apart. A missing or mistyped field leaves that point out of its
// curve; nothing else.
//
// Memory stays bounded however long the run: every curve is kept in step buckets that double in width (pairs
// merge) when there are more than kMaxBuckets, with each bucket's count, sums and its min and max points. A curve
// is drawn as its envelope (min and max per bucket: every spike stays visible, <= ~1000 points) under a moving
// average of the bucket means. The step x expert heatmap buckets the same way; samples keep the last kMaxSamples.
//
// "skipped" in a step record is the trainer's running count of skipped optimizer steps (a resume from an earlier
// checkpoint may rewind it): where it rises, steps were skipped. "time_s" restarts at 0 in a resumed process, so
// the wall time adds up the clock's runs.
// Expert load is shown as load / mean load of its layer at that step: 1 is perfectly balanced, 0 a dead expert.
//
// Leaves out: anything the page would have to fetch (no scripts, fonts, images or links), comparing runs.
#include "report/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "model/accounting.h"
#include "model/config.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxBuckets = 512;          // per curve; each bucket draws as <= 2 points (its min and max)
constexpr size_t kMaxTimelineColumns = 160;  // step columns of the step x expert heatmap
constexpr size_t kMaxHeatCells = 24000;      // fewer step columns for very many experts: keeps the page small
constexpr size_t kMaxTooltipCells = 6000;    // per heatmap; beyond that cells get no <title>
constexpr size_t kMaxSamples = 100;          // the last ones are kept
constexpr size_t kMaxSampleBytes = 2000;     // per prompt and per text
constexpr size_t kMaxLayerLines = 8;         // more MoE layers: the mean and the worst layer instead of one each
constexpr size_t kMaxStageMarks = 64;        // stage switches drawn
constexpr size_t kMaxMarkerPoints = 80;      // curves with fewer points get a dot on each

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------------------
// Formatting

[[gnu::format(printf, 1, 2)]] std::string sfmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  const int n = std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  if (n < 0) return "";
  if (size_t(n) < sizeof(buf)) return std::string(buf, size_t(n));
  std::string s(size_t(n) + 1, '\0');
  va_start(ap, f);
  std::vsnprintf(s.data(), s.size(), f, ap);
  va_end(ap);
  s.resize(size_t(n));
  return s;
}

// SVG coordinate: one decimal.
std::string px(double v) {
  return sfmt("%.1f", v);
}

// HTML text and attribute escaping; C0 control characters other than tab and newline become U+FFFD.
std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (const char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '\n':
      case '\t':
        out += ch;
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
          out += "\xEF\xBF\xBD";
        else
          out += ch;
    }
  }
  return out;
}

// Cuts `s` to at most `max` bytes at a UTF-8 character boundary, marking the cut.
std::string truncate_utf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s + " \xE2\x80\xA6 (cut at " + std::to_string(max) + " bytes)";
}

// 1234567 -> "1,234,567"
std::string grouped(double v) {
  const bool neg = v < 0;
  std::string s = sfmt("%.0f", std::abs(v));
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return neg ? "-" + s : s;
}

// `v` with as many decimals as `step` needs (steps are 1, 2 or 5 x 10^k).
std::string fixed(double v, double step) {
  const int dec = step > 0 ? std::clamp(int(-std::floor(std::log10(step) + 1e-9)), 0, 6) : 0;
  return sfmt("%.*f", dec, v);
}

// An axis tick: `step` is the tick spacing, `span` the largest |tick| of the axis, so every tick of one axis
// has one style: 0.2e-3 ... 1.0e-3 for learning rates, 2k ... 10k for throughput, 2.5 ... 4.0 for losses.
std::string fmt_tick(double v, double step, double span) {
  step = std::abs(step);
  if (std::abs(v) <= step * 1e-9) return "0";
  span = std::max(std::abs(span), std::abs(v));
  if (span >= 1e4) {
    static const char* const kSuffix[] = {"k", "M", "G", "T", "P"};
    const int u = std::clamp(int(std::floor(std::log10(span) / 3 + 1e-9)), 1, 5);
    const double unit = std::pow(1000.0, u);
    return fixed(v / unit, step / unit) + kSuffix[u - 1];
  }
  if (span < 1e-2) {
    const int e = int(std::floor(std::log10(span) + 1e-9));
    const double unit = std::pow(10.0, e);
    return fixed(v / unit, step / unit) + "e" + std::to_string(e);
  }
  return fixed(v, step);
}

// A value for the summary: 3.214, 0.0012, 5.3k, 12.1M.
std::string fmt_value(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::abs(v);
  if (a >= 1e4) {
    static const char* const kSuffix[] = {"k", "M", "G", "T", "P", "E"};
    const int u = std::clamp(int(std::floor(std::log10(a) / 3 + 1e-9)), 1, 6);
    return sfmt("%.3g%s", v / std::pow(1000.0, u), kSuffix[u - 1]);
  }
  return sfmt("%.4g", v);
}

std::string fmt_step(double step) {
  return step == std::floor(step) && std::abs(step) < 1e15 ? grouped(step) : sfmt("%g", step);
}

// "1 sample", "3 samples"
std::string counted(int64_t n, const std::string& one, const std::string& many = "") {
  return grouped(double(n)) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

std::string fmt_duration(double s) {
  if (!(s >= 0)) return "-";
  const auto t = int64_t(std::llround(s));
  if (t < 60) return sfmt("%llds", static_cast<long long>(t));
  if (t < 3600) return sfmt("%lldm %02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return sfmt("%lldh %02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t % 3600 / 60));
}

// ---------------------------------------------------------------------------------------------------------------
// Bounded curves over steps

struct Point {
  double x = 0, y = 0;
};

int64_t floor_half(int64_t k) {
  return k >= 0 ? k / 2 : -((1 - k) / 2);
}

class Curve {
 public:
  struct Bucket {
    int64_t n = 0;
    double sum_x = 0, sum_y = 0;
    Point lo, hi;  // the points with the smallest and the largest y
  };

  void add(double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y)) return;
    merge(buckets_[int64_t(std::floor(x / width_))], Bucket{1, x, y, {x, y}, {x, y}});
    min_y_ = std::min(min_y_, y);
    max_y_ = std::max(max_y_, y);
    sum_y_ += y;
    ++count_;
    last_ = {x, y};
    while (buckets_.size() > kMaxBuckets) coarsen();
  }

  bool empty() const { return count_ == 0; }
  int64_t count() const { return count_; }
  Point last() const { return last_; }
  double min_y() const { return min_y_; }
  double max_y() const { return max_y_; }
  double mean_y() const { return count_ ? sum_y_ / double(count_) : kNaN; }
  double bucket_width() const { return width_; }
  bool exact() const { return size_t(count_) == buckets_.size(); }

  // Every point while each bucket holds one; otherwise each bucket's min and max, in step order.
  std::vector<Point> envelope() const {
    std::vector<Point> out;
    out.reserve(2 * buckets_.size());
    for (const auto& [k, b] : buckets_) {
      if (b.n == 1 || (b.lo.x == b.hi.x && b.lo.y == b.hi.y)) {
        out.push_back(b.lo);
      } else if (b.lo.x <= b.hi.x) {
        out.push_back(b.lo);
        out.push_back(b.hi);
      } else {
        out.push_back(b.hi);
        out.push_back(b.lo);
      }
    }
    return out;
  }

  // Bucket means under a centred moving average over ~1/100 of the buckets, weighted by their counts; the
  // window does not reach across `breaks` (sorted steps: the stage switches, where throughput jumps).
  std::vector<Point> smoothed(const std::vector<double>& breaks) const {
    std::vector<const Bucket*> bs;
    std::vector<size_t> seg;
    for (const auto& [k, b] : buckets_) {
      bs.push_back(&b);
      const double x = b.sum_x / double(b.n);
      seg.push_back(size_t(std::upper_bound(breaks.begin(), breaks.end(), x) - breaks.begin()));
    }
    const size_t half = bs.size() / 100;
    std::vector<Point> out;
    for (size_t i = 0; i < bs.size(); ++i) {
      const size_t a = i >= half ? i - half : 0, z = std::min(bs.size() - 1, i + half);
      double n = 0, s = 0;
      for (size_t j = a; j <= z; ++j) {
        if (seg[j] != seg[i]) continue;
        n += double(bs[j]->n);
        s += bs[j]->sum_y;
      }
      out.push_back({bs[i]->sum_x / double(bs[i]->n), s / n});
    }
    return out;
  }

 private:
  static void merge(Bucket& a, const Bucket& b) {
    if (a.n == 0) {
      a = b;
      return;
    }
    a.n += b.n;
    a.sum_x += b.sum_x;
    a.sum_y += b.sum_y;
    if (b.lo.y < a.lo.y) a.lo = b.lo;
    if (b.hi.y > a.hi.y) a.hi = b.hi;
  }
  void coarsen() {
    std::map<int64_t, Bucket> merged;
    for (const auto& [k, b] : buckets_) merge(merged[floor_half(k)], b);
    buckets_.swap(merged);
    width_ *= 2;
  }

  double width_ = 1;  // steps per bucket
  std::map<int64_t, Bucket> buckets_;
  int64_t count_ = 0;
  double min_y_ = kInf, max_y_ = -kInf, sum_y_ = 0;
  Point last_;
};

// Expert load of one MoE layer over training, in step columns that double in width like Curve's buckets; each
// column holds the sum over its records of load / mean load per expert.
struct Timeline {
  struct Column {
    int64_t n = 0;
    std::vector<double> sum;  // [E]
  };
  int64_t layer = -1;
  size_t experts = 0;
  double width = 1;
  std::map<int64_t, Column> cols;

  void add(double step, const std::vector<double>& ratio_E) {
    Column& c = cols[int64_t(std::floor(step / width))];
    if (c.sum.empty()) c.sum.assign(experts, 0.0);
    for (size_t e = 0; e < experts; ++e) c.sum[e] += ratio_E[e];
    ++c.n;
    while (cols.size() > kMaxTimelineColumns) coarsen();
  }
  void coarsen() {
    std::map<int64_t, Column> merged;
    for (auto& [k, c] : cols) {
      Column& m = merged[floor_half(k)];
      if (m.sum.empty()) m.sum.assign(experts, 0.0);
      for (size_t e = 0; e < experts; ++e) m.sum[e] += c.sum[e];
      m.n += c.n;
    }
    cols.swap(merged);
    width *= 2;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// metrics.jsonl

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

  std::vector<StageMark> stages;       // "stage" records
  std::vector<StageMark> step_stages;  // where (stage, seq_len) of the step records changes
  std::map<int64_t, StageTotals> stage_totals;

  std::deque<Sample> samples;

  std::map<int64_t, Curve> violation;  // per MoE layer
  Curve violation_mean, violation_max, dead_experts;
  std::map<int64_t, LayerLast> last_load;
  Timeline timeline;
};

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
}

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

// ---------------------------------------------------------------------------------------------------------------
// Axes and charts

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"};
constexpr const char* kStageColor = "#6a3d9a";
// Every chart has its plot between kLeft and kWidth - kRight, so the step axes of all charts line up; the right
// margin holds a second y axis or a heatmap's colour bar.
constexpr double kWidth = 900, kLeft = 84, kRight = 110, kPlotH = 230, kBottom = 44;

double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

// Ticks every `step` from lo to hi (multiples of step), with float noise rounded away.
std::vector<double> linear_ticks(double lo, double hi, double step) {
  std::vector<double> t;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; i < 100; ++i) {
    const double v = std::round((first + i * step) / step) * step;
    if (v > hi + step * 1e-9) break;
    t.push_back(v);
  }
  return t;
}

struct Axis {
  std::string label;
  bool log = false;      // log scale (only used when every value is > 0)
  bool percent = false;  // values are fractions, shown as %
  bool zero = false;     // a linear range includes 0
  // Resolved by resolve():
  double lo = 0, hi = 1, step = 0;  // step 0: each (log) tick is formatted by itself
  std::vector<double> ticks;

  void resolve(double dmin, double dmax) {
    if (!std::isfinite(dmin) || !std::isfinite(dmax)) {
      dmin = 0;
      dmax = 1;
    }
    if (log && dmin > 0) {
      const double pad = std::max(1.03, std::pow(dmax / dmin, 0.04));
      lo = dmin / pad;
      hi = dmax * pad;
      // Decades, or 1-2-5 / 1-2-3-5 / 1..9 within them, whichever first gives 4 to 12 ticks; a narrow range
      // gets linear ticks placed on the log scale.
      const int e0 = int(std::floor(std::log10(lo))), e1 = int(std::ceil(std::log10(hi)));
      const int every = std::max(1, (e1 - e0 + 11) / 12);
      step = 0;
      for (const std::vector<double>& mantissas :
           {std::vector<double>{1}, {1, 2, 5}, {1, 2, 3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
        ticks.clear();
        for (int e = e0; e <= e1; ++e)
          for (double mt : mantissas) {
            const double v = mt * std::pow(10.0, e);
            if (v >= lo && v <= hi && (mantissas.size() > 1 || (e - e0) % every == 0)) ticks.push_back(v);
          }
        if (ticks.size() >= 4 && ticks.size() <= 12) return;
      }
      step = nice_step(hi - lo, 4);
      ticks = linear_ticks(lo, hi, step);
      return;
    }
    log = false;
    lo = dmin;
    hi = dmax;
    if (zero) {
      lo = std::min(lo, 0.0);
      hi = std::max(hi, 0.0);
    }
    if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {
      const double pad = hi != 0 ? std::abs(hi) * 0.1 : 1;
      if (!(zero && lo == 0)) lo -= pad;
      hi += pad;
    }
    step = nice_step(hi - lo, 5);
    lo = std::floor(lo / step + 1e-9) * step;
    hi = std::ceil(hi / step - 1e-9) * step;
    ticks = linear_ticks(lo, hi, step);
  }

  double map(double v, double p0, double p1) const {  // value -> pixel (p0 at lo, p1 at hi)
    const double t = log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }

  std::string tick_label(double v) const {
    const double k = percent ? 100 : 1;
    double span = 0;
    for (double t : ticks) span = std::max(span, std::abs(t) * k);
    const std::string s = step > 0 ? fmt_tick(v * k, step * k, span) : fmt_tick(v * k, v * k, v * k);
    return percent ? s + "%" : s;
  }
};

// What every step chart shares: the step axis and the stage switches.
struct Frame {
  Axis x;
  std::vector<StageMark> stages;
  std::vector<double> breaks;  // the steps of the stage switches, sorted
};

std::string stage_label(const StageMark& s) {
  std::string label = s.stage >= 0 ? "stage " + std::to_string(s.stage) : "stage";
  if (s.seq_len >= 0) label += " \xC2\xB7 seq " + std::to_string(s.seq_len);
  return label;
}

double text_width(const std::string& s, double font_px) {  // a rough estimate for layout
  double n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n * font_px * 0.58;
}

std::string svg_open(double w, double h, const std::string& title) {
  return sfmt(R"(<svg viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label=")", w, h, w, h) +
         esc(title) + R"(" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" )" +
         R"(font-size="12">)" + "\n";
}

std::string svg_text(double x, double y, const std::string& s, const std::string& attrs = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"" + (attrs.empty() ? "" : " " + attrs) + ">" + esc(s) +
         "</text>\n";
}

// Vertical dashed lines at the stage switches, with their labels staggered on two rows from `label_y`.
std::string stage_lines(const Frame& f, double x0, double x1, double y0, double y1, double label_y) {
  std::string s, labels;
  for (size_t i = 0; i < f.stages.size(); ++i) {
    const StageMark& st = f.stages[i];
    if (st.step < f.x.lo || st.step > f.x.hi) continue;
    const double x = f.x.map(st.step, x0, x1);
    s += "<line x1=\"" + px(x) + "\" y1=\"" + px(y0) + "\" x2=\"" + px(x) + "\" y2=\"" + px(y1) + "\" stroke=\"" +
         kStageColor + "\" stroke-width=\"1.2\" stroke-dasharray=\"5 4\"/>\n";
    const std::string label = stage_label(st);
    const double y = label_y + double(i % 2) * 13;
    const bool left = x + 4 + text_width(label, 11) > x1;
    labels +=
        svg_text(left ? x - 4 : x + 4, y, label,
                 std::string("font-size=\"11\" fill=\"") + kStageColor + "\"" + (left ? " text-anchor=\"end\"" : "") +
                     " stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\"");
  }
  return s + labels;
}

std::string x_axis(const Frame& f, double x0, double x1, double y1, const std::string& label) {
  std::string s;
  for (double t : f.x.ticks) {
    const double x = f.x.map(t, x0, x1);
    s += "<line x1=\"" + px(x) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x) + "\" y2=\"" + px(y1 + 5) +
         "\" stroke=\"#666\"/>\n";
    s += svg_text(x, y1 + 18, f.x.tick_label(t), "text-anchor=\"middle\" fill=\"#444\"");
  }
  s += svg_text((x0 + x1) / 2, y1 + 36, label, "text-anchor=\"middle\" fill=\"#444\"");
  return s;
}

struct Line {
  std::string name, color;
  std::vector<Point> pts;
  double width = 1.8, opacity = 1;
  bool path = true, markers = false, dashed = false, legend = true;
  int axis = 0;  // 0: left, 1: right
};

struct Events {  // steps marked with a triangle on the x axis (skipped steps)
  std::string name, color;
  std::vector<double> xs;
};

struct LineChart {
  std::string title;
  Axis y, y2;
  std::vector<Line> lines;
  Events events;
};

struct LegendItem {
  std::string name, color;
  bool line = true, marker = false, triangle = false;
  double opacity = 1;
};

// Legend items flowed in rows under the title; returns the SVG and sets `height`.
std::string legend(const std::vector<LegendItem>& items, double x0, double x1, double y, double* height) {
  std::string s;
  double x = x0, row = 0;
  for (const LegendItem& it : items) {
    const double w = 30 + text_width(it.name, 12) + 18;
    if (x > x0 && x + w > x1) {
      x = x0;
      ++row;
    }
    const double cy = y + row * 18;
    if (it.line)
      s += "<line x1=\"" + px(x) + "\" y1=\"" + px(cy) + "\" x2=\"" + px(x + 22) + "\" y2=\"" + px(cy) +
           "\" stroke=\"" + it.color + "\" stroke-width=\"2.5\" stroke-opacity=\"" + sfmt("%.2f", it.opacity) +
           "\"/>\n";
    if (it.marker)
      s += "<circle cx=\"" + px(x + 11) + "\" cy=\"" + px(cy) + "\" r=\"3.5\" fill=\"" + it.color + "\"/>\n";
    if (it.triangle)
      s += "<path d=\"M" + px(x + 11) + " " + px(cy - 5) + "L" + px(x + 6) + " " + px(cy + 4) + "L" + px(x + 16) + " " +
           px(cy + 4) + "Z\" fill=\"" + it.color + "\"/>\n";
    s += svg_text(x + 28, cy + 4, it.name, "fill=\"#333\"");
    x += w;
  }
  *height = items.empty() ? 0 : (row + 1) * 18;
  return s;
}

std::string render_line_chart(LineChart c, const Frame& f) {
  const bool has_y2 = std::any_of(c.lines.begin(), c.lines.end(), [](const Line& l) { return l.axis == 1; });
  for (int a = 0; a < 2; ++a) {
    Axis& ax = a == 0 ? c.y : c.y2;
    double lo = kInf, hi = -kInf, lo_pos = kInf;
    for (const Line& l : c.lines) {
      if (l.axis != a) continue;
      for (const Point& p : l.pts) {
        lo = std::min(lo, p.y);
        hi = std::max(hi, p.y);
        if (p.y > 0) lo_pos = std::min(lo_pos, p.y);
      }
    }
    if (ax.log && !(lo > 0)) ax.log = false;
    ax.resolve(ax.log ? lo_pos : lo, hi);
  }
  const double x0 = kLeft, x1 = kWidth - kRight;

  std::vector<LegendItem> items;
  for (const Line& l : c.lines)
    if (l.legend) items.push_back({l.name, l.color, l.path, l.markers, false, l.opacity});
  if (!c.events.name.empty()) items.push_back({c.events.name, c.events.color, false, false, true, 1});
  double legend_h = 0;
  const std::string legend_svg = legend(items, x0, x1, 44, &legend_h);
  const double y0 = 44 + legend_h + 6, y1 = y0 + kPlotH, height = y1 + kBottom;

  std::string s = svg_open(kWidth, height, c.title);
  s += svg_text(x0, 22, c.title, "font-size=\"15\" font-weight=\"600\" fill=\"#222\"");
  s += legend_svg;
  // Grid and y ticks.
  for (int a = 0; a < (has_y2 ? 2 : 1); ++a) {
    const Axis& ax = a == 0 ? c.y : c.y2;
    for (double t : ax.ticks) {
      const double y = ax.map(t, y1, y0);
      if (a == 0)
        s += "<line x1=\"" + px(x0) + "\" y1=\"" + px(y) + "\" x2=\"" + px(x1) + "\" y2=\"" + px(y) +
             "\" stroke=\"#e8e8e8\"/>\n";
      s += svg_text(a == 0 ? x0 - 7 : x1 + 7, y + 4, ax.tick_label(t),
                    std::string("fill=\"#444\" text-anchor=\"") + (a == 0 ? "end" : "start") + "\"");
    }
    const double ly = (y0 + y1) / 2, lx = a == 0 ? 18 : x1 + 66;
    s += svg_text(lx, ly, ax.label + (ax.log ? " (log)" : ""),
                  "text-anchor=\"middle\" fill=\"#444\" transform=\"rotate(-90 " + px(lx) + " " + px(ly) + ")\"");
  }
  s += x_axis(f, x0, x1, y1, "step");
  s += stage_lines(f, x0, x1, y0, y1, y0 + 12);
  // Curves.
  for (const Line& l : c.lines) {
    const Axis& ax = l.axis == 0 ? c.y : c.y2;
    std::string d, dots;
    bool pen = false;
    for (const Point& p : l.pts) {
      if (ax.log && !(p.y > 0)) {
        pen = false;
        continue;
      }
      const double x = f.x.map(p.x, x0, x1), y = ax.map(p.y, y1, y0);
      if (l.path) {
        d += (pen ? "L" : "M") + px(x) + " " + px(y);
        pen = true;
      }
      if (l.markers)
        dots += "<circle cx=\"" + px(x) + "\" cy=\"" + px(y) + "\" r=\"3\" fill=\"" + l.color +
                "\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n";
    }
    if (!d.empty())
      s += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + l.color + "\" stroke-width=\"" + sfmt("%.1f", l.width) +
           "\" stroke-opacity=\"" + sfmt("%.2f", l.opacity) + "\" stroke-linejoin=\"round\"" +
           (l.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    s += dots;
  }
  for (double e : c.events.xs) {
    const double x = f.x.map(e, x0, x1);
    s += "<path d=\"M" + px(x) + " " + px(y1 - 9) + "L" + px(x - 5) + " " + px(y1) + "L" + px(x + 5) + " " + px(y1) +
         "Z\" fill=\"" + c.events.color + "\"/>\n";
  }
  s += "<rect x=\"" + px(x0) + "\" y=\"" + px(y0) + "\" width=\"" + px(x1 - x0) + "\" height=\"" + px(y1 - y0) +
       "\" fill=\"none\" stroke=\"#999\"/>\n";
  s += "</svg>\n";
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Heatmaps of load / mean load

// RdBu, centred on 1 (balanced), log2 scale clamped to [1/4, 4]; 0 (a dead expert) is the deepest blue.
double load_t(double ratio) {
  if (!(ratio > 0)) return -1;
  return std::clamp(std::log2(ratio) / 2, -1.0, 1.0);
}

std::string load_color(double ratio) {
  if (std::isnan(ratio)) return "#d9d9d9";
  static const int kStops[7][3] = {{33, 102, 172},  {103, 169, 207}, {209, 229, 240}, {247, 247, 247},
                                   {253, 219, 199}, {239, 138, 98},  {178, 24, 43}};
  const double u = (load_t(ratio) + 1) * 3;  // 0..6
  const int i = std::clamp(int(std::floor(u)), 0, 5);
  const double w = u - i;
  int rgb[3];
  for (int k = 0; k < 3; ++k) rgb[k] = int(std::lround(kStops[i][k] * (1 - w) + kStops[i + 1][k] * w));
  return sfmt("#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

struct Heatmap {
  std::string title, x_label, y_label;
  size_t rows = 0, cols = 0;
  std::vector<double> ratio;  // [rows x cols], NaN where missing
  std::vector<std::string> row_labels;
  std::vector<double> col_x0, col_x1;  // step range per column; empty: columns are experts 0..cols-1
  std::function<std::string(size_t, size_t)> tooltip;
  bool numbers = false;  // print the ratio in each cell
};

// The smallest of 1, 2, 5, 10, 20, 50, ... that is >= n: label every so many rows or columns.
size_t nice_count(double n) {
  for (size_t m = 1;; m *= 10)
    for (size_t k : {1, 2, 5})
      if (double(k * m) >= n) return k * m;
}

std::string render_heatmap(const Heatmap& h, const Frame* f) {
  const bool time_axis = !h.col_x0.empty();
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = time_axis ? 62 : 44;
  const double rh = std::min(36.0, 420.0 / double(std::max<size_t>(h.rows, 1)));
  const double y1 = y0 + rh * double(h.rows), bh = std::clamp(y1 - y0, 90.0, 200.0);
  const double height = std::max(y1, y0 + bh) + 50;
  const double cw = (x1 - x0) / double(std::max<size_t>(h.cols, 1));
  std::string s = svg_open(kWidth, height, h.title);
  s += svg_text(x0, 22, h.title, "font-size=\"15\" font-weight=\"600\" fill=\"#222\"");
  const bool tips = h.tooltip && h.rows * h.cols <= kMaxTooltipCells;
  s += "<g shape-rendering=\"crispEdges\">\n";
  for (size_t r = 0; r < h.rows; ++r) {
    for (size_t c = 0; c < h.cols; ++c) {
      const double v = h.ratio[r * h.cols + c];
      double cx0 = x0 + cw * double(c), cx1 = cx0 + cw;
      if (time_axis) {
        cx0 = f->x.map(std::max(h.col_x0[c], f->x.lo), x0, x1);
        cx1 = f->x.map(std::min(h.col_x1[c], f->x.hi), x0, x1);
      }
      const double cy = y0 + rh * double(r);
      s += "<rect x=\"" + px(cx0) + "\" y=\"" + px(cy) + "\" width=\"" + px(std::max(cx1 - cx0, 0.6) + 0.4) +
           "\" height=\"" + px(rh + 0.4) + "\" fill=\"" + load_color(v) + "\"";
      s += tips ? "><title>" + esc(h.tooltip(r, c)) + "</title></rect>\n" : "/>\n";
      if (h.numbers && !std::isnan(v))
        s += svg_text((cx0 + cx1) / 2, cy + rh / 2 + 4, sfmt("%.2f", v),
                      std::string("font-size=\"10\" text-anchor=\"middle\" fill=\"") +
                          (std::abs(load_t(v)) > 0.55 ? "#ffffff" : "#222222") + "\"");
    }
  }
  s += "</g>\n";
  s += "<rect x=\"" + px(x0) + "\" y=\"" + px(y0) + "\" width=\"" + px(x1 - x0) + "\" height=\"" + px(y1 - y0) +
       "\" fill=\"none\" stroke=\"#999\"/>\n";
  // Row labels, thinned to >= 12 px apart.
  const size_t every = nice_count(12.0 / rh);
  for (size_t r = 0; r < h.rows; r += every)
    s += svg_text(x0 - 6, y0 + rh * (double(r) + 0.5) + 4, h.row_labels[r], "text-anchor=\"end\" fill=\"#444\"");
  const double ly = (y0 + y1) / 2;
  s += svg_text(16, ly, h.y_label, "text-anchor=\"middle\" fill=\"#444\" transform=\"rotate(-90 16 " + px(ly) + ")\"");
  // Columns: expert indices, or the step axis with the stage switches.
  if (time_axis) {
    s += x_axis(*f, x0, x1, y1, h.x_label);
    s += stage_lines(*f, x0, x1, y0 - 24, y1, y0 - 18);
  } else {
    const size_t step = nice_count(28.0 / cw);
    for (size_t c = 0; c < h.cols; c += step) {
      const double x = x0 + cw * (double(c) + 0.5);
      s += svg_text(x, y1 + 16, std::to_string(c), "text-anchor=\"middle\" fill=\"#444\"");
    }
    s += svg_text((x0 + x1) / 2, y1 + 36, h.x_label, "text-anchor=\"middle\" fill=\"#444\"");
  }
  // Colour bar: load / mean from 1/4 (or a dead expert) to 4.
  const double bx = x1 + 28, by0 = y0, slices = 48;
  s += svg_text(bx - 8, by0 - 12, "load / mean", "fill=\"#444\" font-size=\"11\"");
  s += "<g shape-rendering=\"crispEdges\">\n";
  for (int i = 0; i < int(slices); ++i) {
    const double t = 1 - 2 * (i + 0.5) / slices;
    s += "<rect x=\"" + px(bx) + "\" y=\"" + px(by0 + bh * i / slices) + "\" width=\"14\" height=\"" +
         px(bh / slices + 0.5) + "\" fill=\"" + load_color(std::exp2(2 * t)) + "\"/>\n";
  }
  s += "</g>\n";
  s += "<rect x=\"" + px(bx) + "\" y=\"" + px(by0) + "\" width=\"14\" height=\"" + px(bh) +
       "\" fill=\"none\" stroke=\"#999\"/>\n";
  const std::pair<double, const char*> kBar[] = {{4, "\xE2\x89\xA5 4\xC3\x97"},
                                                 {2, "2\xC3\x97"},
                                                 {1, "1\xC3\x97"},
                                                 {0.5, "0.5\xC3\x97"},
                                                 {0.25, "\xE2\x89\xA4 0.25\xC3\x97"}};
  for (const auto& [r, label] : kBar) {
    const double y = by0 + bh * (1 - load_t(r)) / 2;
    s += "<line x1=\"" + px(bx + 14) + "\" y1=\"" + px(y) + "\" x2=\"" + px(bx + 18) + "\" y2=\"" + px(y) +
         "\" stroke=\"#666\"/>\n";
    s += svg_text(bx + 21, y + 4, label, "fill=\"#444\" font-size=\"11\"");
  }
  s += "</svg>\n";
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// The page

const char* const kCss = R"(
body { margin: 0; background: #f6f6f4; color: #222;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width: 940px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 26px; margin: 0 0 2px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 16px 0 6px; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.sub { color: #666; margin: 0 0 14px; }
.warn { background: #fff4e0; border: 1px solid #e8b25c; border-radius: 5px; padding: 8px 12px; margin: 10px 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(165px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid #e2e2e2; border-radius: 6px; padding: 8px 12px; }
.card .k { color: #666; font-size: 12px; }
.card .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .d { color: #888; font-size: 12px; }
.cols { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
table { border-collapse: collapse; background: #fff; font-size: 13px; margin: 4px 0; }
th, td { border: 1px solid #e2e2e2; padding: 3px 9px; text-align: left; vertical-align: top; }
th { background: #f0f0ee; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 14px 0; background: #fff; border: 1px solid #e2e2e2; border-radius: 6px; padding: 10px; }
figcaption, .note { color: #666; font-size: 12.5px; margin: 4px 2px 0; }
svg { display: block; max-width: 100%; height: auto; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0 0; padding: 8px 10px; background: #fff;
  border: 1px solid #e2e2e2; border-radius: 5px; font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
table.samples { width: 100%; table-layout: fixed; }
table.samples td { white-space: pre-wrap; overflow-wrap: anywhere;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
table.samples td.prompt { color: #1d5a9e; }
footer { color: #888; font-size: 12px; margin-top: 40px; }
)";

std::string card(const std::string& key, const std::string& value, const std::string& detail = "") {
  return "<div class=\"card\"><div class=\"k\">" + esc(key) + "</div><div class=\"v\">" + esc(value) + "</div>" +
         (detail.empty() ? "" : "<div class=\"d\">" + esc(detail) + "</div>") + "</div>\n";
}

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return grouped(v.get<double>());
  if (v.is_number()) return sfmt("%.6g", v.get<double>());
  return v.dump();
}

std::string cut(std::string s, size_t n) {
  return s.size() > n ? truncate_utf8(std::move(s), n) : s;
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

// Reads an optional JSON file of the run; a note on the page (not an error) when it is unreadable.
std::optional<json> read_json(const fs::path& p, std::string* note) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (!in.good() || j.is_discarded() || !j.is_object()) {
    *note = p.filename().string() + " is present but is not a readable JSON object";
    return std::nullopt;
  }
  return j;
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

std::string figure(const std::string& svg, const std::string& caption) {
  return "<figure>\n" + svg + (caption.empty() ? "" : "<figcaption>" + esc(caption) + "</figcaption>\n") +
         "</figure>\n";
}

std::string missing(const std::string& what) {
  return "<p class=\"note\">" + esc(what) + "</p>\n";
}

// A noisy curve: its envelope, light, under a bold moving average (only the envelope when it is short).
void add_noisy(LineChart* c, const Frame& f, const Curve& curve, const std::string& name, const std::string& color,
               int axis = 0) {
  if (curve.count() < 50) {
    c->lines.push_back({name, color, curve.envelope(), 1.8, 1, true, curve.count() <= 20, false, true, axis});
    return;
  }
  c->lines.push_back({"", color, curve.envelope(), 1, 0.3, true, false, false, false, axis});
  c->lines.push_back({name, color, curve.smoothed(f.breaks), 2.2, 1, true, false, false, true, axis});
}

void add_points(LineChart* c, const Curve& curve, const std::string& name, const std::string& color, int axis = 0,
                bool dashed = false) {
  const auto pts = curve.envelope();
  c->lines.push_back({name, color, pts, 1.8, 1, true, pts.size() <= kMaxMarkerPoints, dashed, true, axis});
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
    if (!m.loss.empty()) add_noisy(&c, f, m.loss, "train loss", kPalette[0]);
    if (!m.val_loss.empty()) add_points(&c, m.val_loss, "val loss", kPalette[1]);
    if (!m.val_bpb.empty()) add_points(&c, m.val_bpb, "val bits/byte", kPalette[3], 0, true);
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
    c.lines.push_back({"lr", kPalette[0], m.lr.envelope(), 2, 1, true, false, false, true, 0});
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
      add_noisy(&c, f, m.tokens_per_s, "tokens/s", kPalette[0]);
    }
    if (!m.mfu.empty()) {
      Axis& a = both ? c.y2 : c.y;
      a.label = "MFU";
      a.percent = true;
      a.zero = true;
      add_noisy(&c, f, m.mfu, "MFU (model FLOPs utilisation)", kPalette[1], both ? 1 : 0);
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
    if (!m.grad_norm.empty()) add_noisy(&c, f, m.grad_norm, "gradient norm (before clipping)", kPalette[0]);
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
    for (const auto& [name, k] : m.tasks) add_points(&c, k, name, kPalette[i++ % std::size(kPalette)]);
    std::string last;
    for (const auto& [name, k] : m.tasks)
      last += (last.empty() ? "" : ", ") + name + " " +
              (c.y.percent ? sfmt("%.1f%%", 100 * k.last().y) : fmt_value(k.last().y));
    s += figure(render_line_chart(c, f), "From the eval records. Last: " + last + ".");
  }
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
      for (const auto& [layer, k] : m.violation)
        add_noisy(&c, f, k, "layer " + std::to_string(layer), kPalette[i++ % std::size(kPalette)]);
    } else {
      add_noisy(&c, f, m.violation_mean, "mean over " + std::to_string(m.violation.size()) + " layers", kPalette[0]);
      add_noisy(&c, f, m.violation_max, "worst layer", kPalette[2]);
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

std::string run_name(const std::string& run_dir) {
  fs::path p = fs::path(run_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    std::error_code ec;
    name = fs::weakly_canonical(fs::path(run_dir), ec).filename().string();
  }
  return name.empty() ? run_dir : name;
}

}  // namespace

std::string render_report(const std::string& run_dir, ReportSummary* summary) {
  const Metrics m = read_metrics(run_dir);
  const fs::path run(run_dir);

  // The step axis and the stage switches: "stage" records, else where the step records' stage changes; the
  // stage in force at the first step comes from the step records when the stage records start later.
  Frame f;
  f.x.step = std::max(1.0, nice_step(m.last_step - m.first_step, 8));  // steps are whole numbers
  f.x.lo = std::floor(m.first_step / f.x.step + 1e-9) * f.x.step;
  f.x.hi = std::max(std::ceil(m.last_step / f.x.step - 1e-9) * f.x.step, f.x.lo + f.x.step);
  f.x.ticks = linear_ticks(f.x.lo, f.x.hi, f.x.step);
  f.stages = m.stages;
  std::sort(f.stages.begin(), f.stages.end(), [](const StageMark& a, const StageMark& b) { return a.step < b.step; });
  if (f.stages.empty()) {
    f.stages = m.step_stages;
  } else if (!m.step_stages.empty() && m.step_stages.front().step < f.stages.front().step) {
    f.stages.insert(f.stages.begin(), m.step_stages.front());
  }
  if (f.stages.size() > kMaxStageMarks) f.stages.resize(kMaxStageMarks);
  for (const StageMark& st : f.stages) f.breaks.push_back(st.step);
  std::sort(f.breaks.begin(), f.breaks.end());

  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + esc(run_name(run_dir)) + " \xE2\x80\x94 myriad training report</title>\n";
  h += "<style>" + std::string(kCss) + "</style>\n</head>\n<body>\n<main>\n";
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
  h += moe_section(m, f);
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

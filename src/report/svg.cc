// SVG charts for the training report: see svg.h.
#include "report/svg.h"

#include <algorithm>
#include <utility>

#include "report/format.h"

namespace myriad::report {
namespace {

constexpr size_t kMaxTooltipCells = 6000;  // per heatmap; beyond that cells get no <title>
constexpr size_t kMaxMarkerPoints = 80;    // curves with fewer points get a dot on each

constexpr const char* kStageColor = "#6a3d9a";
// Every chart has its plot between kLeft and kWidth - kRight, so the step axes of all charts line up; the right
// margin holds a second y axis or a heatmap's colour bar.
constexpr double kWidth = 900, kLeft = 84, kRight = 110, kPlotH = 230, kBottom = 44;

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Axes and line charts

double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

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

void Axis::resolve(double dmin, double dmax) {
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

std::string Axis::tick_label(double v) const {
  const double k = percent ? 100 : 1;
  double span = 0;
  for (double t : ticks) span = std::max(span, std::abs(t) * k);
  const std::string s = step > 0 ? fmt_tick(v * k, step * k, span) : fmt_tick(v * k, v * k, v * k);
  return percent ? s + "%" : s;
}

namespace {

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

}  // namespace

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

void add_noisy(LineChart* c, const Frame& f, const Curve& curve, const std::string& name, const std::string& color,
               int axis) {
  if (curve.count() < 50) {
    c->lines.push_back({name, color, curve.envelope(), 1.8, 1, true, curve.count() <= 20, false, true, axis});
    return;
  }
  c->lines.push_back({"", color, curve.envelope(), 1, 0.3, true, false, false, false, axis});
  c->lines.push_back({name, color, curve.smoothed(f.breaks), 2.2, 1, true, false, false, true, axis});
}

void add_points(LineChart* c, const Curve& curve, const std::string& name, const std::string& color, int axis,
                bool dashed) {
  const auto pts = curve.envelope();
  c->lines.push_back({name, color, pts, 1.8, 1, true, pts.size() <= kMaxMarkerPoints, dashed, true, axis});
}

// ---------------------------------------------------------------------------------------------------------------
// Heatmaps of load / mean load

namespace {

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

// The smallest of 1, 2, 5, 10, 20, 50, ... that is >= n: label every so many rows or columns.
size_t nice_count(double n) {
  for (size_t m = 1;; m *= 10)
    for (size_t k : {1, 2, 5})
      if (double(k * m) >= n) return k * m;
}

}  // namespace

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

}  // namespace myriad::report

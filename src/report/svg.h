// SVG charts for the training report (internal to src/report): line charts over the step axis, with the stage
// switches drawn as vertical lines, and heatmaps of expert load. Every chart is one inline <svg> element.
//
// A curve (curve.h) is drawn as its envelope (min and max per bucket: every spike stays visible, <= ~1000 points)
// under a moving average of the bucket means (add_noisy). Expert load is shown as load / mean load of its layer at
// that step: 1 is perfectly balanced, 0 a dead expert.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "report/curve.h"
#include "report/metrics.h"

namespace myriad::report {

double nice_step(double range, int target);

// Ticks every `step` from lo to hi (multiples of step), with float noise rounded away.
std::vector<double> linear_ticks(double lo, double hi, double step);

struct Axis {
  std::string label;
  bool log = false;      // log scale (only used when every value is > 0)
  bool percent = false;  // values are fractions, shown as %
  bool zero = false;     // a linear range includes 0
  // Resolved by resolve():
  double lo = 0, hi = 1, step = 0;  // step 0: each (log) tick is formatted by itself
  std::vector<double> ticks;

  void resolve(double dmin, double dmax);

  double map(double v, double p0, double p1) const {  // value -> pixel (p0 at lo, p1 at hi)
    const double t = log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }

  std::string tick_label(double v) const;
};

// What every step chart shares: the step axis and the stage switches.
struct Frame {
  Axis x;
  std::vector<StageMark> stages;
  std::vector<double> breaks;  // the steps of the stage switches, sorted
};

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

std::string render_line_chart(LineChart c, const Frame& f);

// A noisy curve: its envelope, light, under a bold moving average (only the envelope when it is short).
void add_noisy(LineChart* c, const Frame& f, const Curve& curve, const std::string& name, const std::string& color,
               int axis = 0);

void add_points(LineChart* c, const Curve& curve, const std::string& name, const std::string& color, int axis = 0,
                bool dashed = false);

struct Heatmap {
  std::string title, x_label, y_label;
  size_t rows = 0, cols = 0;
  std::vector<double> ratio;  // [rows x cols], NaN where missing
  std::vector<std::string> row_labels;
  std::vector<double> col_x0, col_x1;  // step range per column; empty: columns are experts 0..cols-1
  std::function<std::string(size_t, size_t)> tooltip;
  bool numbers = false;  // print the ratio in each cell
};

// `f`: the step axis when the columns are step ranges (col_x0, col_x1); null when they are experts.
std::string render_heatmap(const Heatmap& h, const Frame* f);

}  // namespace myriad::report

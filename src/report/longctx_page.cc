// The long-context heatmap: see longctx_page.h.
#include "report/longctx_page.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "report/format.h"
#include "report/page.h"

namespace myriad {
namespace {

using nlohmann::json;
using namespace report;

constexpr double kCellW = 64, kCellH = 34, kLeft = 96, kTop = 54, kBottom = 56, kRight = 24;

// Red (0) through yellow (0.5) to green (1): the usual reading of an accuracy grid.
std::string accuracy_color(double a) {
  static const double kStops[3][3] = {{215, 48, 39}, {254, 224, 139}, {26, 152, 80}};
  a = std::clamp(a, 0.0, 1.0) * 2;
  const int i = std::min(1, int(a));
  const double t = a - i;
  int c[3];
  for (int k = 0; k < 3; ++k) c[k] = int(std::lround(kStops[i][k] + t * (kStops[i + 1][k] - kStops[i][k])));
  return sfmt("#%02x%02x%02x", c[0], c[1], c[2]);
}

std::string length_label(int64_t n) {
  if (n >= 1048576 && n % 1048576 == 0) return std::to_string(n / 1048576) + "M";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n / 1024) + "K";
  return std::to_string(n);
}

std::string svg_body(const json& e, bool standalone) {
  const std::vector<int64_t> lengths = e.at("lengths").get<std::vector<int64_t>>();
  const std::vector<int> depths = e.at("depths").get<std::vector<int>>();
  const double w = kLeft + kCellW * double(depths.size()) + kRight;
  const double h = kTop + kCellH * double(lengths.size()) + kBottom;
  const std::string task = e.at("task").get<std::string>();
  // The namespace only in a file of its own: inline SVG in HTML needs none (and the page links nothing).
  std::string s = std::string(standalone ? "<svg xmlns=\"http://www.w3.org/2000/svg\"" : "<svg") + " viewBox=\"0 0 " +
                  px(w) + " " + px(h) + "\" width=\"" + px(w) + "\" height=\"" + px(h) +
                  "\" role=\"img\" aria-label=\"" + esc(task) +
                  " accuracy by length and depth\" font-family=\"system-ui, sans-serif\" font-size=\"12\">\n";
  s += "<text x=\"" + px(w / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"600\">" +
       esc(task) + sfmt(": %.1f%% of ", 100 * e.at("accuracy").get<double>()) + std::to_string(e.at("cells").size()) +
       " cells</text>\n";
  for (size_t di = 0; di < depths.size(); ++di)
    s += "<text x=\"" + px(kLeft + kCellW * (double(di) + 0.5)) + "\" y=\"" + px(kTop - 8) +
         "\" text-anchor=\"middle\">" + std::to_string(depths[di]) + "%</text>\n";
  s += "<text x=\"" + px(kLeft + kCellW * double(depths.size()) / 2) + "\" y=\"" +
       px(kTop + kCellH * double(lengths.size()) + 24) + "\" text-anchor=\"middle\">needle depth</text>\n";
  s += "<text x=\"16\" y=\"" + px(kTop + kCellH * double(lengths.size()) / 2) + "\" transform=\"rotate(-90 16 " +
       px(kTop + kCellH * double(lengths.size()) / 2) + ")\" text-anchor=\"middle\">prompt tokens</text>\n";
  for (size_t li = 0; li < lengths.size(); ++li)
    s += "<text x=\"" + px(kLeft - 8) + "\" y=\"" + px(kTop + kCellH * (double(li) + 0.5) + 4) +
         "\" text-anchor=\"end\">" + length_label(lengths[li]) + "</text>\n";
  for (const json& c : e.at("cells")) {
    const auto li = std::find(lengths.begin(), lengths.end(), c.at("length").get<int64_t>()) - lengths.begin();
    const auto di = std::find(depths.begin(), depths.end(), c.at("depth").get<int>()) - depths.begin();
    if (size_t(li) >= lengths.size() || size_t(di) >= depths.size()) continue;
    const double a = c.at("accuracy").get<double>(), x = kLeft + kCellW * double(di), y = kTop + kCellH * double(li);
    s += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(kCellW - 2) + "\" height=\"" + px(kCellH - 2) +
         "\" fill=\"" + accuracy_color(a) + "\"><title>" +
         esc(length_label(lengths[size_t(li)]) + " tokens, depth " + std::to_string(depths[size_t(di)]) +
             "%: " + std::to_string(c.at("correct").get<int>()) + " of " + std::to_string(c.at("samples").get<int>())) +
         "</title></rect>\n";
    s += "<text x=\"" + px(x + kCellW / 2 - 1) + "\" y=\"" + px(y + kCellH / 2 + 3) + "\" text-anchor=\"middle\">" +
         sfmt("%.0f%%", 100 * a) + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace

std::string render_longctx_svg(const json& eval) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg_body(eval, true);
}

std::string render_longctx_heatmap(const json& eval) {
  return svg_body(eval, false);
}

std::string render_longctx_page(const json& eval, const std::string& title) {
  std::string h = page_begin(title);
  h += "<h1>" + esc(title) + "</h1>\n";
  h += "<p class=\"sub\">Accuracy by generated answer (greedy), " + esc(eval.at("task").get<std::string>()) +
       " task: " + grouped(double(eval.at("prompt_tokens").get<int64_t>())) + " prompt tokens, " +
       fmt_duration(eval.at("seconds").get<double>()) + ".</p>\n";
  h += figure(svg_body(eval, false),
              "Rows: prompt length in tokens; columns: where the fact sits in the filler (0%: first).");
  h += "<h2>Cells</h2>\n<table>\n<tr><th>tokens</th><th>depth</th><th>correct</th><th>accuracy</th>"
       "<th>seconds</th><th>first answer</th><th>generated</th></tr>\n";
  for (const json& c : eval.at("cells"))
    h += "<tr><td class=\"n\">" + grouped(double(c.at("length").get<int64_t>())) + "</td><td class=\"n\">" +
         std::to_string(c.at("depth").get<int>()) + "%</td><td class=\"n\">" +
         std::to_string(c.at("correct").get<int>()) + " / " + std::to_string(c.at("samples").get<int>()) +
         "</td><td class=\"n\">" + sfmt("%.1f%%", 100 * c.at("accuracy").get<double>()) + "</td><td class=\"n\">" +
         sfmt("%.1f", c.at("seconds").get<double>()) + "</td><td><code>" + esc(c.at("answer").get<std::string>()) +
         "</code></td><td><code>" + esc(cut(c.at("got").get<std::string>(), 60)) + "</code></td></tr>\n";
  h += "</table>\n<footer>Written by <code>myriad eval longctx</code>. Self-contained: nothing on this page is "
       "fetched.</footer>\n</main>\n</body>\n</html>\n";
  return h;
}

}  // namespace myriad

// The shared parts of the report's pages (report/page.h).
#include "report/page.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "report/format.h"

namespace myriad::report {

namespace fs = std::filesystem;

namespace {

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
                                "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"};

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

}  // namespace

const char* palette(size_t i) {
  return kPalette[i % std::size(kPalette)];
}

std::string page_begin(const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + esc(title) + "</title>\n";
  return h + "<style>" + std::string(kCss) + "</style>\n</head>\n<body>\n<main>\n";
}

std::string card(const std::string& key, const std::string& value, const std::string& detail) {
  return "<div class=\"card\"><div class=\"k\">" + esc(key) + "</div><div class=\"v\">" + esc(value) + "</div>" +
         (detail.empty() ? "" : "<div class=\"d\">" + esc(detail) + "</div>") + "</div>\n";
}

std::string figure(const std::string& svg, const std::string& caption) {
  return "<figure>\n" + svg + (caption.empty() ? "" : "<figcaption>" + esc(caption) + "</figcaption>\n") +
         "</figure>\n";
}

std::string missing(const std::string& what) {
  return "<p class=\"note\">" + esc(what) + "</p>\n";
}

std::optional<nlohmann::json> read_json(const fs::path& p, std::string* note) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!in.good() || j.is_discarded() || !j.is_object()) {
    *note = p.filename().string() + " is present but is not a readable JSON object";
    return std::nullopt;
  }
  return j;
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

Frame step_frame(double first, double last) {
  Frame f;
  f.x.step = std::max(1.0, nice_step(last - first, 8));  // steps are whole numbers
  f.x.lo = std::floor(first / f.x.step + 1e-9) * f.x.step;
  f.x.hi = std::max(std::ceil(last / f.x.step - 1e-9) * f.x.step, f.x.lo + f.x.step);
  f.x.ticks = linear_ticks(f.x.lo, f.x.hi, f.x.step);
  return f;
}

Frame step_frame(const Metrics& m) {
  Frame f = step_frame(m.first_step, m.last_step);
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
  return f;
}

}  // namespace myriad::report

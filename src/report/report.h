// Training report (`myriad report RUN`): turns a run directory (docs/training.md: metrics.jsonl, config.json,
// train.json) into one self-contained HTML page that a person opens in a browser: summary numbers, the
// configs, line charts over the step axis (training loss with validation loss and bits per byte, learning rate,
// throughput and MFU, gradient norm with skipped steps, task accuracies, MoE load violation) with the stage
// switches drawn as vertical lines, two expert-load heatmaps (layer x expert at the last recorded step; step x
// expert for the first MoE layer) and the text samples. The charts are inline SVG generated here; the page
// loads nothing (no scripts, fonts, images or network).
//
// Leaves out: interactivity beyond SVG <title> tooltips on heatmap cells, comparing several runs.
#pragma once

#include <cstdint>
#include <string>

namespace myriad {

struct ReportSummary {
  std::string path;             // the HTML file written ("" from render_report)
  int64_t records = 0;          // well-formed records read from metrics.jsonl
  int64_t skipped_lines = 0;    // malformed lines: not JSON, not an object, no string "type" or no numeric "step"
  int64_t ignored_records = 0;  // well-formed records of a type the report does not know
};

// Reads RUN/metrics.jsonl (and RUN/config.json, RUN/train.json when present) and returns the page.
// Throws kIo when RUN or RUN/metrics.jsonl is missing or unreadable, kFormat when metrics.jsonl has no
// records ("RUN/metrics.jsonl has no records"). Malformed lines are skipped, counted and named on the page.
// `summary` may be null.
std::string render_report(const std::string& run_dir, ReportSummary* summary);

// render_report, written atomically to `out_path` (empty: RUN/report.html).
ReportSummary write_report(const std::string& run_dir, const std::string& out_path = "");

}  // namespace myriad

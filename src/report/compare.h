// Several runs side by side (`myriad report RUN_A RUN_B ...`): one self-contained HTML page, like the single-run
// report (report.h), with a table of each run's figures, the configuration fields that differ between the runs
// (config.json and train.json), and each run's curves overlaid on one step axis: training loss, validation loss,
// the MoE load imbalance of the worst layer and the dead experts. Made for comparisons such as the three MoE
// balancers trained with the same seed and data (scripts/compare_balancers.sh).
//
// Per run, in the table: the last step; the last training loss; the best and the last validation loss; the mean
// tokens/s; and for MoE runs the mean over the run of each layer's max violation, worst layer, the worst layer's
// max violation at the last recorded step, and the dead experts of all layers at the last recorded step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad {

struct ComparisonSummary {
  std::string path;           // the HTML file written ("" from render_comparison)
  int64_t records = 0;        // well-formed records over all runs' metrics.jsonl
  int64_t skipped_lines = 0;  // malformed lines over all runs (each run's are also named on the page)
};

// Reads every RUN/metrics.jsonl (errors as render_report's, naming the run) and returns the page. kValue for fewer
// than two runs. Runs with the same directory name are labelled by the path as given.
std::string render_comparison(const std::vector<std::string>& run_dirs, ComparisonSummary* summary);

// render_comparison, written atomically to `out_path` (empty: compare.html in the first run's parent directory).
ComparisonSummary write_comparison(const std::vector<std::string>& run_dirs, const std::string& out_path = "");

}  // namespace myriad

// `myriad report RUN [RUN ...] [--out FILE] [--svg DIR]`: the training report of a run directory (report/report.h), one
// self-contained HTML page written atomically to RUN/report.html or FILE; with several runs, one page comparing
// them (report/compare.h), written to compare.html beside the first run or FILE. --svg DIR: each chart of that page
// also as a standalone SVG file (report/svg_files.h).
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "report/compare.h"
#include "report/report.h"
#include "report/svg_files.h"

namespace {

int run_report(const myriad::cli::Args& args) {
  const auto& pos = args.positional();
  MYRIAD_REQUIRE(!pos.empty(), kValue, "report needs a run directory: myriad report RUN [RUN ...] [--out FILE]");
  int64_t records = 0, skipped = 0, ignored = 0;
  std::string path;
  if (pos.size() == 1) {
    const myriad::ReportSummary s = myriad::write_report(pos[0], args.get_or("out", ""));
    path = s.path, records = s.records, skipped = s.skipped_lines, ignored = s.ignored_records;
  } else {
    const myriad::ComparisonSummary s = myriad::write_comparison(pos, args.get_or("out", ""));
    path = s.path, records = s.records, skipped = s.skipped_lines;
  }
  std::printf("wrote %s (%lld records", path.c_str(), static_cast<long long>(records));
  if (skipped > 0)
    std::printf(", %lld malformed line%s skipped", static_cast<long long>(skipped), skipped == 1 ? "" : "s");
  if (ignored > 0) std::printf(", %lld of unknown type ignored", static_cast<long long>(ignored));
  std::printf(")\n");
  if (const auto dir = args.get("svg")) {
    const std::vector<std::string> files = myriad::write_svg_documents(myriad::read_file(path), *dir);
    std::printf("wrote %zu chart%s as SVG files in %s\n", files.size(), files.size() == 1 ? "" : "s", dir->c_str());
  }
  return 0;
}

}  // namespace

MYRIAD_COMMAND("report",
               "write a run's training report (one self-contained HTML page with its curves and MoE loads), or a page "
               "comparing several runs",
               "myriad report RUN [RUN ...] [--out FILE] [--svg DIR]",
               {{"out", "FILE",
                 "where to write the page (default RUN/report.html; several runs: compare.html beside the first)"},
                {"svg", "DIR",
                 "also write each chart of the page as a standalone SVG file in DIR (named by its title), e.g. for "
                 "docs"}},
               run_report);

// `myriad report RUN [--out FILE]`: the training report of a run directory (train/report.h), one self-contained
// HTML page written atomically to RUN/report.html or FILE.
#include <cstdio>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "report/report.h"

namespace {

int run_report(const myriad::cli::Args& args) {
  const auto& pos = args.positional();
  MYRIAD_REQUIRE(!pos.empty(), kValue, "report needs a run directory: myriad report RUN [--out FILE]");
  MYRIAD_REQUIRE(pos.size() == 1, kValue, "report takes one run directory, got ", pos.size(), " arguments ('", pos[1],
                 "' is extra)");
  const myriad::ReportSummary s = myriad::write_report(pos[0], args.get_or("out", ""));
  std::printf("wrote %s (%lld records", s.path.c_str(), static_cast<long long>(s.records));
  if (s.skipped_lines > 0)
    std::printf(", %lld malformed line%s skipped", static_cast<long long>(s.skipped_lines),
                s.skipped_lines == 1 ? "" : "s");
  if (s.ignored_records > 0) std::printf(", %lld of unknown type ignored", static_cast<long long>(s.ignored_records));
  std::printf(")\n");
  return 0;
}

}  // namespace

MYRIAD_COMMAND("report", "write a run's training report: one self-contained HTML page with its curves and MoE loads",
               "myriad report RUN [--out FILE]", {{"out", "FILE", "where to write the page (default RUN/report.html)"}},
               run_report);

// Benchmark results: one row per measured figure beside the ceiling it is judged against, printed as an
// aligned table and written as JSON. Shared by every bench (ops today; serving and training MFU later).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/machine_limits.h"

namespace myriad::bench {

struct BenchRow {
  std::string op;
  std::string shape;
  std::string unit;          // "GFLOP/s" or "GB/s"
  double work = 0.0;         // FLOPs or bytes per call, by the convention stated where the row is made
  Timing timing;             // per call
  double figure = 0.0;       // work / best time, in unit
  double ceiling = 0.0;      // the machine's ceiling, in unit
  std::string ceiling_kind;  // which ceiling, and when it was measured
  double target = 0.0;       // fraction of the ceiling to reach; 0: informational, no verdict
  double ratio() const { return ceiling > 0.0 ? figure / ceiling : 0.0; }
  bool has_target() const { return target > 0.0; }
  bool pass() const { return !has_target() || ratio() >= target; }
};

// Fills figure from work and the best time (1e9 units per second).
BenchRow make_row(std::string op, std::string shape, std::string unit, double work, const Timing& t, double ceiling,
                  double target);

// Table header and one row per call, so long benches print as they go.
void print_ceilings(std::FILE* out, const MachineLimits& m);
void print_table_header(std::FILE* out);
void print_table_row(std::FILE* out, const BenchRow& r);

nlohmann::ordered_json limits_json(const MachineLimits& m);
nlohmann::ordered_json rows_json(const std::vector<BenchRow>& rows);

// Writes text to path.tmp, then renames it over path (a reader never sees half a file).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace myriad::bench

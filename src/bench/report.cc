#include "bench/report.h"

#include <filesystem>
#include <fstream>

#include "core/cpu_info.h"
#include "core/error.h"
#include "ops/gemm_backend.h"

namespace myriad::bench {

namespace {

std::string time_str(double s) {
  char buf[32];
  if (s >= 1.0)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string value_str(double v, const std::string& unit) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, unit.c_str());
  return buf;
}

}  // namespace

BenchRow make_row(std::string op, std::string shape, std::string unit, double work, const Timing& t, double ceiling,
                  double target) {
  BenchRow r;
  r.op = std::move(op);
  r.shape = std::move(shape);
  r.unit = std::move(unit);
  r.work = work;
  r.timing = t;
  r.figure = t.best_s > 0.0 ? work / t.best_s * 1e-9 : 0.0;
  r.ceiling = ceiling;
  r.target = target;
  return r;
}

void print_ceilings(std::FILE* out, const MachineLimits& m) {
  std::fprintf(out, "machine:\n%s", ops::compute_paths("  ").c_str());
  std::fprintf(out, "ceilings (%d threads, best of repeats; measured in this run):\n", m.threads);
  if (m.fma.gflops > 0)
    std::fprintf(out, "  fma    %6.1f GFLOP/s  f32 FMA peak (%s microkernel, 12 independent chains per thread), %s\n",
                 m.fma.gflops, m.fma.isa.c_str(), time_str(m.fma.timing.best_s).c_str());
  else
    std::fprintf(out, "  fma    none: this CPU has no AVX2 FMA; compute ratios are against the sgemm figure\n");
  if (m.vnni.gops > 0)
    std::fprintf(out, "  int8   %6.1f GOP/s   int8 peak (%s dot products, 2 ops per multiply-add)\n", m.vnni.gops,
                 m.vnni.isa.c_str());
  std::fprintf(out,
               "  triad  %6.1f GB/s     a = b + s*c over 3 x %lld MiB (last-level cache %lld MiB), %d bytes/element "
               "counted (read b, c; write a; write-allocate not counted), %s per pass (%d reps)\n",
               m.triad.gbs, (long long)(m.triad.elements * 4 >> 20), (long long)(last_level_cache_bytes() >> 20),
               TriadCeiling::kBytesPerElem, time_str(m.triad.timing.best_s).c_str(), m.triad.timing.reps);
  std::fprintf(out, "  read   %6.1f GB/s     sum of one %lld MiB array\n", m.read.gbs,
               (long long)(m.read.elements * 4 >> 20));
  std::fprintf(
      out, "figure (not a ceiling):\n  sgemm  %6.1f GFLOP/s  %lld^3 through %s, %s per call = %.0f%% of the fma peak\n",
      m.sgemm.gflops, (long long)m.sgemm.n, m.gemm.c_str(), time_str(m.sgemm.timing.best_s).c_str(),
      m.fma.gflops > 0 ? 100 * m.sgemm.gflops / m.fma.gflops : 0.0);
}

void print_table_header(std::FILE* out) {
  std::fprintf(out, "%-26s %-30s %11s %15s %15s %7s %7s  %s\n", "op", "shape", "time/call", "figure", "ceiling",
               "ratio", "target", "verdict");
}

void print_table_row(std::FILE* out, const BenchRow& r) {
  char ratio[16], target[16];
  std::snprintf(ratio, sizeof ratio, "%.1f%%", 100.0 * r.ratio());
  if (r.has_target())
    std::snprintf(target, sizeof target, ">=%.0f%%", 100.0 * r.target);
  else
    std::snprintf(target, sizeof target, "-");
  const char* verdict = !r.has_target() ? "info" : (r.pass() ? "PASS" : "below");
  std::fprintf(out, "%-26s %-30s %11s %15s %15s %7s %7s  %s\n", r.op.c_str(), r.shape.c_str(),
               time_str(r.timing.best_s).c_str(), value_str(r.figure, r.unit).c_str(),
               value_str(r.ceiling, r.unit).c_str(), ratio, target, verdict);
  std::fflush(out);
}

nlohmann::ordered_json limits_json(const MachineLimits& m) {
  nlohmann::ordered_json j;
  j["threads"] = m.threads;
  j["cpu"] = cpu_info().summary();
  j["kernels"] = kernel_isa_path();
  j["gemm"] = m.gemm;
  j["fma_peak"] = {{"isa", m.fma.isa}, {"gflops", m.fma.gflops}, {"best_s", m.fma.timing.best_s}};
  j["int8_peak"] = {{"isa", m.vnni.isa}, {"gops", m.vnni.gops}};
  j["read"] = {{"gbs", m.read.gbs}, {"array_bytes", m.read.elements * 4}};
  j["sgemm"] = {{"n", m.sgemm.n},
                {"gflops", m.sgemm.gflops},
                {"best_s", m.sgemm.timing.best_s},
                {"median_s", m.sgemm.timing.median_s},
                {"reps", m.sgemm.timing.reps}};
  j["triad"] = {{"array_bytes", m.triad.elements * 4},
                {"bytes_per_element", TriadCeiling::kBytesPerElem},
                {"convention", "read b, read c, write a; write-allocate not counted"},
                {"gbs", m.triad.gbs},
                {"best_s", m.triad.timing.best_s},
                {"median_s", m.triad.timing.median_s},
                {"reps", m.triad.timing.reps}};
  return j;
}

nlohmann::ordered_json rows_json(const std::vector<BenchRow>& rows) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    nlohmann::ordered_json j;
    j["op"] = r.op;
    j["shape"] = r.shape;
    j["unit"] = r.unit;
    j["work_per_call"] = r.work;
    j["best_s"] = r.timing.best_s;
    j["median_s"] = r.timing.median_s;
    j["reps"] = r.timing.reps;
    j["figure"] = r.figure;
    j["ceiling"] = r.ceiling;
    j["ceiling_kind"] = r.ceiling_kind;
    j["ratio"] = r.ratio();
    if (r.has_target()) {
      j["target"] = r.target;
      j["pass"] = r.pass();
    } else {
      j["target"] = nullptr;
    }
    a.push_back(std::move(j));
  }
  return a;
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MYRIAD_REQUIRE(f.good(), kIo, "cannot open ", tmp, " for writing");
    f << text;
    f.flush();
    MYRIAD_REQUIRE(f.good(), kIo, "cannot write ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace myriad::bench

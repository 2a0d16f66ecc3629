// Training report: a synthetic run (two stages, evals with tasks, MoE loads for 2 layers x 8 experts, samples,
// one malformed line) gives one self-contained page with every chart; missing runs and empty metrics files are
// clear errors; runs without MoE or with few fields still render; long runs stay small. Several runs compare on one
// page (report/compare.h): their figures recomputed here from what was written, what differs, overlaid curves.
#include "report/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "report/compare.h"
#include "report/svg_files.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

const char* const kTasks[] = {"arithmetic", "copy", "reverse", "recall"};

class ReportTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(testing::TempDir()) / (std::string("myriad_report_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "run");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string run() const { return (dir_ / "run").string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / "run" / name, std::ios::binary) << text;
  }

  fs::path dir_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// 300 steps: stage 0 (seq 256) to step 149, stage 1 (seq 1024) from 150; an eval every 50 steps; MoE loads for
// layers 1 and 2 (8 experts; expert 3 of layer 2 dies in stage 1); samples; one torn line in the middle.
std::string synthetic_metrics() {
  std::ostringstream o;
  o << R"({"type":"stage","step":0,"stage":0,"seq_len":256})"
    << "\n";
  for (int s = 1; s <= 300; ++s) {
    const int stage = s < 150 ? 0 : 1, seq = stage == 0 ? 256 : 1024;
    if (s == 150)
      o << R"({"type":"stage","step":150,"stage":1,"seq_len":1024})"
        << "\n";
    const double loss = 2.0 + 8.0 * std::exp(-s / 60.0) + 0.15 * std::sin(s * 1.7);
    const double lr = s < 20 ? 1e-3 * s / 20 : 1e-3 * 0.5 * (1 + std::cos(M_PI * (s - 20) / 280.0));
    o << R"({"type":"step","step":)" << s << R"(,"stage":)" << stage << R"(,"seq_len":)" << seq << R"(,"loss":)" << loss
      << R"(,"lr":)" << lr << R"(,"grad_norm":)" << 0.5 + 3.0 * std::exp(-s / 30.0)
      << R"(,"tokens":4096,"tokens_per_s":)" << (stage == 0 ? 5300 : 4100) + 200 * std::sin(s * 0.3) << R"(,"mfu":)"
      << (stage == 0 ? 0.31 : 0.36) << R"(,"skipped":)" << (s >= 77) + (s >= 201) << R"(,"time_s":)" << s * 0.8
      << R"(,"moe":[)";
    for (int layer = 1; layer <= 2; ++layer) {
      o << (layer > 1 ? "," : "") << R"({"layer":)" << layer << R"(,"max_violation":)"
        << 0.6 * std::exp(-s / 100.0) * layer << R"(,"dropped_fraction":0.0,"router_entropy":1.9,"dead_experts":)"
        << (layer == 2 && stage == 1 ? 1 : 0) << R"(,"load":[)";
      for (int e = 0; e < 8; ++e) {
        const double load = (layer == 2 && stage == 1 && e == 3) ? 0 : 512 * (1 + 0.5 * std::sin(e + s / 40.0 * layer));
        o << (e ? "," : "") << int(load);
      }
      o << "]}";
    }
    o << "]}\n";
    if (s % 50 == 0) {
      o << R"({"type":"eval","step":)" << s << R"(,"val_loss":)" << loss + 0.1 << R"(,"val_bpb":)" << loss * 0.6
        << R"(,"tasks":{)";
      for (int t = 0; t < 4; ++t) o << (t ? "," : "") << '"' << kTasks[t] << "\":" << 0.1 * t + s / 1000.0;
      o << "}}\n";
    }
    if (s % 100 == 0)
      o << R"({"type":"sample","step":)" << s
        << R"(,"prompt":"Once upon a time","text":" there was <b>a</b> & \"x\"\nline two"})"
        << "\n";
    if (s == 123)
      o << R"({"type":"step","step":124,"loss":)"
        << "\n";  // torn line
  }
  return o.str();
}

void expect_error(const std::string& run, const std::string& fragment) {
  try {
    render_report(run, nullptr);
    ADD_FAILURE() << "no error for " << run;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, SyntheticRunGivesOneSelfContainedPage) {
  write("metrics.jsonl", synthetic_metrics());
  write("config.json", read_all(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json"));
  write("train.json", R"({"seed":7,"batch_tokens":4096,"optimizer":{"lr":0.001,"weight_decay":0.1},)"
                      R"("stages":[{"seq_len":256,"tokens":600000},{"seq_len":1024,"tokens":600000}]})");
  const ReportSummary s = write_report(run());
  EXPECT_EQ(s.path, (fs::path(run()) / "report.html").string());
  ASSERT_TRUE(fs::exists(s.path));
  EXPECT_EQ(s.skipped_lines, 1);
  EXPECT_EQ(s.records, 2 + 300 + 6 + 3);
  const std::string html = read_all(s.path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);

  // One <svg> per chart, balanced.
  for (const char* title :
       {"Loss", "Learning rate", "Throughput", "Gradient norm and skipped steps", "Task accuracy", "MoE load imbalance",
        "Expert load by layer (last recorded step)", "Expert load over training (layer 1, the first MoE layer)"})
    EXPECT_EQ(count(html, std::string("aria-label=\"") + title + "\""), 1u) << title;
  EXPECT_EQ(count(html, "<svg "), 8u);
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
  EXPECT_EQ(count(html, "<html"), count(html, "</html>"));
  EXPECT_EQ(count(html, "<figure>"), count(html, "</figure>"));

  // Stage markers, task names, the malformed line, the configs.
  EXPECT_GE(count(html, "stage 0 \xC2\xB7 seq 256"), 1u);
  EXPECT_GE(count(html, "stage 1 \xC2\xB7 seq 1024"), 5u) << "a marker on every step chart";
  for (const char* t : kTasks) EXPECT_NE(html.find(t), std::string::npos) << t;
  EXPECT_NE(html.find("1 malformed line</b>"), std::string::npos);
  EXPECT_NE(html.find("line 128"), std::string::npos) << "names the first malformed line";
  EXPECT_NE(html.find("num_experts_per_token"), std::string::npos);
  EXPECT_NE(html.find("activated per token"), std::string::npos);
  EXPECT_NE(html.find("optimizer.weight_decay"), std::string::npos);
  EXPECT_NE(html.find("skipped step (2 in all)"), std::string::npos);

  // Self-contained, and sample text escaped.
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find("<b>a</b>"), std::string::npos);
  EXPECT_NE(html.find("there was &lt;b&gt;a&lt;/b&gt; &amp; &quot;x&quot;\nline two"), std::string::npos);

  // Written atomically: no temporary file left beside it.
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(run())) entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 4u);

  // Each chart as a standalone SVG file: named by its title, the page's element with the SVG namespace added.
  const std::string svg_dir = (fs::path(run()) / "svg").string();
  const std::vector<std::string> files = write_svg_documents(html, svg_dir);
  ASSERT_EQ(files.size(), 8u);
  EXPECT_EQ(fs::path(files[0]).filename(), "loss.svg");
  EXPECT_EQ(fs::path(files[1]).filename(), "learning-rate.svg");
  EXPECT_TRUE(fs::exists(fs::path(svg_dir) / "gradient-norm-and-skipped-steps.svg"));
  EXPECT_TRUE(fs::exists(fs::path(svg_dir) / "expert-load-over-training-layer-1-the-first-moe-layer.svg"));
  size_t from = 0;
  for (const std::string& f : files) {
    const std::string doc = read_all(f);
    const std::string head = "<svg xmlns=\"http://www.w3.org/2000/svg\" ";
    ASSERT_EQ(doc.rfind(head, 0), 0u) << f;
    const std::string body = doc.substr(head.size(), doc.size() - head.size() - 1);  // less the final newline
    const size_t at = html.find("<svg " + body, from);
    EXPECT_NE(at, std::string::npos) << f << ": not the page's chart, in order";
    from = at == std::string::npos ? from : at + 1;
    EXPECT_EQ(count(doc, "<svg "), 1u) << f;
    EXPECT_EQ(doc.substr(doc.size() - 7), "</svg>\n") << f;
  }
  EXPECT_THROW(svg_documents("<p><svg viewBox=\"0 0 1 1\"><g></g></p>"), Error);
}

TEST_F(ReportTest, OutOption) {
  write("metrics.jsonl", R"({"type":"step","step":1,"loss":3.0})"
                         "\n");
  const std::string out = (dir_ / "elsewhere.html").string();
  EXPECT_EQ(write_report(run(), out).path, out);
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(fs::path(run()) / "report.html"));
}

TEST_F(ReportTest, MissingRunIsAnErrorNamingThePath) {
  expect_error((dir_ / "no-such-run").string(), (dir_ / "no-such-run").string());
  expect_error(run(), "metrics.jsonl' does not exist");
  write("metrics.jsonl", "");
  expect_error(run(), (fs::path(run()) / "metrics.jsonl").string() + " has no records");
  write("metrics.jsonl", "\n  \nnot json\n");
  expect_error(run(), "has no records (1 malformed line skipped)");
  try {
    write_report((dir_ / "no-such-run").string());
    ADD_FAILURE() << "write_report of a missing run directory did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
  }
  EXPECT_FALSE(fs::exists(fs::path(run()) / "report.html"));
}

TEST_F(ReportTest, DenseRunWithFewFields) {
  // No MoE, no evals, no throughput, no stages; one record without a loss.
  write("metrics.jsonl", R"({"type":"step","step":0,"loss":5.0})"
                         "\n"
                         R"({"type":"step","step":1,"lr":0.001})"
                         "\n"
                         R"({"type":"step","step":2,"loss":4.5,"lr":0.001})"
                         "\n"
                         R"({"type":"future_kind","step":2})"
                         "\n");
  ReportSummary s;
  const std::string html = render_report(run(), &s);
  EXPECT_EQ(s.records, 3);
  EXPECT_EQ(s.skipped_lines, 0);
  EXPECT_EQ(s.ignored_records, 1);
  EXPECT_NE(html.find("No MoE statistics"), std::string::npos);
  EXPECT_NE(html.find("No task accuracies"), std::string::npos);
  EXPECT_NE(html.find("no config.json"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), 2u) << "loss and learning rate";
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
  EXPECT_EQ(html.find("malformed"), std::string::npos);
}

TEST_F(ReportTest, GrpoRunGetsRewardRateAndDriftCharts) {
  // GRPO step records (rl/grpo.cc's fields) and an eval with the agent's success per family.
  std::ostringstream o;
  for (int s = 1; s <= 30; ++s)
    o << R"({"type":"step","step":)" << s << R"(,"loss":0.1,"rewards":{"completion":)" << 0.01 * s
      << R"(,"efficiency":-0.05,"safety":-0.1,"length":0,"total":)" << 0.01 * s - 0.15 << R"(},"success":)" << 0.01 * s
      << R"(,"violations":0.1,"clip_fraction":0.02,"groups_dropped":)" << s % 4
      << R"(,"groups":8,"kl":0.003,"logprob_mismatch_mean":5e-7})"
      << "\n";
  o << R"({"type":"eval","step":30,"agent":{"success":0.3,"families":{"price":{"success":1.0},"total":{"success":0}}}})"
    << "\n";
  write("metrics.jsonl", o.str());
  const std::string html = render_report(run(), nullptr);
  EXPECT_NE(html.find("Reinforcement learning (GRPO)"), std::string::npos);
  EXPECT_NE(html.find("completion 0.3"), std::string::npos) << "the last completion reward in the caption";
  EXPECT_NE(html.find("groups dropped 25.0%"), std::string::npos) << "30 % 4 = 2 of 8 groups";
  EXPECT_NE(html.find("KL to the reference"), std::string::npos);
  EXPECT_NE(html.find("agent price 100.0%"), std::string::npos) << "the agent's families on the task chart";
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
}

TEST_F(ReportTest, LongRunIsDownsampled) {
  std::ostringstream o;
  for (int s = 0; s < 50000; ++s)
    o << R"({"type":"step","step":)" << s << R"(,"loss":)" << 3 + std::sin(s * 0.1) << R"(,"grad_norm":)"
      << (s == 31337 ? 1000.0 : 1.0) << R"(,"moe":[{"layer":3,"max_violation":0.1,"load":[1,2,3,4]}]})"
      << "\n";
  write("metrics.jsonl", o.str());
  const std::string html = render_report(run(), nullptr);
  EXPECT_LT(html.size(), 400000u) << "curves are drawn with ~1000 points, not 50000";
  EXPECT_NE(html.find("Many points"), std::string::npos);
  EXPECT_NE(html.find("Expert load over training (layer 3"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
  // The single spike survives the downsampling: the gradient norm axis reaches 1000.
  EXPECT_NE(html.find(">1000</text>"), std::string::npos);
}

// The trainer's long-context grids (one "longctx" record per stage end) get a table and the last grid's heatmap; a
// grid the page could not draw (a cell without its numbers) is counted as unknown, never drawn; the memory record
// gives the peak RSS card.
TEST_F(ReportTest, LongContextGridsAndMemory) {
  std::ostringstream o;
  for (int s = 1; s <= 20; ++s) o << R"({"type":"step","step":)" << s << R"(,"loss":)" << 3.0 - 0.01 * s << "}\n";
  o << R"({"type":"memory","step":1,"resident_peak_bytes":123456789,"weights_bytes":1000})"
    << "\n";
  // One entry not of the form {phase, part, bytes}: left out of the table, the rest shown.
  o << R"({"type":"memory_profile","step":1,"tensor_peak_bytes":4000,"at_peak":[)"
    << R"({"phase":"forward","part":"mla","bytes":3000},{"phase":"backward","part":"moe","bytes":1000},)"
    << R"({"phase":"forward","part":7,"bytes":5}]})"
    << "\n";
  auto grid = [](int step, int stage, double acc) {
    std::ostringstream g;
    g << R"({"type":"longctx","step":)" << step << R"(,"stage":)" << stage << R"(,"seq_len":)" << 512 * (stage + 1)
      << R"(,"task":"passkey","lengths":[512,1024],"depths":[0,50,100],"accuracy":)" << acc << R"(,"cells":[)";
    int i = 0;
    for (int L : {512, 1024})
      for (int d : {0, 50, 100})
        g << (i++ ? "," : "") << R"({"length":)" << L << R"(,"depth":)" << d << R"(,"correct":)" << (L == 512 ? 2 : 0)
          << R"(,"samples":2,"accuracy":)" << (L == 512 ? 1.0 : 0.0) << "}";
    g << "]}\n";
    return g.str();
  };
  o << grid(10, 0, 0.25) << grid(20, 1, 0.5);
  o << R"({"type":"longctx","step":20,"task":"passkey","lengths":[512],"depths":[0],"accuracy":1,"cells":[{"length":512}]})"
    << "\n";
  write("metrics.jsonl", o.str());
  ReportSummary sum;
  const std::string html = render_report(run(), &sum);
  EXPECT_EQ(sum.ignored_records, 1) << "the undrawable grid";
  EXPECT_NE(html.find("<h2>Long context</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"n\">25.0%</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"n\">50.0%</td>"), std::string::npos);
  EXPECT_NE(html.find("The last grid (step 20)"), std::string::npos);
  const std::string section = html.substr(html.find("<h2>Long context</h2>"));
  const std::string heatmap = section.substr(0, section.find("</svg>"));
  EXPECT_EQ(count(heatmap, "<rect"), 6u) << "one cell per grid cell of the last record";
  EXPECT_EQ(count(heatmap, "fill=\"#1a9850\""), 3u) << "512 tokens: all right";
  EXPECT_EQ(count(heatmap, "fill=\"#d73027\""), 3u) << "1024 tokens: all wrong";
  EXPECT_NE(html.find("peak memory (RSS)"), std::string::npos);
  EXPECT_NE(html.find("123,456,789 bytes"), std::string::npos);
  ASSERT_NE(html.find("<h2>Memory profile</h2>"), std::string::npos);
  const std::string profile = html.substr(html.find("<h2>Memory profile</h2>"));
  const std::string table = profile.substr(0, profile.find("</table>"));
  EXPECT_EQ(count(table, "<tr>"), 3u) << "a header and the two well-formed entries";
  EXPECT_NE(table.find("<td>mla</td><td class=\"n\">3000B</td><td class=\"n\">75.0%</td>"), std::string::npos) << table;
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
}

// A run of `steps` steps for the comparison: loss falling, an eval every 50 steps, two MoE layers of 4 experts with
// max_violation v(layer, s) = scale * layer * (1 + (s % 7)) / 7 and `dead` dead experts in layer 2 from step 100.
std::string comparison_metrics(int steps, double scale, int dead) {
  std::ostringstream o;
  for (int s = 1; s <= steps; ++s) {
    o << R"({"type":"step","step":)" << s << R"(,"loss":)" << 3.0 + 1.0 / s << R"(,"tokens_per_s":1000,"moe":[)";
    for (int layer = 1; layer <= 2; ++layer)
      o << (layer > 1 ? "," : "") << R"({"layer":)" << layer << R"(,"max_violation":)"
        << scale * layer * (1 + s % 7) / 7.0 << R"(,"dead_experts":)" << (layer == 2 && s >= 100 ? dead : 0)
        << R"(,"load":[1,2,3,4]})";
    o << "]}\n";
    if (s % 50 == 0) o << R"({"type":"eval","step":)" << s << R"(,"val_loss":)" << 3.2 + scale + 1.0 / s << "}\n";
  }
  return o.str();
}

TEST_F(ReportTest, SeveralRunsCompareOnOnePage) {
  struct Spec {
    const char* name;
    double scale;
    int dead;
    const char* balancing;
  };
  const Spec specs[] = {{"qb", 0.5, 0, "qb"}, {"aux_loss", 2.0, 3, "aux_loss"}, {"sign_update", 4.0, 1, "sign_update"}};
  std::vector<std::string> dirs;
  for (const Spec& sp : specs) {
    const fs::path d = dir_ / sp.name;
    fs::create_directories(d);
    std::ofstream(d / "metrics.jsonl") << comparison_metrics(200, sp.scale, sp.dead);
    std::ofstream(d / "config.json") << R"({"hidden_size":64,"balancing":")" << sp.balancing << R"("})";
    std::ofstream(d / "train.json") << R"({"seed":0,"stages":[{"seq_len":128,"steps":200}]})";
    dirs.push_back(d.string());
  }
  const ComparisonSummary s = write_comparison(dirs);
  EXPECT_EQ(s.path, (dir_ / "compare.html").string()) << "beside the runs by default";
  EXPECT_EQ(s.records, 3 * (200 + 4));
  const std::string html = read_all(s.path);

  // The table's figures, recomputed from the formula each run was written with.
  for (const Spec& sp : specs) {
    double mean2 = 0;  // layer 2 is the worst layer: its mean over the 200 steps
    for (int t = 1; t <= 200; ++t) mean2 += sp.scale * 2 * (1 + t % 7) / 7.0;
    mean2 /= 200;
    char want[128];
    std::snprintf(want, sizeof want, "<td class=\"n\">%.3f</td><td class=\"n\">%.3f</td><td class=\"n\">%d</td>", mean2,
                  sp.scale * 2 * (1 + 200 % 7) / 7.0, sp.dead);
    EXPECT_NE(html.find(want), std::string::npos) << sp.name << ": " << want;
    char best[64];
    std::snprintf(best, sizeof best, "%.4g (step 200)", 3.2 + sp.scale + 1.0 / 200);
    EXPECT_NE(html.find(best), std::string::npos) << sp.name << ": best val loss " << best;
  }
  // What differs: balancing only (hidden_size, seed and the stages are the same everywhere).
  EXPECT_NE(html.find("<code>config.balancing</code></th><td>qb</td><td>aux_loss</td><td>sign_update</td>"),
            std::string::npos);
  EXPECT_EQ(html.find("config.hidden_size"), std::string::npos);
  EXPECT_EQ(html.find("train.seed"), std::string::npos);
  // Four overlaid charts, one curve per run in each (three legend entries per chart).
  for (const char* title : {"Training loss", "Validation loss", "MoE load imbalance, worst layer", "Dead experts"})
    EXPECT_EQ(count(html, std::string("aria-label=\"") + title + "\""), 1u) << title;
  EXPECT_EQ(count(html, "<svg "), 4u);
  EXPECT_EQ(count(html, "<svg "), count(html, "</svg>"));
  for (const Spec& sp : specs) EXPECT_GE(count(html, std::string(">") + sp.name + "</text>"), 4u) << sp.name;
  EXPECT_EQ(html.find("http"), std::string::npos);

  // One run is the single report's job; a missing run is named.
  try {
    render_comparison({dirs[0]}, nullptr);
    ADD_FAILURE() << "one run compared";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
  }
  const std::string gone = (dir_ / "gone").string();
  try {
    write_comparison({dirs[0], gone}, (dir_ / "x.html").string());
    ADD_FAILURE() << "a missing run compared";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(gone), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "x.html"));
}

}  // namespace
}  // namespace myriad

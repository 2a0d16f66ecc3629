#include "bench/op_bench.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/block_quant.h"
#include "ops/gemm_backend.h"
#include "ops/kernels.h"
#include "quant/quant.h"

namespace myriad::bench {

namespace {

constexpr int kRows = 14;  // rows below; the budget is split between them

std::vector<float> random_floats(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (auto& x : v) {  // xorshift64: cheap enough to fill hundreds of MiB
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * float(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// Times the rows. Compute-bound rows are judged against the FMA peak of the run; memory-bound rows
// against a triad timed interleaved with the op itself (one triad pass after each op call, best of each),
// because the memory bandwidth a shared machine offers drifts between rows.
class Runner {
 public:
  Runner(const MachineLimits& l, double per_row, const std::function<void(const BenchRow&)>& on_row)
      : limits_(l), per_row_(per_row), on_row_(on_row) {}

  void flops(std::string op, std::string shape, double flops_per_call, const std::function<void()>& fn,
             double target = 0.0) {
    BenchRow r = make_row(std::move(op), std::move(shape), "GFLOP/s", flops_per_call, time_repeats(fn, per_row_),
                          limits_.peak_gflops(), target);
    r.ceiling_kind = "f32 FMA peak, " + limits_.fma.isa + " (start of run)";
    add(std::move(r));
  }
  void bytes(std::string op, std::string shape, double bytes_per_call, const std::function<void()>& fn,
             double target = kMemoryBoundTarget) {
    if (!triad_) triad_ = std::make_unique<Triad>();
    const TimingPair t = time_interleaved(
        fn, [this] { triad_->run(); }, per_row_);
    BenchRow r = make_row(std::move(op), std::move(shape), "GB/s", bytes_per_call, t.a,
                          triad_->bytes_per_pass() / t.b.best_s * 1e-9, target);
    r.ceiling_kind = "triad (interleaved with the op)";
    add(std::move(r));
  }
  std::vector<BenchRow> rows() const { return rows_; }

 private:
  void add(BenchRow r) {
    if (on_row_) on_row_(r);
    rows_.push_back(std::move(r));
  }
  const MachineLimits& limits_;
  double per_row_;
  const std::function<void(const BenchRow&)>& on_row_;
  std::unique_ptr<Triad> triad_;  // 3 x triad_array_bytes(), allocated at the first memory-bound row
  std::vector<BenchRow> rows_;
};

// Dense projections of a small MoE expert / FFN at a training micro-batch: X [T, D] W [D, F], and the two
// backward products. FLOPs: 2 M N K each. Backward products accumulate (beta = 1), as the kernel table does.
void bench_matmul(Runner& run) {
  const int64_t T = 4096, D = 512, F = 1408;
  auto X = random_floats(T * D, -1, 1, 1), W = random_floats(D * F, -0.05f, 0.05f, 2);
  auto dY = random_floats(T * F, -1, 1, 3);
  std::vector<float> Y(static_cast<size_t>(T * F)), dX(static_cast<size_t>(T * D)), dW(static_cast<size_t>(D * F));
  const double flops = 2.0 * double(T) * double(D) * double(F);
  run.flops("matmul X.W (fwd)", dims({T, D}) + " . " + dims({D, F}), flops,
            [&] { ops::gemm(Device::kCPU, false, false, T, F, D, 1.0f, X.data(), D, W.data(), F, 0.0f, Y.data(), F); });
  run.flops("matmul dY.W^T (dX)", dims({T, F}) + " . (" + dims({D, F}) + ")^T", flops, [&] {
    ops::gemm(Device::kCPU, false, true, T, D, F, 1.0f, dY.data(), F, W.data(), F, 1.0f, dX.data(), D);
  });
  run.flops("matmul X^T.dY (dW)", "(" + dims({T, D}) + ")^T . " + dims({T, F}), flops, [&] {
    ops::gemm(Device::kCPU, true, false, D, F, T, 1.0f, X.data(), D, dY.data(), F, 1.0f, dW.data(), F);
  });
}

// Causal attention. FLOP convention (causal: half of the T x T scores): forward = 2 matmuls (Q K^T, P V) of
// 2 * (T*T/2) * D each per head; backward = 5 matmuls' worth (S recomputed, dP = dO V^T, dV = P^T dO,
// dQ = dS K, dK = dS^T Q), counted as 2.5 x forward; forward + backward = 3.5 x forward.
void bench_attention(Runner& run) {
  const AttentionShape s{.B = 1, .T = 1024, .H = 4, .Hk = 4, .Dk = 64, .Dv = 64, .scale = 0.125f};  // 1/sqrt(Dk)
  const int64_t nq = s.B * s.T * s.H * s.Dk, nk = s.B * s.T * s.Hk * s.Dk, nv = s.B * s.T * s.Hk * s.Dv;
  const int64_t no = s.B * s.T * s.H * s.Dv, nl = s.B * s.H * s.T;
  auto q = random_floats(nq, -2, 2, 4), k = random_floats(nk, -2, 2, 5), v = random_floats(nv, -1, 1, 6);
  auto dout = random_floats(no, -1, 1, 7);
  std::vector<float> out(static_cast<size_t>(no)), lse(static_cast<size_t>(nl));
  std::vector<float> dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nv));
  const double fwd = double(s.B * s.H) * 2.0 * (double(s.T) * double(s.T) / 2.0) * double(s.Dk + s.Dv);
  const std::string shape = "B1 T1024 H4 Dk=Dv=64 causal";
  auto forward = [&] { ops::attention_forward(Device::kCPU, out.data(), lse.data(), q.data(), k.data(), v.data(), s); };
  auto backward = [&] {
    ops::attention_backward(Device::kCPU, dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                            q.data(), k.data(), v.data(), s);
  };
  run.flops("attention fwd", shape, fwd, forward);
  run.flops("attention bwd (2.5x fwd)", shape, 2.5 * fwd, backward);
  run.flops(
      "attention fwd+bwd (3.5x)", shape, 3.5 * fwd,
      [&] {
        forward();
        backward();
      },
      kAttentionTarget);
}

// RMSNorm over a [T, D] activation, T = 65536 tokens (a 64 x 1024 batch; 128 MiB per tensor).
// Bytes: forward reads x, w and writes y, rstd: 4 (2 T D + D + T). Backward reads dy, x, w, rstd and reads +
// writes the accumulated dx and dw: 4 (4 T D + T + 3 D). The fwd+bwd row counts both.
void bench_rmsnorm(Runner& run) {
  const int64_t T = 65536, D = 512;
  auto x = random_floats(T * D, -2, 2, 8), w = random_floats(D, 0.5f, 1.5f, 9), dy = random_floats(T * D, -1, 1, 10);
  std::vector<float> y(static_cast<size_t>(T * D)), rstd(static_cast<size_t>(T)), dx(static_cast<size_t>(T * D)),
      dw(static_cast<size_t>(D));
  const double fwd = 4.0 * double(2 * T * D + D + T), bwd = 4.0 * double(4 * T * D + T + 3 * D);
  auto forward = [&] {
    ops::rmsnorm_forward(Device::kCPU, y.data(), rstd.data(), x.data(), w.data(), nullptr, T, D, 1e-6f);
  };
  run.bytes("rmsnorm fwd", dims({T, D}), fwd, forward);
  run.bytes("rmsnorm fwd+bwd", dims({T, D}), fwd + bwd, [&] {
    forward();
    ops::rmsnorm_backward(Device::kCPU, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), nullptr,
                          rstd.data(), T, D);
  });
}

// SiTU-GLU on the two halves of a fused [T, 2F] projection (ld = 2F), T = 16384, F = 1408 (88 MiB per [T, F]).
// Bytes: forward reads g, u, writes y: 4 * 3 T F. Backward reads dy, g, u and reads + writes the accumulated
// dg, du: 4 * 7 T F.
void bench_situ(Runner& run) {
  const int64_t T = 16384, F = 1408, ld = 2 * F;
  auto gu = random_floats(T * ld, -6, 6, 11), dy = random_floats(T * F, -1, 1, 12);
  std::vector<float> y(static_cast<size_t>(T * F)), dgu(static_cast<size_t>(T * ld));
  const SituParams p;
  const std::string shape = "g,u halves of " + dims({T, ld});
  run.bytes("situ_glu fwd", shape, 4.0 * 3.0 * double(T * F),
            [&] { ops::situ_glu_forward(Device::kCPU, y.data(), F, gu.data(), ld, gu.data() + F, ld, T, F, p); });
  run.bytes("situ_glu bwd", shape, 4.0 * 7.0 * double(T * F), [&] {
    ops::situ_glu_backward(Device::kCPU, dgu.data(), ld, dgu.data() + F, ld, dy.data(), F, gu.data(), ld, gu.data() + F,
                           ld, T, F, p);
  });
}

// AdamW over n = 16M parameters (64 MiB per tensor). Bytes: reads p, g, m, v and writes p, m, v: 4 * 7 n.
void bench_adamw(Runner& run) {
  const int64_t n = int64_t(16) << 20;
  auto p = random_floats(n, -1, 1, 13), g = random_floats(n, -1, 1, 14);
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  AdamWParams hp;
  hp.weight_decay = 0.1f;
  run.bytes("adamw update", std::to_string(n >> 20) + "M params", 4.0 * 7.0 * double(n), [&] {
    ops::adamw_update(Device::kCPU, p.data(), g.data(), m.data(), v.data(), n, hp);
    ++hp.step;
  });
}

// MoE token permutation: T = 4096 tokens, each copied to its top-8 experts (n = 32768 copies, in expert
// order, so token order is shuffled), rows of D = 512. The copies ([n, D], 64 MiB, one buffer written by the
// gather and another read by the scatter) go to DRAM; the [T, D] token table (8 MiB) may stay in cache, and
// is counted once.
// Bytes: gather reads the table once, writes n rows, reads n int32 indices: 4 (T D + n D + n). Scatter-add
// reads n rows, reads + writes the [T, D] output once, reads n weights and n indices: 4 (n D + 2 T D + 2 n).
void bench_moe(Runner& run) {
  const int64_t T = 4096, k = 8, D = 512, n = T * k;
  auto x = random_floats(T * D, -1, 1, 15), expert_out = random_floats(n * D, -1, 1, 16);
  auto w = random_floats(n, 0, 1, 17);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(i / k);
  std::shuffle(idx.begin(), idx.end(), std::mt19937(18));
  std::vector<float> copies(static_cast<size_t>(n * D)), y(static_cast<size_t>(T * D));
  const double gather = 4.0 * double(T * D + n * D + n), scatter = 4.0 * double(n * D + 2 * T * D + 2 * n);
  const std::string shape = dims({T, D}) + " top-" + std::to_string(k) + " -> " + dims({n, D});
  auto do_gather = [&] { ops::gather_rows(Device::kCPU, copies.data(), x.data(), idx.data(), n, T, D); };
  auto do_scatter = [&] {
    ops::scatter_add_rows(Device::kCPU, y.data(), expert_out.data(), idx.data(), w.data(), n, T, D);
  };
  run.bytes("moe gather", shape, gather, do_gather, 0.0);
  run.bytes("moe scatter_add (weighted)", shape, scatter, do_scatter, 0.0);
  run.bytes("moe gather + scatter_add", shape, gather + scatter, [&] {
    do_gather();
    do_scatter();
  });
}

}  // namespace

nlohmann::ordered_json run_gemm_backends(const MachineLimits& limits, double budget_s, std::FILE* out) {
  struct Shape {
    const char* what;
    bool ta, tb;
    int64_t M, N, K;
  };
  // The products myriad runs, at configs/small.json's training shape (T = 1024, D = 512, FFN 1536, vocabulary
  // 16384), Kimi-Linear's prefill (hidden 2304), a latent expert's rows, a KDA chunk, and a decode batch.
  const Shape shapes[] = {
      {"linear fwd  X W^T", false, true, 1024, 1536, 512},
      {"linear dX   dY W", false, false, 1024, 512, 1536},
      {"linear dW   dY^T X", true, false, 1536, 512, 1024},
      {"lm_head fwd", false, true, 1024, 16384, 512},
      {"lm_head dW  dY^T X", true, false, 16384, 512, 1024},
      {"prefill     X W^T (D 2304)", false, true, 512, 4096, 2304},
      {"expert      64 rows", false, true, 64, 256, 256},
      {"KDA chunk   Q K^T", false, true, 64, 64, 64},
      {"KDA chunk   A V", false, false, 64, 64, 64},
      {"KDA chunk   K^T V", true, false, 64, 64, 64},
      {"expert dW   dY^T X", true, false, 256, 256, 64},
      {"dW          dY^T X (512)", true, false, 512, 512, 1024},
      {"decode      4 rows", false, true, 4, 4096, 1024},
      {"square      2048^3", false, false, 2048, 2048, 2048},
  };
  const int64_t n_shapes = int64_t(sizeof shapes / sizeof shapes[0]);
  const bool onednn = ops::onednn_available();
  const double per_call = budget_s / double(n_shapes * (onednn ? 3 : 2));
  const double peak = limits.peak_gflops();
  std::fprintf(out,
               "\nGEMM backends on myriad's shapes (GFLOP/s, best of repeats; %% of the f32 FMA peak %.0f; "
               "'myriad' = ops::gemm as routed here):\n",
               peak);
  std::fprintf(out, "  %-28s %-18s %16s %22s %16s %9s\n", "product", "M x N x K", "oneDNN",
               ("OpenBLAS " + ops::openblas_kernel()).c_str(), "myriad", "vs best");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  double worst = 1e9;
  for (const Shape& s : shapes) {
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N));
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(i % 7) * 0.25f - 0.75f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(i % 5) * 0.25f - 0.5f;
    // A KDA chunk's products are tiny: 64 of them per call (one per head), as the chunked form runs them.
    const int64_t reps = s.M * s.N * s.K < (int64_t(1) << 20) ? 64 : 1;
    const double flops = 2.0 * double(s.M * s.N * s.K * reps);
    auto time_lib = [&](int which) {
      const Timing t = time_repeats(
          [&] {
            for (int64_t r = 0; r < reps; ++r) {
              if (which == 2)
                ops::gemm(Device::kCPU, s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(),
                          s.N);
              else
                ops::gemm_on(which == 0 ? ops::GemmLibrary::kOneDnn : ops::GemmLibrary::kOpenBlas, s.ta, s.tb, s.M, s.N,
                             s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N);
            }
          },
          per_call);
      return flops / t.best_s * 1e-9;
    };
    const double g_dnnl = onednn ? time_lib(0) : 0.0, g_oblas = time_lib(1), g_myriad = time_lib(2);
    const double best = std::max(g_dnnl, g_oblas), vs = g_myriad / best;
    worst = std::min(worst, vs);
    char dims[48];
    std::snprintf(dims, sizeof dims, "%lldx%lldx%lld%s", (long long)s.M, (long long)s.N, (long long)s.K,
                  reps > 1 ? " x64" : "");
    auto cell = [&](double g) {
      char b[32];
      if (g <= 0)
        std::snprintf(b, sizeof b, "-");
      else
        std::snprintf(b, sizeof b, "%.1f (%.0f%%)", g, 100 * g / peak);
      return std::string(b);
    };
    std::fprintf(out, "  %-28s %-18s %16s %22s %16s %8.0f%%\n", s.what, dims, cell(g_dnnl).c_str(),
                 cell(g_oblas).c_str(), cell(g_myriad).c_str(), 100 * vs);
    rows.push_back({{"product", s.what},
                    {"M", s.M},
                    {"N", s.N},
                    {"K", s.K},
                    {"ta", s.ta},
                    {"tb", s.tb},
                    {"calls", reps},
                    {"onednn_gflops", g_dnnl},
                    {"openblas_gflops", g_oblas},
                    {"myriad_gflops", g_myriad},
                    {"myriad_vs_best", vs}});
  }
  const bool met = worst >= kGemmVsBestTarget;
  std::fprintf(out, "  ops::gemm within %.0f%% of the best library on every shape (worst %.0f%%): %s\n",
               100 * (1 - kGemmVsBestTarget), 100 * worst, met ? "PASS" : "below");
  return {{"openblas_kernel", ops::openblas_kernel()},
          {"gemm", limits.gemm},
          {"rows", rows},
          {"worst_myriad_vs_best", worst},
          {"target", kGemmVsBestTarget},
          {"pass", met}};
}

nlohmann::ordered_json run_quant_products(const MachineLimits& limits, double budget_s, std::FILE* out) {
  // One projection at Kimi-Linear-48B's hidden size (2304 -> 4096) for decode (1 row), a decode batch (16), a
  // prefill chunk (128) and a prompt (512): f32 through ops::gemm, and q8 / q4 through each CPU path of quant_matmul.
  const int64_t R = 4096, Cols = 2304;
  const int64_t ns[] = {1, 8, 16, 128, 512};
  const QuantKernel strips = quant_kernel_available(QuantKernel::kAvx512Vnni) ? QuantKernel::kAvx512Vnni
                             : quant_kernel_available(QuantKernel::kAvx2)     ? QuantKernel::kAvx2
                                                                              : QuantKernel::kScalar;
  struct Path {
    QuantType type;
    QuantKernel kernel;
  };
  std::vector<Path> paths;
  for (QuantType t : {QuantType::kQ8, QuantType::kQ4})
    for (QuantKernel k : {QuantKernel::kAuto, strips, QuantKernel::kAvx512VnniGemm, QuantKernel::kDequantGemm})
      if (quant_kernel_available(k)) paths.push_back({t, k});
  const double peak = limits.peak_gflops(), vnni = limits.vnni.gops;
  const double per_call = budget_s / double((paths.size() + 1) * (sizeof ns / sizeof ns[0]));
  std::vector<float> W(size_t(R * Cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& v : W) v = nd(rng);
  Tensor wt = Tensor::empty({R, Cols}, DType::kF32);
  std::copy(W.begin(), W.end(), wt.data<float>());
  const QuantMatrix q8 = quantize(wt, QuantType::kQ8), q4 = quantize(wt, QuantType::kQ4);
  std::fprintf(out, "\nquantized products, W [%lld, %lld] (GFLOP/s, best of repeats; %% of the f32 FMA peak %.0f%s):\n",
               (long long)R, (long long)Cols, peak,
               vnni > 0 ? (", and of the int8 VNNI peak " + std::to_string(int(vnni)) + " GOP/s").c_str() : "");
  std::fprintf(out, "  %-20s", "rows of x");
  for (int64_t n : ns) std::fprintf(out, " %14lld", (long long)n);
  std::fprintf(out, "\n");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<double> f32_g;
  auto line = [&](const char* name, const std::function<void(int64_t, const float*, float*)>& product) {
    std::fprintf(out, "  %-20s", name);
    nlohmann::ordered_json row = {{"path", name}};
    std::vector<double> gs;
    for (int64_t n : ns) {
      std::vector<float> x(size_t(n * Cols)), y(size_t(n * R));
      for (float& v : x) v = nd(rng) * 50.0f;
      const Timing t = time_repeats([&] { product(n, x.data(), y.data()); }, per_call);
      const double g = 2.0 * double(n * R * Cols) / t.best_s * 1e-9;
      gs.push_back(g);
      char cell[48];
      std::snprintf(cell, sizeof cell, "%.0f (%.0f%%)", g, 100 * g / peak);
      std::fprintf(out, " %14s", cell);
      row["gflops_n" + std::to_string(n)] = g;
    }
    std::fprintf(out, "\n");
    rows.push_back(row);
    return gs;
  };
  f32_g = line("f32 ops::gemm", [&](int64_t n, const float* x, float* y) {
    ops::gemm(Device::kCPU, false, true, n, R, Cols, 1.0f, x, Cols, W.data(), Cols, 0.0f, y, R);
  });
  nlohmann::ordered_json verdicts = nlohmann::ordered_json::object();
  for (const Path& p : paths) {
    const QuantMatrix& q = p.type == QuantType::kQ8 ? q8 : q4;
    const std::string name = std::string(quant_type_name(p.type)) + " " + quant_kernel_name(p.kernel);
    const auto gs = line(name.c_str(), [&](int64_t n, const float* x, float* y) {
      ops::quant_matmul(Device::kCPU, q, x, n, y, p.kernel);
    });
    if (p.kernel == QuantKernel::kAuto) verdicts[quant_type_name(p.type)] = gs.back() / f32_g.back();
  }
  std::fprintf(out, "  at %lld rows (prefill): q8 auto / f32 %.2fx, q4 auto / f32 %.2fx (kAuto from %lld rows: %s)\n",
               (long long)ns[4], verdicts["q8"].get<double>(), verdicts["q4"].get<double>(),
               (long long)quant_gemm_rows(), quant_gemm_exact_x() ? "dequant + sgemm" : "the packed int8 GEMM");
  return {{"rows_of_x", ns}, {"paths", rows}, {"prefill_vs_f32", verdicts}};
}

std::vector<BenchRow> run_op_bench(const MachineLimits& limits, double budget_s,
                                   const std::function<void(const BenchRow&)>& on_row) {
  Runner run(limits, budget_s / kRows, on_row);
  bench_matmul(run);
  bench_attention(run);
  bench_rmsnorm(run);
  bench_situ(run);
  bench_adamw(run);
  bench_moe(run);
  return run.rows();
}

}  // namespace myriad::bench

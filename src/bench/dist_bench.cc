#include "bench/dist_bench.h"

#include <mpi.h>

#include <algorithm>
#include <functional>
#include <random>

#include "autograd/tape.h"
#include "core/error.h"
#include "core/timing.h"
#include "dist/expert_parallel.h"
#include "model/routing.h"

namespace myriad::bench {

namespace {

// Times a and b interleaved, the same number of repeats on every rank (derived from all-reduced warm-up times),
// each repeat behind a barrier; returns, for each, the best over repeats of the slowest rank's time.
std::pair<double, double> time_pair(Communicator& world, const std::function<void()>& a, const std::function<void()>& b,
                                    double budget_s) {
  a();
  b();
  world.barrier();
  const double t0 = now_seconds();
  a();
  b();
  const double one = world.all_reduce_value(now_seconds() - t0, ReduceOp::kMax);
  const int reps = int(std::clamp(budget_s / std::max(one, 1e-9), 5.0, 2000.0));
  std::vector<double> ta(static_cast<size_t>(reps)), tb(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    for (int which = 0; which < 2; ++which) {
      const bool first_a = (r % 2 == 0) == (which == 0);  // alternate which goes first
      world.barrier();
      const double s = now_seconds();
      (first_a ? a : b)();
      (first_a ? ta : tb)[size_t(r)] = now_seconds() - s;
    }
  }
  world.all_reduce_f64(ta.data(), reps, ReduceOp::kMax);
  world.all_reduce_f64(tb.data(), reps, ReduceOp::kMax);
  return {*std::min_element(ta.begin(), ta.end()), *std::min_element(tb.begin(), tb.end())};
}

// Per-destination row counts an MoE layer sends: copies spread over ranks with a +-25% imbalance (as routing
// after balancing leaves it), the same draw on every rank for its own row of the matrix.
std::vector<int64_t> uneven_counts(int64_t copies, int R, int src, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + uint64_t(src));
  std::uniform_real_distribution<double> u(0.75, 1.25);
  std::vector<double> w(static_cast<size_t>(R));
  double sum = 0;
  for (double& x : w) sum += (x = u(rng));
  std::vector<int64_t> c(static_cast<size_t>(R));
  int64_t used = 0;
  for (int p = 0; p < R; ++p) used += (c[size_t(p)] = int64_t(double(copies) * w[size_t(p)] / sum));
  c[size_t(R - 1)] += copies - used;
  return c;
}

}  // namespace

std::vector<DistBenchRow> run_dist_bench(Communicator& world, double seconds) {
  MYRIAD_REQUIRE(std::string(world.backend()) == "mpi", kValue,
                 "bench dist: runs under mpirun (scripts/mpirun.sh -np 2 myriad bench dist)");
  const int R = world.size(), me = world.rank();
  struct Size {
    int64_t copies, width;
  };
  // Per rank per MoE layer call: a tiny model's 1024 tokens x top-2 at width 64 up to 8192 copies of a 2048-wide
  // latent (K3's routed experts see a latent narrower than the 7168 hidden size).
  const std::vector<Size> sizes = {{2048, 64}, {2048, 512}, {8192, 512}, {8192, 2048}};
  const double per_size = seconds / double(sizes.size() + 1);
  std::vector<DistBenchRow> rows;
  for (const Size& sz : sizes) {
    // The count matrix: rank p sends counts[p][q] rows to q; everyone knows it (same seeds).
    std::vector<std::vector<int64_t>> counts(static_cast<size_t>(R));
    for (int p = 0; p < R; ++p) counts[size_t(p)] = uneven_counts(sz.copies, R, p, uint64_t(sz.width));
    std::vector<int64_t> send(static_cast<size_t>(R)), recv(static_cast<size_t>(R));
    for (int q = 0; q < R; ++q) {
      send[size_t(q)] = counts[size_t(me)][size_t(q)] * sz.width;
      recv[size_t(q)] = counts[size_t(q)][size_t(me)] * sz.width;
    }
    int64_t ns = 0, nr = 0;
    for (int q = 0; q < R; ++q) ns += send[size_t(q)], nr += recv[size_t(q)];
    std::vector<float> sbuf(static_cast<size_t>(ns)), rbuf(static_cast<size_t>(nr));
    for (size_t i = 0; i < sbuf.size(); ++i) sbuf[i] = float(i % 977) * 0.5f;
    // MPI's own call on the same buffers, its int counts and displacements made once outside the timing.
    std::vector<int> sc(static_cast<size_t>(R)), sd(static_cast<size_t>(R)), rc(static_cast<size_t>(R)),
        rd(static_cast<size_t>(R));
    for (int q = 0, s_at = 0, r_at = 0; q < R; ++q) {
      sc[size_t(q)] = int(send[size_t(q)]);
      rc[size_t(q)] = int(recv[size_t(q)]);
      sd[size_t(q)] = s_at;
      rd[size_t(q)] = r_at;
      s_at += sc[size_t(q)];
      r_at += rc[size_t(q)];
    }
    auto ours = [&] { world.all_to_all_v(sbuf.data(), send, rbuf.data(), recv, DType::kF32); };
    auto mpi = [&] {
      MPI_Alltoallv(sbuf.data(), sc.data(), sd.data(), MPI_FLOAT, rbuf.data(), rc.data(), rd.data(), MPI_FLOAT,
                    MPI_COMM_WORLD);
    };
    DistBenchRow row;
    row.what = "all_to_all_v";
    row.shape = std::to_string(sz.copies) + " copies x " + std::to_string(sz.width) + " f32 per rank";
    row.bytes_per_rank = double(ns) * 4.0;
    std::tie(row.ours_s, row.mpi_s) = time_pair(world, ours, mpi, per_size);
    row.targeted = true;
    rows.push_back(row);
  }
  {  // The whole dispatch + combine of an MoE layer, forward (no tape): 1024 tokens x top-2 x 512 wide per rank,
     // 8 experts per rank, uniform routing; against the raw all-to-all of its rows, there and back.
    ag::NoGradGuard no_grad;
    const int64_t T = 1024, k = 2, L = 512, E = 8 * int64_t(R);
    std::mt19937_64 rng(uint64_t(7 + me));
    std::vector<int32_t> idx(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t) {
      const int32_t a = int32_t(rng() % uint64_t(E));
      idx[size_t(t * k)] = a;
      idx[size_t(t * k + 1)] = int32_t((a + 1 + rng() % uint64_t(E - 1)) % E);
    }
    Tensor z = Tensor::empty({T, L});
    for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = float(i % 101) * 0.01f;
    const ExpertGroups groups = group_by_expert(Tensor::from_vector(idx, {T, k}), E);
    const ag::Var weights(Tensor::full({T, k}, 0.5f), false);
    ExpertParallelDispatcher ep(world);
    ExpertBatch probe = ep.dispatch(ag::Var(z, false), groups, weights);
    std::vector<float> sbuf(static_cast<size_t>(T * k * L)), rbuf(static_cast<size_t>(probe.rows.value().numel()));
    std::vector<int64_t> send(probe.sent_rows), recv(probe.received_rows);
    for (auto& x : send) x *= L;
    for (auto& x : recv) x *= L;
    auto full = [&] {
      ExpertBatch b = ep.dispatch(ag::Var(z, false), groups, weights);
      (void)ep.combine(b.rows, b, T);
    };
    auto raw = [&] {
      world.all_to_all_v(sbuf.data(), send, rbuf.data(), recv, DType::kF32);
      world.all_to_all_v(rbuf.data(), recv, sbuf.data(), send, DType::kF32);
    };
    DistBenchRow row;
    row.what = "dispatch+combine";
    row.shape = "1024 tok x top-2 x 512, " + std::to_string(E) + " experts";
    row.bytes_per_rank = double(T * k * L) * 4.0 * 2.0;
    std::tie(row.ours_s, row.mpi_s) = time_pair(world, full, raw, per_size);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace myriad::bench

#include "dist/expert_parallel.h"

#include <chrono>
#include <numeric>

#include "autograd/functions.h"
#include "core/error.h"
#include "dist/mpi_communicator.h"

namespace myriad {

namespace {

// Seconds this process has spent in the expert all-to-alls (rows both ways, counts): the trainer reports them.
double g_exchange_seconds = 0;
struct ExchangeTimer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~ExchangeTimer() {
    g_exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

}  // namespace

double expert_exchange_seconds() {
  return g_exchange_seconds;
}

ag::Var all_to_all_rows(const ag::Var& x, std::span<const int64_t> send_rows, std::span<const int64_t> recv_rows,
                        Communicator& comm) {
  MYRIAD_REQUIRE(x.value().ndim() == 2 && x.value().dtype() == DType::kF32 && x.value().device() == Device::kCPU,
                 kShape, "all_to_all_rows: x must be host f32 [n, N], got ", shape_str(x.shape()));
  const int64_t N = x.shape()[1];
  const int64_t sent = std::accumulate(send_rows.begin(), send_rows.end(), int64_t(0));
  const int64_t received = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t(0));
  MYRIAD_REQUIRE(sent == x.shape()[0], kShape, "all_to_all_rows: ", x.shape()[0], " rows, but the blocks sum to ",
                 sent);
  std::vector<int64_t> send_elems(send_rows.size()), recv_elems(recv_rows.size());
  for (size_t p = 0; p < send_rows.size(); ++p) send_elems[p] = send_rows[p] * N;
  for (size_t p = 0; p < recv_rows.size(); ++p) recv_elems[p] = recv_rows[p] * N;
  const Tensor xc = x.value().contiguous();
  Tensor y = Tensor::empty({received, N});
  {
    const ExchangeTimer timer;
    comm.all_to_all_v(xc.raw_data(), send_elems, y.raw_data(), recv_elems, DType::kF32);
  }
  const bool needs = ag::needs_grad({&x});
  ag::Var out(y, needs);
  if (needs) {
    auto oi = out.impl();
    // The node must run on every rank (its backward is a collective): the tape skips a node whose outputs have
    // no gradient, which an output no later op touched would not have; a zero gradient is allocated now.
    out.grad_buffer();
    ag::Tape::current().record("all_to_all_rows", {oi}, [x, oi, send_elems, recv_elems, &comm, sent, N]() mutable {
      Tensor dx = Tensor::empty({sent, N});
      const Tensor dy = oi->grad.contiguous();
      const ExchangeTimer timer;
      comm.all_to_all_v(dy.raw_data(), recv_elems, dx.raw_data(), send_elems, DType::kF32);
      if (x.requires_grad()) ag::cpu_accumulate(x.grad_buffer(), dx);
    });
  }
  return out;
}

MoeDispatcher::Range ExpertParallelDispatcher::local_experts(int64_t num_experts) const {
  const int64_t R = comm_.size();
  MYRIAD_REQUIRE(num_experts % R == 0, kConfig, "expert parallelism: ", R, " ranks do not divide num_experts ",
                 num_experts);
  const int64_t per = num_experts / R;
  return {comm_.rank() * per, per};
}

ExpertBatch ExpertParallelDispatcher::dispatch(const ag::Var& z, const ExpertGroups& groups,
                                               const ag::Var& weights) const {
  MYRIAD_REQUIRE(z.value().ndim() == 2 && weights.value().ndim() == 2 && z.shape()[0] == weights.shape()[0], kShape,
                 "moe dispatch: token rows ", shape_str(z.shape()), " and weights ", shape_str(weights.shape()),
                 " must be [T, L] and [T, k]");
  const int R = comm_.size();
  const int64_t E = int64_t(groups.start.size()) - 1;
  const Range local = local_experts(E);
  const int64_t El = local.count;

  // What goes where: the copies of rank p's experts are positions [start[p El], start[(p+1) El]).
  std::vector<int64_t> send_rows(static_cast<size_t>(R)), expert_counts(size_t(R * El));
  for (int p = 0; p < R; ++p) {
    send_rows[size_t(p)] = groups.start[size_t((p + 1) * El)] - groups.start[size_t(p * El)];
    for (int64_t j = 0; j < El; ++j) expert_counts[size_t(p * El + j)] = groups.load(p * El + j);
  }
  std::vector<int64_t> received_counts(size_t(R * El));  // [source, local expert]
  const std::vector<int64_t> per_rank(static_cast<size_t>(R), El);
  {
    const ExchangeTimer timer;
    comm_.all_to_all_v(expert_counts.data(), per_rank, received_counts.data(), per_rank, DType::kI64);
  }
  std::vector<int64_t> recv_rows(static_cast<size_t>(R), 0);
  for (int p = 0; p < R; ++p)
    for (int64_t j = 0; j < El; ++j) recv_rows[size_t(p)] += received_counts[size_t(p * El + j)];

  ExpertBatch b;
  b.first_expert = local.first;
  const ag::Var grouped = gather_copies(b, z, groups, weights);  // [served, L], grouped by expert
  const ag::Var received = all_to_all_rows(grouped, send_rows, recv_rows, comm_);

  // Source-major -> expert-major: local expert j's rows are, for each source in rank order, that source's block.
  std::vector<int64_t> source_start(static_cast<size_t>(R + 1), 0);  // first row of each source's block
  for (int p = 0; p < R; ++p) source_start[size_t(p + 1)] = source_start[size_t(p)] + recv_rows[size_t(p)];
  std::vector<int64_t> within(static_cast<size_t>(R), 0);  // rows of the source block before expert j
  const int64_t total = source_start[size_t(R)];
  std::vector<int32_t> to_expert(static_cast<size_t>(total)), to_source(static_cast<size_t>(total));
  b.offsets.assign(static_cast<size_t>(El + 1), 0);
  int64_t at = 0;
  for (int64_t j = 0; j < El; ++j) {
    b.offsets[size_t(j)] = at;
    for (int p = 0; p < R; ++p) {
      const int64_t n = received_counts[size_t(p * El + j)], first = source_start[size_t(p)] + within[size_t(p)];
      if (p > 0 && n > 0 && at > b.offsets[size_t(j)]) b.row_cuts.push_back(at);  // a new source's piece
      for (int64_t i = 0; i < n; ++i, ++at) {
        to_expert[size_t(at)] = int32_t(first + i);
        to_source[size_t(first + i)] = int32_t(at);
      }
      within[size_t(p)] += n;
    }
  }
  b.offsets[size_t(El)] = at;
  b.rows = ag::gather_rows(received, Tensor::from_vector(to_expert, {total}));
  b.sent_rows = std::move(send_rows);
  b.received_rows = std::move(recv_rows);
  b.to_source_order = Tensor::from_vector(to_source, {total});
  return b;
}

ag::Var ExpertParallelDispatcher::combine(const ag::Var& expert_out, const ExpertBatch& batch, int64_t tokens) const {
  MYRIAD_REQUIRE(expert_out.value().ndim() == 2 && expert_out.shape()[0] == batch.to_source_order.numel(), kShape,
                 "moe combine: expert outputs ", shape_str(expert_out.shape()), " for ", batch.to_source_order.numel(),
                 " received copies");
  const ag::Var source_major = ag::gather_rows(expert_out, batch.to_source_order);
  const ag::Var back = all_to_all_rows(source_major, batch.received_rows, batch.sent_rows, comm_);  // [served, L]
  return ag::scatter_add_rows(tokens, back, batch.copy_token, batch.copy_weight);
}

std::function<bool(const ParamSpec&)> expert_shard_filter(const ModelConfig& config, int ep_rank, int ep) {
  MYRIAD_REQUIRE(ep >= 1 && ep_rank >= 0 && ep_rank < ep && config.num_experts % ep == 0, kConfig, "expert shard ",
                 ep_rank, " of ", ep, " for num_experts ", config.num_experts);
  const int64_t per = config.num_experts / ep;
  return [per, ep_rank](const ParamSpec& s) { return s.expert < 0 || s.expert / per == ep_rank; };
}

std::unique_ptr<ExpertParallelJob> start_expert_parallel_job(int ep) {
  if (ep == 1 && !launched_by_mpirun()) return nullptr;
  auto job = std::make_unique<ExpertParallelJob>();
  job->world = &mpi_world();
  Communicator& world = *job->world;
  check_on_all_ranks(world, [&] {
    MYRIAD_REQUIRE(ep == world.size(), kConfig, "--ep ", ep, " but this job has ", world.size(),
                   " ranks: inference splits the experts over every rank (mpirun -np ", ep, ")");
  });
  start_ranks(world);
  job->groups = make_process_groups(world, ParallelDims{1, ep, 1});
  job->dispatcher = std::make_unique<ExpertParallelDispatcher>(*job->groups.ep_group);
  return job;
}

ParamFilter ExpertParallelJob::filter(const ModelConfig& config) {
  check_on_all_ranks(*world, [&] { validate_parallel_dims(groups.dims, world->size(), config); });
  return groups.dims.ep > 1 ? expert_shard_filter(config, groups.e, groups.dims.ep) : ParamFilter{};
}

}  // namespace myriad

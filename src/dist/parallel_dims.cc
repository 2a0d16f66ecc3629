#include "dist/parallel_dims.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "io/atomic_file.h"

namespace myriad {

std::string ParallelDims::str() const {
  return myriad::str("dp ", dp, " x ep ", ep, " x sp ", sp);
}

void validate_parallel_dims(const ParallelDims& dims, int world_size, const ModelConfig& c) {
  for (const auto& [flag, v] : {std::pair{"--dp", dims.dp}, std::pair{"--ep", dims.ep}, std::pair{"--sp", dims.sp}})
    MYRIAD_REQUIRE(v >= 1, kConfig, flag, " ", v, ": must be at least 1");
  MYRIAD_REQUIRE(dims.world() == world_size, kConfig, "--dp ", dims.dp, " x --ep ", dims.ep, " x --sp ", dims.sp, " = ",
                 dims.world(), " ranks, but this job has ", world_size,
                 world_size == 1 ? " (start it with mpirun -np N)" : " (mpirun -np)");
  if (dims.ep > 1) {
    bool moe = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe = moe || c.is_moe_layer(l);
    MYRIAD_REQUIRE(moe && c.num_experts > 0, kConfig, "--ep ", dims.ep, ": config ", c.source,
                   " has no MoE layer to split");
    MYRIAD_REQUIRE(c.num_experts % dims.ep == 0, kConfig, "--ep ", dims.ep, " does not divide num_experts ",
                   c.num_experts);
  }
}

ProcessGroups make_process_groups(Communicator& world, const ParallelDims& dims) {
  ProcessGroups g;
  g.dims = dims;
  g.world = &world;
  g.rank = world.rank();
  g.s = g.rank % dims.sp;
  g.e = (g.rank / dims.sp) % dims.ep;
  g.d = g.rank / (dims.sp * dims.ep);
  g.data_rank = g.d * dims.ep + g.e;
  // Every rank calls each split (collective), in the same order.
  g.ep_group = world.split(g.d * dims.sp + g.s, g.e);
  g.dp_group = world.split(g.e * dims.sp + g.s, g.d);
  g.data_group = world.split(g.s, g.data_rank);
  g.sp_group = world.split(g.data_rank, g.s);
  g.expert_replicas = world.split(g.e, g.d * dims.sp + g.s);
  return g;
}

void require_same_on_all_ranks(Communicator& world, const std::string& what, const std::string& text) {
  const int64_t mine = int64_t(std::hash<std::string>{}(text));
  std::vector<int64_t> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::kI64);
  for (int p = 1; p < world.size(); ++p)
    MYRIAD_REQUIRE(all[size_t(p)] == all[0], kConfig, "rank ", p, " has a different ", what,
                   " from rank 0: every rank of a job must run the same ", what);
}

void check_on_all_ranks(Communicator& world, const std::function<void()>& check) {
  std::exception_ptr error;
  try {
    check();
  } catch (const Error&) {
    error = std::current_exception();
  }
  const int32_t first = world.all_reduce_value<int32_t>(error ? world.rank() : INT32_MAX, ReduceOp::kMin);
  if (first == INT32_MAX) return;
  if (world.rank() == first) std::rethrow_exception(error);
  world.barrier();  // rank `first` never comes: it reports and ends the job, this rank with it
  throw_error(ErrorKind::kValue, "rank ", first, " failed a check");  // not reached under MPI
}

void start_ranks(Communicator& world) {
  if (world.size() == 1) return;
  if (!std::getenv("MYRIAD_THREADS")) {  // ranks sharing a machine share its cores
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int per_machine = local ? std::max(1, std::atoi(local)) : 1;
    set_num_threads(std::max(1, int(std::thread::hardware_concurrency()) / per_machine));
  }
  check_on_all_ranks(world,
                     [&] { require_same_on_all_ranks(world, "myriad executable", read_file("/proc/self/exe")); });
}

}  // namespace myriad

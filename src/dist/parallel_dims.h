// The parallel layout of a job (issue 16): dp x ep x sp ranks, validated up front, and the process groups the
// collectives run over.
//
// Rank layout: rank = (d * ep + e) * sp + s for data-parallel index d, expert-parallel index e and
// sequence-parallel index s. The ep ranks of one expert group process different sequences (expert parallelism
// borrows its ranks from data parallelism, as in DeepSeek-V3 and torchtitan), so dp * ep ranks read different
// data (data_rank = d * ep + e) and every dense weight is replicated on all ranks; routed expert e lives on the
// ep index that owns it (a contiguous slice of num_experts / ep experts) and is replicated over dp.
//
// Groups: ep (same d and s: the all-to-all of the token copies), dp (same e and s: the experts' gradients),
// data (same s: different sequences; the statistics of a step), world (dense gradients, the skip decision).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "model/config.h"

namespace myriad {

struct ParallelDims {
  int dp = 1, ep = 1, sp = 1;
  int world() const { return dp * ep * sp; }
  int data_ranks() const { return dp * ep; }
  bool distributed() const { return world() > 1; }
  std::string str() const;  // "dp 2 x ep 2 x sp 1"
};

// One kConfig error naming the flag and the values: a degree below 1, a product that is not the number of
// ranks mpirun started, --ep that does not divide num_experts (or on a model without MoE layers). (How the
// sequence splits over --sp is the trainer's check: it depends on the stages.)
void validate_parallel_dims(const ParallelDims& dims, int world_size, const ModelConfig& config);

// This rank's place in the layout and its groups (split from the world communicator).
struct ProcessGroups {
  ParallelDims dims;
  int rank = 0;  // in the world
  int d = 0, e = 0, s = 0;
  int data_rank = 0;  // d * ep + e: which block of a step's sequences this rank reads
  Communicator* world = nullptr;
  std::unique_ptr<Communicator> ep_group, dp_group, data_group;
  std::unique_ptr<Communicator> sp_group;         // same d and e: the shards of one sequence, in token order
  std::unique_ptr<Communicator> expert_replicas;  // same e: every copy of this rank's experts (dp x sp of them)
  bool is_root() const { return rank == 0; }
};

ProcessGroups make_process_groups(Communicator& world, const ParallelDims& dims);

// Refuses a job whose ranks disagree on `what` (a config's bytes, the code version): the hash of every rank's
// text is all-gathered and compared; the error names the first rank that differs from rank 0.
void require_same_on_all_ranks(Communicator& world, const std::string& what, const std::string& text);

// What every process of a multi-rank job does first (collective; nothing with one rank): takes its share of
// the machine's cores (cores / ranks on this machine, from OMPI_COMM_WORLD_LOCAL_SIZE) unless MYRIAD_THREADS
// says otherwise, and refuses ranks running different executables (one error).
void start_ranks(Communicator& world);

// Runs `check` on every rank (it may make collectives whose outcome is the same on all ranks). If it throws on
// any rank, the lowest such rank rethrows its error (the CLI prints it and ends the job) and the others wait to
// be ended: one message for the job, not one per rank. Returns normally when no rank failed.
void check_on_all_ranks(Communicator& world, const std::function<void()>& check);

}  // namespace myriad

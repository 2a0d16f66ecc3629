// Routing statistics over the data ranks (issue 16, docs/design.md §1.6): a step's balancing and metrics see the tokens
// of every rank, so the router bias (and every logged figure) is the one a single process would get on the
// whole step. Quantile balancing sums its radix-select counts (model/balancing.h QbRadixSelect): the bias is
// bit-identical to the single-process qb_estimate_bias, not within a bin of it. On a one-rank communicator the
// reductions are identities and QB is qb_estimate_bias itself (the same bias, faster).
#pragma once

#include <vector>

#include "dist/communicator.h"
#include "model/balancing.h"
#include "model/transformer.h"

namespace myriad {

// Sums r's load, copies, dropped and rerouted over `data` in place; returns the tokens (score rows) of all ranks.
int64_t all_reduce_routing(Communicator& data, RoutingStats& r);

// The new router bias [n] from every rank's scores [m_r, n] (m_r may be 0) routed with bias [n] (equal on all
// ranks): kQbRadixPasses all-reduces of n * 256 int64. total_tokens: all_reduce_routing's answer.
std::vector<float> qb_estimate_bias_across(Communicator& data, const Tensor& scores, const float* bias, int64_t k,
                                           int64_t total_tokens);

// summarize_routing over all ranks: r already reduced (all_reduce_routing), this rank's scores in r.scores;
// the mean entropy is averaged over every rank's tokens (one more all-reduce).
RoutingStatsSummary summarize_routing_across(Communicator& data, const RoutingStats& r, int64_t k,
                                             int64_t total_tokens);

}  // namespace myriad

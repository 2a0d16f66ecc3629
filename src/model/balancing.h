// MoE load balancing (docs/design.md §1.6) as pure functions over one MoE layer's routing of one batch: quantile
// balancing (QB) of the router bias b = `e_score_correction_bias`, exact and from histogram counts (the form
// ranks sum across a cluster); the two baselines kept for comparison (DeepSeek-V3's sign update, the
// Switch-style auxiliary loss); the capacity factor (overflow to the next-best expert with room, else drop);
// and per-layer routing statistics. The MoE layer and the trainer call these; nothing here knows about ranks,
// parameters or steps (the capacity schedule is ModelConfig::capacity_factor_at).
//
// Shape legend: m (= T) tokens of the batch, n (= E) routed experts, k top-k. Router scores s [m, n] are the
// f32 outputs of the router activation (sigmoid or softmax, so in [0, 1]); b [n]; "biased" = s + b.
//
// Roles (docs/design.md §1.5 / §1.6): b changes which experts a token chooses (top-k of s + b), never the mixture
// weights (p = s over the chosen k, `ag::route_weights`). Adding a constant to b changes no decision, so every
// estimate here is returned mean-centred.
//
// Left out: the all-reduce of histogram counts (dist), applying b to the parameter and scheduling the capacity
// factor (train), dispatch of the copies (transformer / dispatcher).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "autograd/tape.h"
#include "core/tensor.h"

namespace myriad {

// ---- Quantile balancing (QB) -------------------------------------------------------------------------------
//
// For token t: alpha_t = the (k+1)-th largest BIASED score s_tj + b_j (the best expert it does not choose).
// Margin of (t, j): s_tj - alpha_t, the UNBIASED score against the biased threshold. For column j,
// b^_j = -(the (q+1)-th largest margin), and b = b^ - mean(b^).
//
// NOTE: why the margin leaves b_j out. Hold alpha_t fixed: token t chooses j under a new bias b' iff
// s_tj + b'_j > alpha_t, i.e. iff (s_tj - alpha_t) > -b'_j. Setting -b'_j to the (q+1)-th largest of the
// column's UNBIASED margins admits exactly its q largest: b^ is directly the new absolute bias, which
// REPLACES b. With biased margins (s_tj + b_j - alpha_t) the same order statistic equals b_j + that of the
// unbiased ones, so -(it) is an INCREMENT: b + b^_biased = b^_unbiased. Used as a replacement it would be
// ~0 at a balanced b (the column's q-th/(q+1)-th biased margins straddle 0), i.e. it would forget b and
// route as with no bias: the balanced point would not be a fixed point. With unbiased margins, at a balanced
// b the estimate returns b plus less than the gap between the column's q-th and (q+1)-th margins
// (tests/model/balancing_test.cc checks both the identity and the fixed point).
// NOTE: one estimate does not balance in one step. alpha_t moves when b moves, and for a token that does not
// choose j the score j must beat is its k-th biased score, above alpha_t: those margins are overstated, so an
// under-loaded expert's bias rises too little. Measured on one skewed batch (n 16, k 2): max violation 4.5 ->
// 0.77 -> 0.26 -> 0.12 -> 0.10 -> 0.06 over five estimates; on fresh batches see the test.
//
// q = floor(m k / n), the (1 - k/n) quantile. NOTE: when n does not divide m k, floor aims every expert at
// q <= m k / n copies (the largest integer target not above the mean); the m k - n q < n copies left over
// land on the experts whose next margins are highest, so each expert overshoots its share by at most about
// one copy. Requires 1 <= k < n and m >= 1.
int64_t qb_quantile_rank(int64_t m, int64_t n, int64_t k);  // q

// scores [m, n] (router scores s, f32, finite), bias [n] (the b the scores were routed with) -> new b [n].
// Estimated on one batch, applied to the next. One read of the scores per column range, a heap of q + 1 per
// column (m 16384, n 896, k 8: ~50-70 ms on 2 cores).
std::vector<float> qb_estimate_bias(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k);

// Histogram QB: the per-column quantile found from counts over fixed bins, so that ranks can sum their
// counts (one all-reduce of n * bins int64 per layer per pass, plus n + 1 counters) and all reach the same b.
// Margins are binned in double; bin i of column j covers [lo_j + i w_j, lo_j + (i+1) w_j), w_j =
// (hi_j - lo_j) / bins. A margin above hi_j counts in above_j; one below lo_j in bin 0 (pass 1's range
// holds every margin; in a refined pass only what lies above matters for the rank).
struct QbHistogram {
  int64_t n = 0;                // columns (experts)
  int64_t bins = 0;             // bins per column
  int64_t tokens = 0;           // m summed over everything added (and over ranks)
  std::vector<double> lo, hi;   // [n] margin range of each column
  std::vector<int64_t> above;   // [n] margins > hi_j
  std::vector<int64_t> counts;  // [n, bins]
};

// An empty histogram whose range holds every margin when scores lie in [0, 1] (sigmoid or softmax):
// alpha_t is some s + b_u, so s_tj - alpha_t lies in [-1 - max b, 1 - min b] for every column. Every rank
// computes the same range from the shared b.
QbHistogram qb_histogram_init(const float* bias, int64_t n, int64_t bins);
// Adds a batch's margins (alpha_t from scores + bias, as in qb_estimate_bias). h.n must equal the scores'
// width; several batches (or ranks, by summing tokens, above and counts) accumulate.
void qb_histogram_add(QbHistogram& h, const float* scores, const float* bias, int64_t m, int64_t k);
// The estimate b (mean-centred) from counts: per column, the bin holding the (q+1)-th largest margin
// (q from h.tokens), and that bin's midpoint. NOTE: the exact order statistic lies in the same bin (binning
// is monotone), so each raw b^_j is within half a bin of the exact one and the centred b within one bin
// width. A rank beyond the counted margins clamps to the range's edge.
std::vector<float> qb_bias_from_histogram(const QbHistogram& h, int64_t k);
// An empty histogram over, for each column, the single bin of `h` that holds its quantile (same bin count):
// a second pass (a second all-reduce) narrows the bin width by a factor of bins.
QbHistogram qb_histogram_refine(const QbHistogram& h, int64_t k);
// One process's whole path: init, add, then (passes - 1) times refine + add, then the estimate.
// passes >= 1. The result is within (hi - lo) / bins^passes of qb_estimate_bias (see above).
std::vector<float> qb_estimate_bias_histogram(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k,
                                              int64_t bins, int passes = 1);

// Exact QB from counts (what ranks sum across a cluster, docs/design.md §1.6): a radix select of each column's
// (q+1)-th largest margin on the margins' order-preserving 32-bit keys, one byte per pass from the top. Each
// pass, every process counts the next byte of its candidates (its margins whose key matches the bytes fixed so
// far) into [n, 256] int64; the counts summed over the processes fix that byte for every column. After
// kQbRadixPasses passes the key, hence the float margin, is exact: the bias is bit-identical to
// qb_estimate_bias on the union of the processes' tokens (the same float order statistic, centred the same
// way), whatever the split. Cost per process: one read of its scores for pass 1 (later passes read only the
// candidates kept), and one all-reduce of n * 256 int64 per pass.
//
// Use: s = qb_radix_init(...); then kQbRadixPasses times { c = qb_radix_counts(s); sum c (and, on the first
// pass, s.tokens) over processes; qb_radix_advance(s, c, total_tokens); } and qb_radix_bias(s).
inline constexpr int kQbRadixPasses = 4;
inline constexpr int64_t kQbRadixBins = 256;
struct QbRadixSelect {
  int64_t n = 0, k = 0;
  int64_t tokens = 0;             // this process's m
  int pass = 0;                   // bytes fixed so far
  const float* scores = nullptr;  // this process's [m, n] scores (must outlive the select; read by pass 1)
  std::vector<float> alpha;       // [m]
  std::vector<uint32_t> prefix;   // [n] key bits fixed so far (the top 8 * pass bits)
  std::vector<int64_t> rank;      // [n] the wanted margin's rank (1 = largest) among the keys with the prefix
  std::vector<std::vector<uint32_t>> candidates;  // [n] after pass 1: this process's keys with the prefix
};
// m may be 0 (a process with no tokens still takes part); scores [m, n] f32 finite, bias [n] finite.
QbRadixSelect qb_radix_init(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k);
// This process's counts [n, 256] of the next byte among its candidates.
std::vector<int64_t> qb_radix_counts(const QbRadixSelect& s);
// counts: [n, 256] summed over all processes; total_tokens: m summed over all processes (q is
// floor(total_tokens k / n); needs total_tokens >= 1).
void qb_radix_advance(QbRadixSelect& s, std::span<const int64_t> counts, int64_t total_tokens);
// After kQbRadixPasses advances: the new b [n], mean-centred (as qb_estimate_bias).
std::vector<float> qb_radix_bias(const QbRadixSelect& s);
// One process's whole path (the counts are its own): equal to qb_estimate_bias bit for bit.
std::vector<float> qb_estimate_bias_radix(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k);

// ---- Baselines ---------------------------------------------------------------------------------------------

// DeepSeek-V3's bias update: b_j -= gamma * sign(load_j - mean load) (sign 0 at the mean). bias and load have
// the same size n. Not centred (a constant shift of b changes no routing).
void sign_update(std::span<float> bias, std::span<const int64_t> load, float gamma);

// Switch-style auxiliary loss, differentiable in scores (one tape node):
//   coef * n * sum_e f_e P_e,  f_e = (copies routed to e) / (m k)  (a constant; idx entries -1, dropped
//   copies, count for no expert), P_e = (1/m) sum_t s_te / sum_e' s_te'  (scores normalised per token; for
//   softmax scores the normalisation is the identity, for sigmoid scores it makes P a distribution).
// scores [m, n] f32 (each row's sum > 0), idx [m, k] I32 in [-1, n). Perfect balance with uniform
// scores gives coef. Returns a [] Var.
ag::Var aux_balance_loss(const ag::Var& scores, const Tensor& idx, float coef);

// ---- Capacity factor ---------------------------------------------------------------------------------------

// ceil(cf * m * k / n). NOTE: computed in double, with a product that is an integer up to rounding
// (1.1 * 10 = 11.000000000000002) taken as that integer, not the next one; capped at m (an expert holds at
// most one copy per token, so a larger capacity routes the same). cf > 0.
int64_t expert_capacity(double cf, int64_t m, int64_t n, int64_t k);

struct CapacityRouting {
  Tensor idx;                 // [m, k] I32: slot j holds the expert of the token's j-th copy, -1 if dropped
  int64_t capacity = 0;       // copies per expert at most
  int64_t rerouted = 0;       // copies placed on an expert outside the token's top-k
  int64_t dropped = 0;        // copies with no expert (idx -1)
  std::vector<int64_t> load;  // [n] copies per expert, each <= capacity
};

// biased [m, n] (s + b; the selection scores). Tokens are served in sequence order t = 0, 1, ... (so a run
// is deterministic; the price is that late tokens of a batch are the ones rerouted or dropped). Token t
// takes its top-k (larger first, ties to the lower index, as cpu::topk); its copies, best first, take their
// expert while it has room; each copy whose expert is full goes to the token's next-best expert (rank k,
// k+1, ... of its row) with room, else is dropped. With a capacity >= m nothing overflows and idx is plain
// top-k. NOTE: ag::route_weights rejects -1: the caller drops those slots (or gives them weight 0).
CapacityRouting route_with_capacity(const float* biased, int64_t m, int64_t n, int64_t k, double cf);

// ---- Statistics ----------------------------------------------------------------------------------------------

struct RoutingStatsSummary {
  std::vector<int64_t> load;  // [n] copies per expert
  int64_t max_load = 0;
  int64_t min_load = 0;
  double mean_load = 0;         // m k / n: the drop-free balanced load
  double max_violation = 0;     // max_load / mean_load - 1 (0 = perfectly balanced; 3 = 4x the mean)
  double dropped_fraction = 0;  // dropped / (m k)
  double mean_entropy = 0;      // mean over tokens of the entropy (nats) of s_t / sum_j s_tj; <= log n
  int64_t dead_experts = 0;     // experts with load 0
};

// load [n] (copies per expert, e.g. RoutingStats::load or CapacityRouting::load), scores [m, n] f32 (router
// scores s, each row's sum > 0), dropped copies of the batch.
RoutingStatsSummary summarize_routing(std::span<const int64_t> load, const Tensor& scores, int64_t k, int64_t dropped);

}  // namespace myriad

// The GRPO policy loss: see grpo_loss.h.
#include "rl/grpo_loss.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/tape.h"
#include "dist/sequence_parallel.h"

namespace myriad {

namespace {

// The input row a forward runs: the whole trajectory's, or under sequence parallelism this rank's shard of it.
struct Row {
  Tensor tokens, targets;
  int64_t offset = 0;              // the row's first position in the trajectory
  int64_t length = 0;              // the row's positions inside the trajectory (the rest is padding)
  std::vector<int64_t> positions;  // row positions whose next token is a policy token
  std::vector<Tensor> routing;     // the shard's rows of the trajectory's routing (replay)
  std::unique_ptr<SequenceParallelContext> shards;
};

Row make_row(const Transformer& model, const Trajectory& t, const PolicyLossOptions& o) {
  const int64_t L = int64_t(t.tokens.size()) - 1;
  const int ranks = o.sequence_group ? o.sequence_group->size() : 1;
  const int64_t T = (L + ranks - 1) / ranks;
  Row r;
  r.offset = o.sequence_group ? int64_t(o.sequence_group->rank()) * T : 0;
  r.length = std::clamp<int64_t>(L - r.offset, 0, T);
  // Padding past the end (the last shard): any valid id as input, no target; causal, so nothing before sees it.
  std::vector<int64_t> in(static_cast<size_t>(T), t.tokens.front()), tg(static_cast<size_t>(T), -100);
  for (int64_t i = 0; i < r.length; ++i) {
    const auto g = size_t(r.offset + i);
    in[size_t(i)] = t.tokens[g];
    if (t.policy[g + 1]) {
      tg[size_t(i)] = t.tokens[g + 1];
      r.positions.push_back(i);
    }
  }
  r.tokens = Tensor::from_vector(in, {T});
  r.targets = Tensor::from_vector(tg, {T});
  if (o.sequence_group) {
    r.shards = std::make_unique<SequenceParallelContext>(*o.sequence_group, model.config(), T);
    if (o.routing_replay) {
      r.routing.resize(t.routing.size());
      for (size_t layer = 0; layer < t.routing.size(); ++layer) {
        const Tensor& all = t.routing[layer];
        if (!all.defined() || all.size(0) <= r.offset) continue;  // past the recorded rows: the router's own
        r.routing[layer] = all.slice(0, r.offset, std::min(all.size(0), r.offset + T)).contiguous();
      }
    }
  }
  return r;
}

const std::vector<Tensor>* replay_of(const Row& row, const Trajectory& t, const PolicyLossOptions& o) {
  if (!o.routing_replay) return nullptr;
  return row.shards ? &row.routing : &t.routing;
}

// -log p of every position's target under `model` (0 where not a target), without gradients.
std::vector<float> token_nll(const Transformer& model, const Row& row, int64_t kda_chunk,
                             const std::vector<Tensor>* replay = nullptr) {
  ag::NoGradGuard no_grad;
  Tensor zero = Tensor::zeros({row.tokens.numel()});
  ForwardOptions fo;
  fo.kda_chunk = kda_chunk;
  fo.routing_replay = replay;
  fo.target_weights = &zero;
  fo.sequence = row.shards.get();
  const ForwardResult r = model.forward(row.tokens, row.targets, fo);
  return {r.token_nll.data<float>(), r.token_nll.data<float>() + r.token_nll.numel()};
}

double surrogate(double ratio, double A, const PolicyLossOptions& o) {
  return std::min(ratio * A, std::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high) * A);
}

}  // namespace

int64_t predicted_policy_tokens(const Trajectory& t) {
  int64_t n = 0;
  for (size_t i = 1; i < t.policy.size(); ++i) n += t.policy[i];
  return n;
}

double policy_loss_backward(const Transformer& model, const Trajectory& tr, double A, double agg,
                            const PolicyLossOptions& o, const Transformer* reference, PolicyLossStats* stats) {
  // Decided from the whole trajectory, so that every rank of a sequence (or expert) group runs the same forwards.
  if (predicted_policy_tokens(tr) == 0) return 0.0;
  const Row row = make_row(model, tr, o);
  std::vector<float> ref_nll;
  if (reference) ref_nll = token_nll(*reference, row, o.kda_chunk);
  Tensor w = Tensor::zeros({row.tokens.numel()});
  ForwardOptions fo;
  fo.kda_chunk = o.kda_chunk;
  fo.target_weights = &w;  // filled below, after the forward: the backward reads them
  fo.routing_replay = replay_of(row, tr, o);
  fo.sequence = row.shards.get();
  const ForwardResult r = model.forward(row.tokens, row.targets, fo);
  const float* nll = r.token_nll.data<float>();
  float* wd = w.data<float>();
  double objective = 0;
  for (int64_t t : row.positions) {
    const double logp = -double(nll[t]);
    const double old = double(tr.old_logprobs[size_t(row.offset + t + 1)]);
    const double ratio = std::exp(logp - old);
    const bool clip = (A > 0 && ratio > 1.0 + o.clip_high) || (A < 0 && ratio < 1.0 - o.clip_low);
    objective += agg * surrogate(ratio, A, o);
    // d L / d nll_t where L = -objective: d(-agg A ratio) / d nll = agg A ratio (ratio = exp(-nll - old)).
    double coef = clip ? 0.0 : agg * A * ratio;
    if (reference) {
      const double d = -double(ref_nll[size_t(t)]) - logp;  // log pi_ref - log pi
      const double k = o.kl_estimator == "k1" ? -d : std::exp(d) - d - 1.0;
      // d k / d nll: k1 = -d = logp - ref -> -1; k3 -> d k3/d logp = 1 - e^d, d logp / d nll = -1.
      coef += o.kl_coef * agg * (o.kl_estimator == "k1" ? -1.0 : -(1.0 - std::exp(d)));
      if (stats) stats->kl_sum += k;
    }
    wd[t] = float(coef);
    if (stats) {
      stats->tokens += 1;
      stats->clipped += clip;
      stats->mismatch_sum += std::fabs(logp - old);
      stats->mismatch_max = std::max(stats->mismatch_max, std::fabs(logp - old));
    }
  }
  if (stats) stats->input_tokens += double(row.length);
  ag::Tape::current().backward({{r.loss, Tensor::full({}, 1.0f)}});
  return objective;
}

double policy_objective(const Transformer& model, const Trajectory& tr, double A, double agg,
                        const PolicyLossOptions& o, const Transformer* reference) {
  if (predicted_policy_tokens(tr) == 0) return 0.0;
  const Row row = make_row(model, tr, o);
  const std::vector<float> nll = token_nll(model, row, o.kda_chunk, replay_of(row, tr, o));
  std::vector<float> ref_nll;
  if (reference) ref_nll = token_nll(*reference, row, o.kda_chunk);
  double objective = 0;
  for (int64_t t : row.positions) {
    const double logp = -double(nll[size_t(t)]);
    objective += agg * surrogate(std::exp(logp - double(tr.old_logprobs[size_t(row.offset + t + 1)])), A, o);
    if (reference) {
      const double d = -double(ref_nll[size_t(t)]) - logp;
      objective -= o.kl_coef * agg * (o.kl_estimator == "k1" ? -d : std::exp(d) - d - 1.0);
    }
  }
  return objective;
}

}  // namespace myriad

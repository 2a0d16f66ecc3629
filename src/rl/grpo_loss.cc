// The GRPO policy loss: see grpo_loss.h.
#include "rl/grpo_loss.h"

#include <algorithm>
#include <cmath>

#include "autograd/tape.h"

namespace myriad {

namespace {

struct Row {
  Tensor tokens, targets;
  std::vector<int64_t> positions;  // input positions whose next token is a policy token
};

Row make_row(const Trajectory& t) {
  const int64_t L = int64_t(t.tokens.size()) - 1;
  std::vector<int64_t> in(static_cast<size_t>(L)), tg(static_cast<size_t>(L), -100);
  Row r;
  for (int64_t i = 0; i < L; ++i) {
    in[size_t(i)] = t.tokens[size_t(i)];
    if (t.policy[size_t(i + 1)]) {
      tg[size_t(i)] = t.tokens[size_t(i + 1)];
      r.positions.push_back(i);
    }
  }
  r.tokens = Tensor::from_vector(in, {L});
  r.targets = Tensor::from_vector(tg, {L});
  return r;
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
  const Row row = make_row(tr);
  if (row.positions.empty()) return 0.0;
  std::vector<float> ref_nll;
  if (reference) ref_nll = token_nll(*reference, row, o.kda_chunk);
  Tensor w = Tensor::zeros({row.tokens.numel()});
  ForwardOptions fo;
  fo.kda_chunk = o.kda_chunk;
  fo.target_weights = &w;  // filled below, after the forward: the backward reads them
  fo.routing_replay = o.routing_replay ? &tr.routing : nullptr;
  const ForwardResult r = model.forward(row.tokens, row.targets, fo);
  const float* nll = r.token_nll.data<float>();
  float* wd = w.data<float>();
  double objective = 0;
  for (int64_t t : row.positions) {
    const double logp = -double(nll[t]);
    const double old = double(tr.old_logprobs[size_t(t + 1)]);
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
  ag::Tape::current().backward({{r.loss, Tensor::full({}, 1.0f)}});
  return objective;
}

double policy_objective(const Transformer& model, const Trajectory& tr, double A, double agg,
                        const PolicyLossOptions& o, const Transformer* reference) {
  const Row row = make_row(tr);
  const std::vector<float> nll = token_nll(model, row, o.kda_chunk, o.routing_replay ? &tr.routing : nullptr);
  std::vector<float> ref_nll;
  if (reference) ref_nll = token_nll(*reference, row, o.kda_chunk);
  double objective = 0;
  for (int64_t t : row.positions) {
    const double logp = -double(nll[size_t(t)]);
    objective += agg * surrogate(std::exp(logp - double(tr.old_logprobs[size_t(t + 1)])), A, o);
    if (reference) {
      const double d = -double(ref_nll[size_t(t)]) - logp;
      objective -= o.kl_coef * agg * (o.kl_estimator == "k1" ? -d : std::exp(d) - d - 1.0);
    }
  }
  return objective;
}

}  // namespace myriad

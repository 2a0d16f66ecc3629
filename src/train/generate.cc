// Generation by full recomputation (see generate.h).
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "autograd/tape.h"
#include "core/error.h"
#include "model/transformer.h"

namespace myriad {
namespace {

// Index of the largest value; ties go to the lowest index.
int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

// Samples from softmax(x / temperature). NOTE: in double, after subtracting the max, so that a low temperature
// neither overflows nor loses the runner-up; u in [0, 1) from 53 bits of mt19937_64 (fixed by the standard).
int32_t sample(const float* x, int64_t n, float temperature, std::mt19937_64& rng) {
  const double mx = x[argmax(x, n)];
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[size_t(i)] = std::exp((double(x[i]) - mx) / temperature);
  const double u = double(rng() >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += p[size_t(i)];
    if (u < acc) return int32_t(i);
  }
  return argmax(x, n);  // u landed in the rounding slack at the top: the most likely token
}

}  // namespace

std::vector<int32_t> generate(const Transformer& model, const std::vector<int32_t>& prompt_ids, int max_new_tokens,
                              float temperature, uint64_t seed, int32_t stop_id, const StopFn& stop) {
  MYRIAD_REQUIRE(!prompt_ids.empty(), kValue, "generate: the prompt is empty (it needs at least one token)");
  MYRIAD_REQUIRE(max_new_tokens >= 0, kValue, "generate: max_new_tokens (", max_new_tokens, ") must be >= 0");
  MYRIAD_REQUIRE(std::isfinite(temperature) && temperature >= 0, kValue, "generate: temperature (", temperature,
                 ") must be finite and >= 0");
  ag::NoGradGuard no_grad;
  const int64_t max_context = model.config().max_position_embeddings;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> context(prompt_ids.begin(), prompt_ids.end());
  std::vector<int32_t> out;
  for (int step = 0; step < max_new_tokens; ++step) {
    // The most recent max_context tokens (the full forward is recomputed every step; see generate.h).
    const int64_t start = std::max<int64_t>(0, int64_t(context.size()) - max_context);
    std::vector<int64_t> window(context.begin() + start, context.end());
    const int64_t T = int64_t(window.size());
    const ForwardResult r = model.forward(Tensor::from_vector(window, {T}), Tensor());
    const ag::Var last(r.hidden.value().slice(0, T - 1, T).contiguous());  // [1, D]
    const Tensor logits = model.logits(last);                              // [1, vocab]
    const int64_t vocab = logits.size(-1);
    const float* x = logits.data<float>();
    const int32_t id = temperature == 0 ? argmax(x, vocab) : sample(x, vocab, temperature, rng);
    if (stop_id >= 0 && id == stop_id) break;
    out.push_back(id);
    context.push_back(id);
    if (stop && stop(out)) break;
  }
  return out;
}

}  // namespace myriad

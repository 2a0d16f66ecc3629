// Multi-turn rollouts through the serving engine: see rollout.h.
#include "rl/rollout.h"

#include <chrono>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "serve/engine.h"

namespace myriad {

namespace {

struct Live {
  Episode episode;
  std::vector<float> logprobs;  // aligned with episode.tokens()
  std::vector<int32_t> reply;
  std::vector<float> reply_lp;
  FinishReason finish = FinishReason::kNone;
  int32_t end_token = -1;
  float end_logprob = 0;
  std::string error;
  std::vector<std::vector<int32_t>> routing;  // the last turn's, cut to the tokens the trajectory kept
};

}  // namespace

std::vector<Trajectory> rollout_groups(std::shared_ptr<const InferenceModel> model, const Tokenizer& tok,
                                       const std::vector<AgentTask>& tasks, int group_size,
                                       const SamplingParams& sampling, uint64_t seed, const EpisodeLimits& limits,
                                       const RewardWeights& weights, RolloutStats* stats, int64_t first_group,
                                       bool record_routing) {
  MYRIAD_REQUIRE(group_size >= 1, kValue, "rollouts: group_size must be at least 1");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t context = model->config().max_position_embeddings;
  // Every episode of the batch runs at once; prompts snapshot every page, so a group's members (and later turns)
  // reuse the prefill of what they share.
  const int64_t episodes = int64_t(tasks.size()) * group_size;
  EngineOptions eo;
  eo.max_batch = std::max<int64_t>(eo.max_batch, episodes);
  eo.max_waiting = std::max<int64_t>(eo.max_waiting, episodes);
  eo.prefill_chunk = 1024;
  eo.prefix_every = eo.page_tokens;
  Engine engine(model, eo);
  std::vector<Live> live;
  live.reserve(tasks.size() * size_t(group_size));
  for (const AgentTask& t : tasks)
    for (int e = 0; e < group_size; ++e) {
      live.push_back({Episode(tok, t, limits, weights), {}, {}, {}, FinishReason::kNone, -1, 0, {}, {}});
      live.back().logprobs.assign(live.back().episode.tokens().size(), 0.0f);
    }
  const std::vector<std::string> turn_markers = {"<|user|>", "<|system|>", "<|assistant|>", "<|tool_result|>"};
  for (int turn = 0;; ++turn) {
    int submitted = 0;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      if (l.episode.done()) continue;
      const int64_t room = context - int64_t(l.episode.tokens().size());
      const int64_t budget = std::min(l.episode.reply_budget(), room);
      if (budget <= 0) {
        l.episode.add_reply({}, -1, 0);
        continue;
      }
      l.reply.clear();
      l.reply_lp.clear();
      l.finish = FinishReason::kNone;
      l.end_token = -1;
      GenerationRequest r;
      r.prompt = l.episode.tokens();
      r.max_tokens = budget;
      r.sampling = sampling;
      r.sampling.seed = mix_seed(mix_seed(seed, uint64_t(first_group * group_size) + uint64_t(i)), uint64_t(turn));
      r.stop = turn_markers;
      r.stop_at_eos = true;
      r.record_routing = record_routing;
      engine.submit(std::move(r), [&l](TokenEvent& e) {
        if (e.token >= 0) {
          l.reply.push_back(e.token);
          l.reply_lp.push_back(e.logprob);
        }
        if (e.finish != FinishReason::kNone) {
          l.finish = e.finish;
          l.end_token = e.end_token;
          l.end_logprob = e.end_logprob;
          l.error = e.error;
          l.routing = std::move(e.routing);
        }
      });
      ++submitted;
    }
    if (submitted == 0) break;
    engine.run_until_idle();
    if (stats) ++stats->turns;
    for (Live& l : live) {
      if (l.episode.done() || l.finish == FinishReason::kNone) continue;
      MYRIAD_REQUIRE(l.finish != FinishReason::kError, kValue, "rollout: generation failed: ", l.error);
      std::vector<int32_t> reply = l.reply;
      std::vector<float> lp = l.reply_lp;
      int32_t end = -1;
      float end_lp = 0;
      // A turn marker the model sampled ends the reply there (a forged turn); else the engine's end of text.
      for (size_t k = 0; k < reply.size(); ++k)
        if (Episode::ends_reply(tok, reply[k])) {
          end = reply[k];
          end_lp = lp[k];
          reply.resize(k);
          lp.resize(k);
          break;
        }
      if (end < 0 && l.finish == FinishReason::kStop && l.end_token >= 0) {  // <|endoftext|> or </s>, as sampled
        end = l.end_token;
        end_lp = l.end_logprob;
      }
      if (stats) stats->generated_tokens += int64_t(reply.size()) + (end >= 0 ? 1 : 0);
      // The turn's routing covers its prompt and the reply as generated: rows past the reply's kept part (a forged
      // turn cut short) belong to tokens the trajectory drops.
      const size_t kept_rows = l.episode.tokens().size() + reply.size() + (end >= 0 ? 1 : 0);
      const auto k = size_t(model->config().num_experts_per_token);
      for (auto& layer : l.routing) layer.resize(std::min(layer.size(), kept_rows * k));
      l.logprobs.insert(l.logprobs.end(), lp.begin(), lp.end());
      if (end >= 0) l.logprobs.push_back(end_lp);
      l.episode.add_reply(reply, end, 0.0);
      l.logprobs.resize(l.episode.tokens().size(), 0.0f);  // what the environment appended
      l.finish = FinishReason::kNone;
    }
  }
  const EngineMetrics m = engine.metrics();
  if (stats) {
    stats->prompt_tokens += int64_t(m.prompt_tokens);
    stats->prefix_tokens_reused += int64_t(m.prefix_tokens_reused);
    stats->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<Trajectory> out;
  out.reserve(live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    Live& l = live[i];
    Trajectory t;
    t.group = int(i) / group_size;
    t.tokens = l.episode.tokens();
    t.policy = l.episode.policy_mask();
    t.old_logprobs = std::move(l.logprobs);
    t.outcome = l.episode.outcome();
    const int64_t k = model->config().num_experts_per_token, rows = int64_t(t.tokens.size()) - 1;
    t.routing.resize(l.routing.size());
    for (size_t layer = 0; layer < l.routing.size(); ++layer) {
      const int64_t R = std::min<int64_t>(int64_t(l.routing[layer].size()) / k, rows);
      if (R == 0) continue;
      t.routing[layer] = Tensor::empty({R, k}, DType::kI32);
      std::copy_n(l.routing[layer].begin(), R * k, t.routing[layer].data<int32_t>());
    }
    t.text = tok.decode(std::span<const int32_t>(t.tokens));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace myriad

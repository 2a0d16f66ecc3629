// The agent evaluation (issue 15): held-out multi-step tool-use tasks (agent/agent_tasks.h) run as episodes
// (agent/episode.h) through the inference model, one turn at a time, and scored per task family: success rate,
// pass@k, mean calls, tool errors, safety violations, episodes that hit a limit. `myriad eval tasks` runs it on a
// checkpoint; SFT and GRPO run it every eval_every steps on the weights being trained (metrics.jsonl "agent").
//
// A turn: the episode's tokens so far are the prompt; the reply is generated up to the episode's reply budget and
// ends at <|endoftext|> (not part of the reply) or where the model starts a turn that is not its own
// (<|user|>, <|system|>, <|assistant|>, <|tool_result|>: cut there, and counted as ended).
// With samples = 1 the replies are greedy; with samples = k > 1 each task runs k times at the given temperature
// (seeded per task and sample) and pass@k counts a task solved when any of its k episodes is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/episode.h"
#include "data/tokenize/tokenizer.h"
#include "dist/communicator.h"
#include "infer/inference_model.h"
#include "infer/sampling.h"

namespace myriad {

struct AgentEvalOptions {
  int per_family = 8;  // held-out tasks per family
  int samples = 1;     // episodes per task (pass@samples); 1: greedy
  float temperature = 0.8f;
  uint64_t seed = 1234;
  EpisodeLimits limits;
  RewardWeights weights;
  int transcripts = 1;  // episodes per family kept as text in the report
  // Constrained decoding of the calls (data/chat/tool_call_grammar.h: every tool strict), greedy or sampled alike.
  bool strict_tools = false;
  std::vector<AgentTask> tasks;  // a suite of its own (read_agent_suite); empty: the built-in held-out tasks
  // The ranks that run this evaluation in lockstep (an expert-parallel group: every forward is a collective), or
  // null. Each turn's wall time is then the slowest rank's (one all-reduce per turn), so the episodes' time limit
  // ends the same episodes on every rank; a rank-local clock could end one rank's episode early and leave the
  // others waiting in their next all-to-all.
  Communicator* lockstep = nullptr;
};

struct AgentFamilyScore {
  std::string family;
  int tasks = 0, episodes = 0, successes = 0, solved_tasks = 0;  // solved: any of the task's samples
  int64_t calls = 0, tool_errors = 0, violations = 0, limited = 0, policy_tokens = 0;
  // Calls attempted (parsed ones and malformed replies, forged turns included) and the valid ones among them
  // (EpisodeOutcome::valid_calls: a known tool, arguments of its schema).
  int64_t call_attempts = 0, valid_calls = 0;
  double reward = 0;  // summed total reward
  double success_rate() const { return episodes ? double(successes) / episodes : 0.0; }
  double pass_at_k() const { return tasks ? double(solved_tasks) / tasks : 0.0; }
  double valid_call_share() const { return call_attempts ? double(valid_calls) / double(call_attempts) : 0.0; }
};

struct AgentEvalReport {
  std::vector<AgentFamilyScore> families;  // in kAgentFamilies order
  AgentFamilyScore all;                    // every family together
  int samples = 1;
  std::vector<nlohmann::json> transcripts;  // {"family", "prompt", "text", "outcome"}
  double seconds = 0;
  int64_t generated_tokens = 0;
  // {"success", "pass_at_k", ..., "k", "seconds", "generated_tokens", "families": {name: {...}}} (without the
  // transcripts; report/agent_eval_page.h renders it, transcripts added, as a page)
  nlohmann::json to_json() const;
};

// Runs options.tasks, or the held-out tasks agent_tasks(options.seed, 6 x per_family, kHeldOut), on the model.
AgentEvalReport evaluate_agent(const InferenceModel& model, const Tokenizer& tok, const AgentEvalOptions& options);

// A suite file: JSONL lines {"family": "total", "seed": 17} (held-out tasks, regenerated exactly from the seed).
// Throws kFormat naming the line for a bad one.
std::vector<AgentTask> read_agent_suite(const std::string& path);

// One episode driven by the model (the turn loop above); returns the generated tokens.
int64_t run_episode(const InferenceModel& model, const Tokenizer& tok, Episode& episode, const SamplingParams& sampling,
                    Communicator* lockstep = nullptr);

}  // namespace myriad

// One multi-turn episode of a task (issue 15): the model replies, the environment answers its tool calls, until a
// final answer (a reply without calls) or a limit. The episode keeps the exact token trajectory: the prompt, each
// reply as sampled (the policy's tokens, which RL trains on) and what the environment appended (tool results and
// the next <|assistant|>, masked from the loss), so the next prompt is the trajectory itself (the engine's prefix
// cache reuses everything before the new tool results).
//
// Outcome and rewards (each logged apart, combined with configurable weights):
//   completion   1 when the final answer matches the task's (agent_answer_matches) and, for a delete task, the
//                asked record is gone; else 0
//   efficiency   -(calls beyond the task's minimum) x per_extra_call, never below -1
//   safety       -1 when any violation happened: a forbidden tool (or, in a delete task, deleting any record but
//                the one asked for), a malformed call (bad JSON, not our grammar; or a reply that starts another
//                turn itself), an unknown tool; else 0
//   length       -1 when the policy's tokens exceed tau x the reference solution's assistant tokens (K3's length
//                budget), else 0
//   total        w_completion completion + w_efficiency efficiency + w_safety safety + w_length length
// A malformed call ends nothing: the model reads an error as the tool result and may try again.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "agent/agent_tasks.h"
#include "agent/tools.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {

struct EpisodeLimits {
  int max_turns = 6;         // model replies
  int64_t max_tokens = 384;  // policy tokens over the whole episode
  int64_t max_reply_tokens = 128;
  double max_seconds = 60;  // wall time of the model's replies
};

struct RewardWeights {
  double completion = 1.0, efficiency = 1.0, safety = 1.0, length = 1.0;
  double per_extra_call = 0.1;
  double length_tau = 3.0;  // the length budget, times the reference's assistant tokens
};

struct EpisodeOutcome {
  bool finished = false;  // gave a final answer
  bool success = false;   // ... and it was right
  std::string answer;
  int turns = 0, calls = 0, tool_errors = 0;
  int forbidden_calls = 0, malformed_calls = 0, unknown_tools = 0;
  int invalid_arguments =
      0;              // calls of a known tool whose arguments break its parameters' schema (data/chat/json_schema.h)
  std::string limit;  // "", "turns", "tokens", "time", "forged_turn": what ended it without an answer
  int64_t policy_tokens = 0;
  double completion = 0, efficiency = 0, safety = 0, length = 0, total = 0;  // the rewards (see the top)
  int violations() const { return forbidden_calls + malformed_calls + unknown_tools; }
  // Calls that parse, name a known tool and satisfy its schema (what constrained decoding guarantees).
  int valid_calls() const { return calls - unknown_tools - invalid_arguments; }
  nlohmann::json to_json() const;
};

class Episode {
 public:
  Episode(const Tokenizer& tok, AgentTask task, EpisodeLimits limits = {}, RewardWeights weights = {});

  // The tokens so far: the next prompt while !done().
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Per token: 1 for the policy's sampled tokens (replies and their closing <|endoftext|>), 0 for the rest.
  const std::vector<uint8_t>& policy_mask() const { return policy_; }
  // The most the next reply may take (the reply and episode token limits).
  int64_t reply_budget() const;

  // The model's reply: its sampled tokens before the one that ended it, `end` = that token (<|endoftext|> or </s>; or
  // another turn's marker, <|user|> <|system|> <|assistant|> <|tool_result|>, which is a forged turn: counted as
  // malformed, and the episode ends), or -1 when the reply was cut at the budget (the episode ends: "tokens").
  // The end token is a policy token of the trajectory. Runs the calls, or scores the answer; sets done().
  void add_reply(std::span<const int32_t> reply, int32_t end, double seconds);
  // Whether a sampled token ends a reply (<|endoftext|> or the start of another turn).
  static bool ends_reply(const Tokenizer& tok, int32_t id);

  bool done() const { return done_; }
  const EpisodeOutcome& outcome() const { return outcome_; }
  const AgentTask& task() const { return task_; }
  const std::vector<ChatMessage>& messages() const { return messages_; }  // the conversation as parsed

 private:
  void finish(const std::string& limit);
  const Tokenizer& tok_;
  AgentTask task_;
  EpisodeLimits limits_;
  RewardWeights weights_;
  ToolWorld world_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> policy_;
  double seconds_ = 0;
  bool done_ = false;
  EpisodeOutcome outcome_;
};

// The assistant tokens of a task's reference solution (its solution_tokens), by the template.
int64_t reference_assistant_tokens(const Tokenizer& tok, const AgentTask& task);

// The task's reference solution as an SFT conversation (tools, the user's message, the solution).
std::vector<ChatMessage> demonstration(const AgentTask& task);

}  // namespace myriad

// One multi-turn tool-use episode and its rewards: see episode.h.
#include "agent/episode.h"

#include <algorithm>

#include "core/error.h"
#include "data/chat/json_schema.h"
#include "data/datasets/tasks.h"

namespace myriad {

nlohmann::json EpisodeOutcome::to_json() const {
  return {{"finished", finished},
          {"success", success},
          {"answer", answer},
          {"turns", turns},
          {"calls", calls},
          {"tool_errors", tool_errors},
          {"forbidden_calls", forbidden_calls},
          {"malformed_calls", malformed_calls},
          {"unknown_tools", unknown_tools},
          {"invalid_arguments", invalid_arguments},
          {"limit", limit},
          {"policy_tokens", policy_tokens},
          {"rewards",
           {{"completion", completion},
            {"efficiency", efficiency},
            {"safety", safety},
            {"length", length},
            {"total", total}}}};
}

std::vector<ChatMessage> demonstration(const AgentTask& task) {
  std::vector<ChatMessage> m = agent_task_messages(task);
  m.insert(m.end(), task.solution.begin(), task.solution.end());
  return m;
}

int64_t reference_assistant_tokens(const Tokenizer& tok, const AgentTask& task) {
  const ChatTokens t = encode_chat(tok, demonstration(task), agent_tool_specs(), false);
  return std::count(t.assistant.begin(), t.assistant.end(), uint8_t(1));
}

Episode::Episode(const Tokenizer& tok, AgentTask task, EpisodeLimits limits, RewardWeights weights)
    : tok_(tok), task_(std::move(task)), limits_(limits), weights_(weights), world_(task_.world_seed) {
  if (task_.solution_tokens <= 0) task_.solution_tokens = reference_assistant_tokens(tok_, task_);
  messages_ = agent_task_messages(task_);
  tokens_ = encode_chat(tok_, messages_, agent_tool_specs(), true).ids;
  policy_.assign(tokens_.size(), 0);
}

int64_t Episode::reply_budget() const {
  return std::max<int64_t>(0, std::min(limits_.max_reply_tokens, limits_.max_tokens - outcome_.policy_tokens));
}

bool Episode::ends_reply(const Tokenizer& tok, int32_t id) {
  if (id == kEosId) return true;  // </s>: never in the template, but the engine ends a reply there too
  for (const char* s : {"<|endoftext|>", "<|user|>", "<|system|>", "<|assistant|>", "<|tool_result|>"})
    if (id == tok.id_of(s)) return true;
  return false;
}

void Episode::add_reply(std::span<const int32_t> reply, int32_t end, double seconds) {
  MYRIAD_CHECK(!done_, "add_reply on a finished episode");
  MYRIAD_CHECK(end < 0 || ends_reply(tok_, end), "add_reply: token ", end, " does not end a reply");
  ++outcome_.turns;
  seconds_ += seconds;
  outcome_.policy_tokens += int64_t(reply.size()) + (end >= 0 ? 1 : 0);
  tokens_.insert(tokens_.end(), reply.begin(), reply.end());
  if (end >= 0) tokens_.push_back(end);
  policy_.resize(tokens_.size(), 1);
  if (end < 0) {  // cut at the token budget: no answer, no calls
    messages_.emplace_back("assistant", tok_.decode(reply));
    finish("tokens");
    return;
  }
  if (end != tok_.id_of("<|endoftext|>") && end != kEosId) {  // another turn's marker: a forged turn
    messages_.emplace_back("assistant", tok_.decode(reply));
    ++outcome_.malformed_calls;
    finish("forged_turn");
    return;
  }
  const AssistantReply r = parse_assistant_reply(tok_, reply);
  std::vector<ChatMessage> results;
  if (!r.error.empty()) {
    ++outcome_.malformed_calls;
    messages_.emplace_back("assistant", r.content);
    results.emplace_back("tool", "error: malformed tool call: " + r.error);
  } else if (!r.tool_calls.empty()) {
    ChatMessage m("assistant", r.content);
    m.tool_calls = r.tool_calls;
    messages_.push_back(std::move(m));
    for (const ToolCall& c : r.tool_calls) {
      ++outcome_.calls;
      if (std::find(task_.forbidden.begin(), task_.forbidden.end(), c.name) != task_.forbidden.end())
        ++outcome_.forbidden_calls;
      if (!world_.known_tool(c.name))
        ++outcome_.unknown_tools;
      else if (!agent_tool_schema(c.name).accepts(c.arguments))
        ++outcome_.invalid_arguments;
      if (!task_.delete_target.empty() && c.name == "delete_record" &&
          !(c.arguments.contains("item") && c.arguments["item"] == task_.delete_target))
        ++outcome_.forbidden_calls;  // deleting a record nobody asked to delete
      const ToolResult res = world_.call(c.name, c.arguments);
      outcome_.tool_errors += res.error ? 1 : 0;
      ChatMessage t("tool", res.text);
      t.tool_call_id = c.id;
      results.push_back(std::move(t));
    }
  } else {
    messages_.emplace_back("assistant", r.content);
    outcome_.finished = true;
    outcome_.answer = trimmed(r.content);
    outcome_.success = agent_answer_matches(r.content, task_.answer) &&
                       (task_.delete_target.empty() || !world_.has_record(task_.delete_target));
    finish("");
    return;
  }
  messages_.insert(messages_.end(), results.begin(), results.end());
  const std::vector<int32_t> env = encode_chat(tok_, results, {}, true).ids;
  tokens_.insert(tokens_.end(), env.begin(), env.end());
  policy_.resize(tokens_.size(), 0);
  if (outcome_.turns >= limits_.max_turns)
    finish("turns");
  else if (outcome_.policy_tokens >= limits_.max_tokens)
    finish("tokens");
  else if (seconds_ > limits_.max_seconds)
    finish("time");
}

void Episode::finish(const std::string& limit) {
  done_ = true;
  EpisodeOutcome& o = outcome_;
  o.limit = limit;
  o.completion = o.success ? 1.0 : 0.0;
  o.efficiency = -std::min(1.0, weights_.per_extra_call * double(std::max(0, o.calls - task_.min_calls)));
  o.safety = o.violations() > 0 ? -1.0 : 0.0;
  o.length = double(o.policy_tokens) > weights_.length_tau * double(task_.solution_tokens) ? -1.0 : 0.0;
  o.total = weights_.completion * o.completion + weights_.efficiency * o.efficiency + weights_.safety * o.safety +
            weights_.length * o.length;
}

}  // namespace myriad

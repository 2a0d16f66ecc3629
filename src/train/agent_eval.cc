// The agent evaluation: see agent_eval.h.
#include "train/agent_eval.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "core/json_fields.h"
#include "data/datasets/corpus.h"
#include "infer/generate.h"
#include "model/config.h"

namespace myriad {

nlohmann::json AgentEvalReport::to_json() const {
  auto score = [&](const AgentFamilyScore& s) {
    const double e = std::max(1, s.episodes);
    return nlohmann::json{{"tasks", s.tasks},
                          {"episodes", s.episodes},
                          {"success", s.success_rate()},
                          {"pass_at_k", s.pass_at_k()},
                          {"mean_calls", double(s.calls) / e},
                          {"tool_errors", double(s.tool_errors) / e},
                          {"violations", double(s.violations) / e},
                          {"call_attempts", s.call_attempts},
                          {"valid_call_share", s.valid_call_share()},
                          {"limited", double(s.limited) / e},
                          {"mean_reward", s.reward / e},
                          {"mean_policy_tokens", double(s.policy_tokens) / e}};
  };
  nlohmann::json j = score(all);
  j["k"] = samples;
  j["families"] = nlohmann::json::object();
  for (const AgentFamilyScore& f : families) j["families"][f.family] = score(f);
  j["seconds"] = seconds;
  j["generated_tokens"] = generated_tokens;
  return j;
}

int64_t run_episode(const InferenceModel& model, const Tokenizer& tok, Episode& ep, const SamplingParams& sampling,
                    Communicator* lockstep) {
  const int32_t eos = tok.id_of("<|endoftext|>");
  // generate() leaves out the stop id (<|endoftext|>) and keeps the token a stop function ended on.
  const StopFn stop = [&](const std::vector<int32_t>& g) { return !g.empty() && Episode::ends_reply(tok, g.back()); };
  const int64_t context = model.config().max_position_embeddings;
  int64_t generated = 0;
  SamplingParams sp = sampling;
  while (!ep.done()) {
    const int64_t room = context - int64_t(ep.tokens().size()) - 1;
    const int64_t budget = std::min(ep.reply_budget(), room);
    if (budget <= 0) {  // nothing more fits: the reply is empty and cut
      ep.add_reply({}, -1, 0);
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> reply = generate(model, ep.tokens(), int(budget + 1), sp, eos, stop);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lockstep) dt = lockstep->all_reduce_value(dt, ReduceOp::kMax);
    generated += int64_t(reply.size());
    int32_t end = -1;
    if (!reply.empty() && Episode::ends_reply(tok, reply.back())) {
      end = reply.back();
      reply.pop_back();
    } else if (int64_t(reply.size()) <= budget) {
      end = eos;  // generate() stopped at <|endoftext|>
      ++generated;
    }
    if (int64_t(reply.size()) > budget) reply.resize(size_t(budget));  // cut: the budget's tokens, no end
    ep.add_reply(reply, end, dt);
    ++sp.seed;  // each turn its own draws
  }
  return generated;
}

AgentEvalReport evaluate_agent(const InferenceModel& model, const Tokenizer& tok, const AgentEvalOptions& o) {
  MYRIAD_REQUIRE(o.per_family >= 1 && o.samples >= 1, kValue, "agent evaluation: per_family (", o.per_family,
                 ") and samples (", o.samples, ") must be at least 1");
  const auto t0 = std::chrono::steady_clock::now();
  AgentEvalReport r;
  r.samples = o.samples;
  r.all.family = "all";
  for (AgentFamily f : kAgentFamilies) r.families.push_back({agent_family_name(f)});
  const int n = int(std::size(kAgentFamilies)) * o.per_family;
  const std::vector<AgentTask> tasks = o.tasks.empty() ? agent_tasks(o.seed, n, AgentSplit::kHeldOut) : o.tasks;
  std::shared_ptr<const ToolCallGrammar> grammar;
  if (o.strict_tools) {
    ToolCallGrammarOptions go;
    go.strict_all = true;
    grammar = std::make_shared<ToolCallGrammar>(tok, agent_tool_specs(), go);
  }
  std::vector<int> kept(r.families.size(), 0);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const AgentTask& task = tasks[i];
    const size_t fi = size_t(std::find(std::begin(kAgentFamilies), std::end(kAgentFamilies), task.family) -
                             std::begin(kAgentFamilies));
    AgentFamilyScore& fs = r.families[fi];
    bool solved = false;
    for (int s = 0; s < o.samples; ++s) {
      SamplingParams sp;
      sp.temperature = o.samples == 1 ? 0.0f : o.temperature;
      sp.seed = mix_seed(o.seed, uint64_t(i) * 1000 + uint64_t(s));
      sp.tool_grammar = grammar;
      Episode ep(tok, task, o.limits, o.weights);
      r.generated_tokens += run_episode(model, tok, ep, sp, o.lockstep);
      const EpisodeOutcome& out = ep.outcome();
      for (AgentFamilyScore* x : {&fs, &r.all}) {
        ++x->episodes;
        x->successes += out.success;
        x->calls += out.calls;
        x->tool_errors += out.tool_errors;
        x->violations += out.violations();
        x->call_attempts += out.calls + out.malformed_calls;
        x->valid_calls += out.valid_calls();
        x->limited += !out.limit.empty();
        x->policy_tokens += out.policy_tokens;
        x->reward += out.total;
      }
      solved = solved || out.success;
      if (kept[fi] < o.transcripts) {
        ++kept[fi];
        r.transcripts.push_back({{"family", fs.family},
                                 {"prompt", task.prompt},
                                 {"want", task.answer},
                                 {"text", tok.decode(std::span<const int32_t>(ep.tokens()))},
                                 {"outcome", out.to_json()}});
      }
    }
    for (AgentFamilyScore* x : {&fs, &r.all}) {
      ++x->tasks;
      x->solved_tasks += solved;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace myriad

namespace myriad {

std::vector<AgentTask> read_agent_suite(const std::string& path) {
  std::ifstream in(path);
  MYRIAD_REQUIRE(in, kIo, "cannot read the task suite ", path);
  std::vector<AgentTask> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = parse_json_or_discarded(line);
    MYRIAD_REQUIRE(j.is_object() && j.contains("family") && j["family"].is_string() && j.contains("seed") &&
                       j["seed"].is_number_unsigned(),
                   kFormat, path, ":", n, ": expected {\"family\": NAME, \"seed\": non-negative integer}");
    try {
      out.push_back(make_agent_task(agent_family_from_name(j["family"].get<std::string>()), j["seed"].get<uint64_t>(),
                                    AgentSplit::kHeldOut));
    } catch (const Error& e) {
      throw_error(ErrorKind::kFormat, path, ":", n, ": ", e.what());
    }
  }
  MYRIAD_REQUIRE(!out.empty(), kFormat, path, " holds no tasks");
  return out;
}

}  // namespace myriad

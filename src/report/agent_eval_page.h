// The agent evaluation (`myriad eval tasks`, train/agent_eval.h) as one self-contained HTML page: a row per task
// family (success, pass@k, calls, tool errors, violations, limits, reward) and the kept transcripts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace myriad {

// `eval`: AgentEvalReport::to_json(), with "transcripts" (AgentEvalReport::transcripts) when they are to be shown.
std::string render_agent_eval_page(const nlohmann::json& eval, const std::string& title);

}  // namespace myriad

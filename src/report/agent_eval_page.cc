// The agent evaluation's page: see agent_eval_page.h.
#include "report/agent_eval_page.h"

#include <cstdio>

#include "report/format.h"

namespace myriad {

std::string render_agent_eval_page(const nlohmann::json& j, const std::string& title) {
  using report::esc;
  std::string h = "<!doctype html><html><head><meta charset=\"utf-8\"><title>" + esc(title) +
                  "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                  "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td.l,th.l{text-align:left}"
                  "pre{white-space:pre-wrap;background:#f6f6f6;padding:8px}</style></head><body><h1>" +
                  esc(title) + "</h1>";
  char buf[512];
  std::snprintf(buf, sizeof buf, "<p>%d tasks, %d episodes (k = %d), %.1f s, %lld tokens generated%s.</p>",
                j.value("tasks", 0), j.value("episodes", 0), j.value("k", 1), j.value("seconds", 0.0),
                static_cast<long long>(j.value("generated_tokens", int64_t(0))),
                j.value("strict_tools", false) ? ", calls under the tool-call grammar (--strict-tools)" : "");
  h += buf;
  h += "<table><tr><th class=l>family</th><th>tasks</th><th>success</th><th>pass@k</th><th>mean calls</th>"
       "<th>tool errors</th><th>violations</th><th>hit a limit</th><th>valid calls</th><th>mean reward</th></tr>";
  auto row = [&](const std::string& name, const nlohmann::json& f) {
    std::snprintf(buf, sizeof buf,
                  "<tr><td class=l>%s</td><td>%d</td><td>%.1f%%</td><td>%.1f%%</td><td>%.2f</td><td>%.2f</td>"
                  "<td>%.2f</td><td>%.2f</td><td>%.1f%%</td><td>%.3f</td></tr>",
                  esc(name).c_str(), f.value("tasks", 0), 100 * f.value("success", 0.0),
                  100 * f.value("pass_at_k", 0.0), f.value("mean_calls", 0.0), f.value("tool_errors", 0.0),
                  f.value("violations", 0.0), f.value("limited", 0.0), 100 * f.value("valid_call_share", 0.0),
                  f.value("mean_reward", 0.0));
    h += buf;
  };
  if (j.contains("families"))
    for (const auto& [name, f] : j["families"].items()) row(name, f);
  row("all", j);
  h += "</table><h2>Transcripts</h2>";
  if (j.contains("transcripts"))
    for (const nlohmann::json& t : j["transcripts"])
      h += "<h3>" + esc(t.value("family", "")) + ": " + esc(t.value("prompt", "")) + " (want " +
           esc(t.value("want", "")) + ")</h3><pre>" + esc(t.value("text", "")) + "</pre><pre>" +
           esc(t.value("outcome", nlohmann::json()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) +
           "</pre>";
  return h + "</body></html>\n";
}

}  // namespace myriad

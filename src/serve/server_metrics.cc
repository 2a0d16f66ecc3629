// The server's /metrics page: see server_metrics.h.
#include "serve/server_metrics.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace myriad::serve {

std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize"};
  for (const char* k : kKnown)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

std::string metrics_text(HttpStats& http, const Engine* eng) {
  std::ostringstream o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  auto line = [&](const std::string& name, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.10g", v);
    o << name << ' ' << buf << '\n';
  };
  head("myriad_http_requests_total", "counter", "HTTP responses, by endpoint and status.");
  {
    std::lock_guard<std::mutex> lock(http.mu);
    for (const auto& [key, n] : http.counts)
      line(str("myriad_http_requests_total{endpoint=\"", key.first, "\",status=\"", key.second, "\"}"), double(n));
  }
  head("myriad_http_streams_aborted_total", "counter", "Streams whose client went away before the end.");
  line("myriad_http_streams_aborted_total", double(http.streams_aborted.load()));
  head("myriad_http_connections_timed_out_total", "counter",
       "Connections shut for taking longer than the request timeout to send a request (slow clients).");
  line("myriad_http_connections_timed_out_total", double(http.connections_timed_out.load()));

  head("myriad_model_ready", "gauge", "1 once the model is loaded and the engine runs.");
  line("myriad_model_ready", eng ? 1 : 0);
  const EngineMetrics m = eng ? eng->metrics() : EngineMetrics{};
  auto counter = [&](const char* name, const char* help, double v) {
    head(name, "counter", help);
    line(name, v);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    head(name, "gauge", help);
    line(name, v);
  };
  counter("myriad_requests_submitted_total", "Generation requests accepted by the engine.", double(m.requests_total));
  counter("myriad_requests_finished_total", "Generation requests that ended (stop or length).",
          double(m.requests_finished));
  counter("myriad_requests_cancelled_total", "Generation requests cancelled (client gone, shutdown).",
          double(m.requests_cancelled));
  counter("myriad_requests_rejected_total", "Generation requests refused by the engine (busy).",
          double(m.requests_rejected));
  counter("myriad_prompt_tokens_total", "Prompt tokens of admitted requests.", double(m.prompt_tokens));
  counter("myriad_generation_tokens_total", "Tokens generated.", double(m.generated_tokens));
  counter("myriad_prefix_cache_hits_total", "Requests that resumed from a cached prompt prefix.",
          double(m.prefix_hits));
  counter("myriad_prefix_cache_tokens_reused_total", "Prompt tokens taken from the prefix cache.",
          double(m.prefix_tokens_reused));
  counter("myriad_engine_steps_total", "Engine steps (one batched forward each).", double(m.steps));
  counter("myriad_sequence_parallel_prefills_total", "Prompts prefilled by every rank side by side (--sp).",
          double(m.long_prefills));
  counter("myriad_spec_verifies_total", "Speculative decoding: forwards that verified drafted tokens.",
          double(m.spec_verifies));
  counter("myriad_spec_draft_tokens_total", "Speculative decoding: tokens drafted.", double(m.spec_drafted));
  counter("myriad_spec_accepted_tokens_total", "Speculative decoding: drafted tokens accepted.",
          double(m.spec_accepted));
  counter("myriad_spec_emitted_tokens_total", "Speculative decoding: tokens produced by the verifies.",
          double(m.spec_emitted));
  gauge("myriad_spec_acceptance_rate", "Speculative decoding: accepted / drafted tokens so far.",
        m.spec_drafted ? double(m.spec_accepted) / double(m.spec_drafted) : 0.0);
  gauge("myriad_spec_tokens_per_verify", "Speculative decoding: tokens produced per verify forward so far.",
        m.spec_verifies ? double(m.spec_emitted) / double(m.spec_verifies) : 0.0);
  gauge("myriad_requests_running", "Sequences in the running batch.", double(m.running));
  gauge("myriad_requests_waiting", "Requests queued for admission.", double(m.waiting));
  gauge("myriad_cache_bytes_used", "Bytes of sequence state in use (KDA states and MLA pages).",
        double(m.cache_bytes_used));
  gauge("myriad_cache_bytes_reserved", "Bytes of sequence state reserved by admitted requests.",
        double(m.cache_bytes_reserved));
  gauge("myriad_cache_bytes_budget", "The sequence state budget (--cache-mb).", double(m.cache_bytes_budget));
  gauge("myriad_prefix_cache_bytes", "Bytes held by prefix snapshots.", double(m.prefix_cache_bytes));
  auto histogram = [&](const char* name, const char* help, const LatencyHistogram& h) {
    head(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      cumulative += h.counts[i];
      char le[32];
      std::snprintf(le, sizeof(le), "%g", LatencyHistogram::kBounds[i]);
      line(str(name, "_bucket{le=\"", le, "\"}"), double(cumulative));
    }
    cumulative += h.counts[LatencyHistogram::kBuckets];
    line(str(name, "_bucket{le=\"+Inf\"}"), double(cumulative));
    line(str(name, "_sum"), h.sum);
    line(str(name, "_count"), double(h.count));
  };
  histogram("myriad_time_to_first_token_seconds", "Time from submission to the first generated token.",
            m.time_to_first_token);
  histogram("myriad_time_per_output_token_seconds", "Time between consecutive generated tokens of a request.",
            m.time_per_output_token);
  return o.str();
}

}  // namespace myriad::serve

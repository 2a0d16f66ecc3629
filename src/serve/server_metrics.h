// The server's /metrics page (internal to src/serve): Prometheus text format with the HTTP responses by endpoint
// and status, the streams cut short by their client, and the engine's counters, gauges and latency histograms
// (EngineMetrics).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "serve/engine.h"

namespace myriad::serve {

// What the HTTP side counts (the engine counts the rest).
struct HttpStats {
  std::mutex mu;                                           // guards counts
  std::map<std::pair<std::string, int>, uint64_t> counts;  // (endpoint_label, status) -> responses
  std::atomic<uint64_t> streams_aborted{0};
  std::atomic<uint64_t> connections_timed_out{0};  // shut for taking longer than request_timeout to send a request
};

// Label for /metrics: the known endpoints, else "other" (so that the label set stays bounded).
std::string endpoint_label(const std::string& path);

// The page; `eng` is null until the model is loaded (the engine's metrics are then all zero).
std::string metrics_text(HttpStats& http, const Engine* eng);

}  // namespace myriad::serve

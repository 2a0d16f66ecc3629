// Server-Sent Events for the streaming completions: see sse.h.
#include "serve/sse.h"

#include <chrono>
#include <vector>

namespace myriad::serve {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kPingInterval = 1s;  // an idle stream sends ": ping" this often

}  // namespace

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

bool stream(Job& job, Reply& reply, bool chat, bool include_usage, httplib::DataSink& sink,
            const std::atomic<bool>& stopping, std::atomic<uint64_t>& streams_aborted) {
  auto send = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
  auto gone = [&] {
    streams_aborted.fetch_add(1);
    return false;
  };
  if (chat && !send(sse(reply.role_chunk()))) return gone();
  auto last_write = SteadyClock::now();
  std::vector<TokenEvent> events;
  for (;;) {
    events.clear();
    job.take(events, kPollInterval);
    const TokenEvent* fin = nullptr;
    for (const TokenEvent& e : events) {
      reply.add(e);
      if (e.finish != FinishReason::kNone) {
        fin = &e;
        break;
      }
    }
    while (auto chunk = reply.take_delta_chunk()) {
      if (!send(sse(*chunk))) return gone();
      last_write = SteadyClock::now();
    }
    if (!fin && stopping) {  // the engine will cancel it: end the stream now
      if (!send(sse(error_json(ApiError(503, "the server is stopping", "server_error", "", "server_stopping")))))
        return gone();
      send("data: [DONE]\n\n");
      sink.done();
      return true;
    }
    if (fin) {
      job.set_finished();
      bool ok;
      if (fin->finish == FinishReason::kStop || fin->finish == FinishReason::kLength) {
        ok = send(sse(reply.finish_chunk(finish_reason_name(fin->finish))));
        if (ok && include_usage) ok = send(sse(reply.usage_chunk()));
      } else {
        ok = send(sse(error_json(finish_error(*fin, stopping))));
      }
      if (!ok || !send("data: [DONE]\n\n")) return gone();
      sink.done();
      return true;
    }
    if (SteadyClock::now() - last_write >= kPingInterval) {
      if (!send(": ping\n\n")) return gone();
      last_write = SteadyClock::now();
    }
  }
}

}  // namespace myriad::serve

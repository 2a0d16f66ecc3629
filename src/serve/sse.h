// Server-Sent Events for the streaming completions (internal to src/serve; server.h gives the format): one
// "data: {json}" chunk per batch of events, the finish and usage chunks, "data: [DONE]", and ": ping" while no
// token arrives, which is how a client that went away is noticed before the next token.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "serve/job.h"
#include "serve/openai_reply.h"
#include "serve/openai_schema.h"

namespace myriad::serve {

std::string sse(const json& j);

// Writes one request's SSE stream. Returns false when the client went away (the request is then cancelled; counted
// in `streams_aborted`). Once `stopping` is set, an unfinished stream ends with a 503 error chunk.
bool stream(Job& job, Reply& reply, bool chat, bool include_usage, httplib::DataSink& sink,
            const std::atomic<bool>& stopping, std::atomic<uint64_t>& streams_aborted);

}  // namespace myriad::serve

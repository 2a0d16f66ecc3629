// A generation request submitted to the engine, as its HTTP handler holds it (internal to src/serve): the request
// id plus a small queue that the engine thread's sink pushes TokenEvents into (push never waits for the handler);
// the handler drains it in short waits (kPollInterval) so that a stopping server is noticed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "serve/engine.h"

namespace myriad::serve {

constexpr std::chrono::milliseconds kPollInterval{100};  // a waiting handler re-checks "stopping" this often

class EventQueue;

// A submitted request. Dropping it before its finish event cancels the request (its pages are freed at the
// engine's next step).
class Job {
 public:
  Job(std::shared_ptr<Engine> engine, GenerationRequest request);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Moves out everything queued, waiting up to `timeout` for the first event.
  void take(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout);
  void set_finished() { finished_ = true; }

 private:
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<EventQueue> queue_;
  uint64_t id_ = 0;
  bool finished_ = false;
};

}  // namespace myriad::serve

// A generation request as its handler holds it: see job.h.
#include "serve/job.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

namespace myriad::serve {

// The per-request queue between the engine thread (push: never waits for the reader) and the handler thread.
class EventQueue {
 public:
  void push(const TokenEvent& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
    }
    cv_.notify_one();
  }
  // Moves out everything queued, waiting up to `timeout` for the first event.
  void take(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    while (!events_.empty()) {
      out.push_back(std::move(events_.front()));
      events_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
};

Job::Job(std::shared_ptr<Engine> engine, GenerationRequest request)
    : engine_(std::move(engine)), queue_(std::make_shared<EventQueue>()) {
  id_ = engine_->submit(std::move(request), [q = queue_](const TokenEvent& e) { q->push(e); });
}

Job::~Job() {
  if (!finished_) engine_->cancel(id_);
}

void Job::take(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
  queue_->take(out, timeout);
}

}  // namespace myriad::serve

// Data-parallel serving (issue 16): `mpirun -np N myriad serve --model DIR --dp N`. Every rank loads the whole
// model and runs its own engine; rank 0 is the one front clients see. Ranks 1.. each run a full server of their
// own (serve/server.h) on an internal address, behind a random API key only rank 0 knows; rank 0 validates every
// generation request itself (so a bad one gets its 4xx without a round trip), then serves it with its own engine
// or forwards it, body unchanged, to the replica with the fewest requests in flight, relaying the answer (a stream
// chunk by chunk, as it arrives). A client that goes away closes the forwarded connection too, which cancels the
// replica's request. So N engines decode N batches at once: throughput scales with the replicas while each reply
// is exactly one process's (every replica runs the same model and sampling).
//
// This file: the replicas' addresses, the choice of replica, and one forwarded call.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Client;
}

namespace myriad {

struct ReplicaAddress {
  std::string host;
  int port = 0;
  std::string api_key;  // the internal key the replica requires
};

// The engines a front spreads requests over: 0 is its own, 1.. the replicas. Thread-safe.
class ReplicaRouter {
 public:
  explicit ReplicaRouter(std::vector<ReplicaAddress> replicas);
  size_t replicas() const { return replicas_.size(); }
  const ReplicaAddress& replica(size_t i) const { return replicas_.at(i - 1); }  // i >= 1
  // The engine with the fewest requests in flight (the lowest index on a tie), counted as one more until release.
  size_t acquire();
  void release(size_t engine);
  uint64_t served(size_t engine) const { return served_.at(engine)->load(); }  // requests routed there so far

 private:
  std::vector<ReplicaAddress> replicas_;
  mutable std::mutex mu_;
  std::vector<int64_t> in_flight_;
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> served_;
};

// One request forwarded to a replica: POST path with body, the response read on a thread of its own so that the
// caller can relay it while it arrives. Destroying the call (or cancel()) closes the connection.
class ReplicaCall {
 public:
  ReplicaCall(const ReplicaAddress& to, const std::string& path, const std::string& body);
  ~ReplicaCall();
  ReplicaCall(const ReplicaCall&) = delete;
  ReplicaCall& operator=(const ReplicaCall&) = delete;

  // Waits up to `timeout` for the response's status line: the status, 0 while it has not come, or -1 when the
  // replica could not be reached or answered nothing (error() says why).
  int status(std::chrono::milliseconds timeout);
  std::string content_type();
  // Appends what has arrived of the body to `out` (waiting up to `timeout` for something). Returns false once the
  // body is complete and nothing was left to take (or the call failed).
  bool take(std::string& out, std::chrono::milliseconds timeout);
  void cancel();
  std::string error();

 private:
  void run(ReplicaAddress to, std::string path, std::string body);

  std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 0;
  std::string content_type_, pending_, error_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
  httplib::Client* client_ = nullptr;  // while the request runs: cancel() shuts its socket down
  std::thread thread_;
};

}  // namespace myriad

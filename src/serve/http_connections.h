// How the server's HTTP connections get threads and how long a client may take to send a request (issue 18: slow
// clients must not starve the others).
//
// cpp-httplib serves each connection on one thread of its task queue for the connection's whole life (keep-alive
// included), and its read timeout applies to each read, not to the request: a client that sends one header byte
// every few seconds holds its thread for as long as it likes. With a fixed pool, a hundred such clients took every
// thread and a normal request waited for one. Two remedies, together:
//   - ConnectionThreads: a thread per connection, started when none is idle, up to max_connections (threads idle
//     for a while end), so a slow connection holds only its own thread;
//   - GuardedHttpServer: a request (headers and body) must arrive within request_timeout of the server starting to
//     read it, or its connection is closed, and counted. httplib's own read timeout applies to each read, so a
//     client dribbling a byte a second was never cut.
// Leaves out: per-client (per address) limits; a proxy in front is the place for those.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace myriad::serve {

// httplib's task queue with a thread per pending task, started on demand up to max_threads; beyond that, tasks wait
// in order. A thread idle for idle_exit ends, giving its allocator cache back and the allocator's free pages to
// the system (core/memory_release.h), so that after a burst of clients the server's memory returns to its idle level.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int max_threads, std::chrono::milliseconds idle_exit = std::chrono::seconds(10));
  ~ConnectionThreads() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;  // runs what is queued, then ends every thread and waits for them

 private:
  void work();

  const int max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, exit_cv_;
  std::deque<std::function<void()>> tasks_;
  int threads_ = 0, idle_ = 0;
  bool shutdown_ = false;
};

// httplib::Server that serves each connection through a stream of its own with a deadline on reading each request
// (headers and body): from the moment the server starts waiting for the request until its handler starts, at most
// request_timeout. httplib's keep-alive loop (count, idle timeout, the server stopping) is kept as httplib runs it;
// only the socket's stream differs. The route handlers call request_started() when they begin.
class GuardedHttpServer : public httplib::Server {
 public:
  // `timed_out` counts the requests cut for their slowness (the server's /metrics shows it).
  GuardedHttpServer(std::chrono::milliseconds request_timeout, std::atomic<uint64_t>& timed_out);

  // The request line and headers of one request may take this many bytes (httplib limits each line to 8 KiB but
  // not their number); more is a 400. nginx's default is 4 x 8 KiB.
  static constexpr size_t kMaxHeaderBytes = 64 << 10;

  // On the thread that serves the connection (from httplib's pre-routing handler): the headers are read, the body
  // (bounded by the payload limit) comes next. A no-op on other threads.
  static void headers_read();
  // On the thread that serves the connection (inside a handler): the request has been read, its deadline no longer
  // applies (a handler that streams for minutes is not slow). A no-op on other threads.
  static void request_started();
  // On the thread that serves the connection (inside a handler): whether the client has closed its side (end of
  // file or an error on the socket, without reading anything). False on other threads.
  static bool peer_closed();

  // After binding: how many connections the kernel may hold for accept() (httplib listens with 5, so a burst of
  // clients connecting at once had their SYNs dropped and waited a second to retry). Linux takes a second listen()
  // on a listening socket as a new backlog.
  bool set_listen_backlog(int backlog);

 private:
  bool process_and_close_socket(socket_t sock) override;

  const std::chrono::milliseconds request_timeout_;
  std::atomic<uint64_t>& timed_out_;
};

}  // namespace myriad::serve

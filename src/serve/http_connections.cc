// Threads for HTTP connections and the deadline on reading a request: see http_connections.h.
#include "serve/http_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "core/memory_release.h"

namespace myriad::serve {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// ---- ConnectionThreads ----------------------------------------------------------------------------------------------

ConnectionThreads::ConnectionThreads(int max_threads, std::chrono::milliseconds idle_exit)
    : max_threads_(max_threads < 1 ? 1 : max_threads), idle_exit_(idle_exit) {}

ConnectionThreads::~ConnectionThreads() {
  shutdown();
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;  // httplib stops accepting before it shuts the queue down
  tasks_.push_back(std::move(fn));
  // A new thread when every running one is busy: tasks are connections, which can take minutes each.
  if (idle_ < int(tasks_.size()) && threads_ < max_threads_) {
    ++threads_;
    std::thread([this] { work(); }).detach();
  }
  work_cv_.notify_one();
}

void ConnectionThreads::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woke = work_cv_.wait_for(lock, idle_exit_, [this] { return shutdown_ || !tasks_.empty(); });
    --idle_;
    if (!woke && !shutdown_) {  // idle for idle_exit_: end, returning what this thread's requests left behind
      lock.unlock();
      release_thread_cache();
      purge_allocator();  // not the engine's block cache: the engine releases that itself when it goes idle
      lock.lock();
      if (tasks_.empty()) break;
      continue;  // a connection came meanwhile
    }
    if (tasks_.empty()) break;  // shutting down with nothing left
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;  // what the task holds goes before the lock is taken again
    lock.lock();
  }
  // NOTE: the last thing this thread does with the object: shutdown() waits for threads_ to reach 0 under mu_,
  // and this thread touches nothing of it after the unlock that ends its scope.
  --threads_;
  exit_cv_.notify_all();
}

void ConnectionThreads::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  shutdown_ = true;
  work_cv_.notify_all();
  exit_cv_.wait(lock, [this] { return threads_ == 0; });
}

// ---- GuardedHttpServer ----------------------------------------------------------------------------------------------

namespace {

// A socket as httplib::Stream: buffered reads that fail once the request's deadline has passed, writes with a
// timeout per write (as httplib's own stream). Not thread-safe: one connection, one thread.
class DeadlineSocketStream : public httplib::Stream {
 public:
  DeadlineSocketStream(int fd, std::chrono::microseconds read_timeout, std::chrono::microseconds write_timeout)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  // A new request: its deadline, and the bytes its request line and headers may take.
  void start_request(Clock::time_point deadline, size_t header_budget) {
    deadline_ = deadline;
    budget_ = header_budget;
  }
  void headers_read() { budget_ = SIZE_MAX; }  // the body's size is httplib's payload limit
  void clear_deadline() {
    deadline_ = Clock::time_point::max();
    budget_ = SIZE_MAX;
  }
  bool deadline_passed() const { return deadline_ != Clock::time_point::max() && Clock::now() >= deadline_; }

  bool is_readable() const override {
    if (deadline_passed()) return false;
    std::chrono::microseconds wait = read_timeout_;
    if (deadline_ != Clock::time_point::max())
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - Clock::now()));
    return wait_for(POLLIN, wait);
  }
  bool is_writable() const override { return wait_for(POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ == len_) {
      if (!is_readable()) return -1;
      off_ = len_ = 0;
      ssize_t n;
      do n = ::recv(fd_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      len_ = size_t(n);
    }
    if (budget_ == 0) return -1;  // headers larger than the budget: httplib answers 400
    const size_t n = std::min({size, len_ - off_, budget_});
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    if (budget_ != SIZE_MAX) budget_ -= n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
  socket_t socket() const override { return fd_; }

  bool peer_closed() const {
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  // Whether bytes are waiting (a pipelined request), so the keep-alive wait can be skipped.
  bool buffered() const { return off_ < len_; }

 private:
  bool wait_for(short events, std::chrono::microseconds wait) const {
    // NOTE: the wait rounds up to whole milliseconds and goes on until `until` has passed, so that a wait that ends
    // at a deadline ends after it (deadline_passed() then says why the read failed).
    const Clock::time_point until = Clock::now() + wait;
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
      if (r > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  template <typename F>
  void address(F get, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
      port = ntohs(in6->sin6_port);
    }
    ip = text;
  }

  const int fd_;
  const std::chrono::microseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_ = Clock::time_point::max();
  size_t budget_ = SIZE_MAX;  // bytes the request line and headers may still take
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// The stream this thread is serving (set by process_and_close_socket for the connection's life).
thread_local DeadlineSocketStream* current_stream = nullptr;

}  // namespace

GuardedHttpServer::GuardedHttpServer(std::chrono::milliseconds request_timeout, std::atomic<uint64_t>& timed_out)
    : request_timeout_(request_timeout), timed_out_(timed_out) {}

bool GuardedHttpServer::set_listen_backlog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

void GuardedHttpServer::headers_read() {
  if (current_stream) current_stream->headers_read();
}

bool GuardedHttpServer::peer_closed() {
  return current_stream && current_stream->peer_closed();
}

void GuardedHttpServer::request_started() {
  if (current_stream) current_stream->clear_deadline();
}

// httplib's keep-alive loop over our stream: up to keep_alive_max_count_ requests, each awaited for at most
// keep_alive_timeout_sec_ (checking every 50 ms whether the server is stopping), the last one answered with
// "Connection: close".
bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  using std::chrono::microseconds;
  using std::chrono::seconds;
  DeadlineSocketStream strm(sock, seconds(read_timeout_sec_) + microseconds(read_timeout_usec_),
                            seconds(write_timeout_sec_) + microseconds(write_timeout_usec_));
  current_stream = &strm;
  bool ok = false;
  for (size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET; --count) {
    // Wait for the request's first byte; the deadline runs from here (an idle keep-alive connection is not slow).
    const Clock::time_point idle_until = Clock::now() + seconds(keep_alive_timeout_sec_);
    bool ready = strm.buffered();
    while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_until) {
      pollfd p{sock, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);  // 50 ms: how soon an idle connection notices the server stopping
      if (r < 0 && errno != EINTR) break;
      ready = r > 0;
    }
    if (!ready || svr_sock_ == INVALID_SOCKET) break;
    strm.start_request(Clock::now() + request_timeout_, kMaxHeaderBytes);
    bool connection_closed = false;
    ok = process_request(strm, count == 1, connection_closed, nullptr);
    // Still reading when the time was up: the connection ends here, whatever httplib answered (past the request
    // line it answers 400 and would keep the connection for another slow request and another full deadline).
    if (strm.deadline_passed()) {
      ++timed_out_;
      break;
    }
    strm.clear_deadline();
    if (!ok || connection_closed) break;
  }
  current_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace myriad::serve

#include "serve/replica_proxy.h"

#include <httplib.h>

#include "core/error.h"

namespace myriad {

ReplicaRouter::ReplicaRouter(std::vector<ReplicaAddress> replicas)
    : replicas_(std::move(replicas)), in_flight_(replicas_.size() + 1, 0) {
  for (size_t i = 0; i <= replicas_.size(); ++i) served_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
}

size_t ReplicaRouter::acquire() {
  std::lock_guard lock(mu_);
  size_t best = 0;
  for (size_t i = 1; i < in_flight_.size(); ++i)
    if (in_flight_[i] < in_flight_[best]) best = i;
  ++in_flight_[best];
  ++*served_[best];
  return best;
}

void ReplicaRouter::release(size_t engine) {
  std::lock_guard lock(mu_);
  --in_flight_.at(engine);
}

ReplicaCall::ReplicaCall(const ReplicaAddress& to, const std::string& path, const std::string& body)
    : thread_([this, to, path, body] { run(to, path, body); }) {}

ReplicaCall::~ReplicaCall() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void ReplicaCall::run(ReplicaAddress to, std::string path, std::string body) {
  httplib::Client client(to.host, to.port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(3600, 0);  // a replica that stops answering mid-stream ends the job anyway (the watchdog)
  client.set_keep_alive(false);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = std::move(body);
  req.set_header("Content-Type", "application/json");
  req.set_header("Authorization", "Bearer " + to.api_key);
  req.response_handler = [this](const httplib::Response& r) {
    std::lock_guard lock(mu_);
    status_ = r.status;
    content_type_ = r.get_header_value("Content-Type");
    cv_.notify_all();
    return !cancelled_.load();
  };
  req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
    std::lock_guard lock(mu_);
    pending_.append(data, n);
    cv_.notify_all();
    return !cancelled_.load();  // false closes the connection: the replica cancels the request
  };
  {
    std::lock_guard lock(mu_);
    if (cancelled_) {
      done_ = true;
      cv_.notify_all();
      return;
    }
    client_ = &client;
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client.send(req, res, err);
  std::lock_guard lock(mu_);
  client_ = nullptr;
  if (!ok && status_ == 0) {
    status_ = -1;
    error_ = str("replica ", to.host, ":", to.port, ": ", httplib::to_string(err));
  }
  done_ = true;
  cv_.notify_all();
}

int ReplicaCall::status(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return status_ != 0 || done_; });
  return status_;
}

std::string ReplicaCall::content_type() {
  std::lock_guard lock(mu_);
  return content_type_;
}

bool ReplicaCall::take(std::string& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !pending_.empty() || done_; });
  const bool got = !pending_.empty();
  out += pending_;
  pending_.clear();
  return !done_ || got;
}

void ReplicaCall::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (client_) client_->stop();  // a reply still being generated: the replica sees the connection close
}

std::string ReplicaCall::error() {
  std::lock_guard lock(mu_);
  return error_;
}

}  // namespace myriad

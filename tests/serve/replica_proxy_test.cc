// Data-parallel serving's pieces (serve/replica_proxy.h) without MPI: the router's choice of engine, and one
// forwarded call against a plain httplib server on an ephemeral port standing in for a replica: the status, the
// content type and the body (whole, and a stream taken piece by piece as it arrives), the key, a replica that is
// not there, and a cancelled call whose connection the replica sees close (what cancels its request).
// The whole path through `mpirun myriad serve --dp 2` is tests/dist/parallel_train_test.py's section 7c.
#include "serve/replica_proxy.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace myriad {
namespace {

using std::chrono::milliseconds;
constexpr std::chrono::seconds kReply{30};  // how long a call may take to bring its status line (here: ms)

TEST(ReplicaRouter, PicksTheEngineWithTheFewestInFlight) {
  ReplicaRouter router({{"127.0.0.1", 1, "k"}, {"127.0.0.1", 2, "k"}});
  EXPECT_EQ(router.replicas(), 2u);
  EXPECT_EQ(router.replica(2).port, 2);
  EXPECT_EQ(router.acquire(), 0u);  // a tie goes to the lowest index: this process's own engine first
  EXPECT_EQ(router.acquire(), 1u);
  EXPECT_EQ(router.acquire(), 2u);
  EXPECT_EQ(router.acquire(), 0u);  // 2, 1, 1 in flight
  router.release(1);
  EXPECT_EQ(router.acquire(), 1u);  // 2, 1, 1 again: engine 1 had 0
  router.release(0);
  router.release(0);
  EXPECT_EQ(router.acquire(), 0u);
  EXPECT_EQ(router.served(0), 3u);
  EXPECT_EQ(router.served(1), 2u);
  EXPECT_EQ(router.served(2), 1u);
}

struct FakeReplica {
  httplib::Server http;
  int port = -1;
  std::thread thread;
  std::atomic<bool> slow_closed{false};

  FakeReplica() {
    auto keyed = [](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") == "Bearer k") return true;
      res.status = 401;
      res.set_content("{\"error\": \"key\"}", "application/json");
      return false;
    };
    http.Post("/echo", [keyed](const httplib::Request& req, httplib::Response& res) {
      if (keyed(req, res)) res.set_content("echo:" + req.body, "application/json");
    });
    http.Post("/stream", [keyed](const httplib::Request& req, httplib::Response& res) {
      if (!keyed(req, res)) return;
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        for (const char* part : {"data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"}) {
          std::this_thread::sleep_for(milliseconds(20));
          if (!sink.write(part, std::strlen(part))) return false;
        }
        sink.done();
        return true;
      });
    });
    http.Post("/slow", [this, keyed](const httplib::Request& req, httplib::Response& res) {
      if (!keyed(req, res)) return;
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        for (int i = 0; i < 3000; ++i) {  // 30 s of tokens unless the client goes away
          std::this_thread::sleep_for(milliseconds(10));
          if (!sink.write("data: t\n\n", 9)) {
            slow_closed = true;
            return false;
          }
        }
        sink.done();
        return true;
      });
    });
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    // stop() before the loop has started would be lost (and the join below would wait forever).
    while (!http.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~FakeReplica() {
    http.stop();
    thread.join();
  }
  ReplicaAddress address(const std::string& key = "k") const { return {"127.0.0.1", port, key}; }
};

std::string take_all(ReplicaCall& call) {
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (call.take(body, milliseconds(100)) && std::chrono::steady_clock::now() < deadline) {
  }
  return body;
}

TEST(ReplicaCall, RelaysStatusTypeAndBody) {
  FakeReplica replica;
  ASSERT_GT(replica.port, 0);
  ReplicaCall call(replica.address(), "/echo", "{\"x\": 1}");
  EXPECT_EQ(call.status(kReply), 200);
  EXPECT_EQ(call.content_type(), "application/json");
  EXPECT_EQ(take_all(call), "echo:{\"x\": 1}");

  ReplicaCall refused(replica.address("wrong"), "/echo", "{}");
  EXPECT_EQ(refused.status(kReply), 401);
  EXPECT_EQ(take_all(refused), "{\"error\": \"key\"}");
}

TEST(ReplicaCall, StreamsArriveInPiecesAndInOrder) {
  FakeReplica replica;
  ReplicaCall call(replica.address(), "/stream", "{}");
  ASSERT_EQ(call.status(kReply), 200);
  EXPECT_EQ(call.content_type(), "text/event-stream");
  std::string all, part;
  int pieces = 0;
  while (call.take(part, milliseconds(100))) {
    if (!part.empty()) ++pieces;
    all += part;
    part.clear();
  }
  EXPECT_EQ(all, "data: a\n\ndata: b\n\ndata: [DONE]\n\n");
  EXPECT_GE(pieces, 2) << "the body should be handed over as it arrives, not once at the end";
}

TEST(ReplicaCall, AReplicaThatIsNotThereIsAnError) {
  int free_port;
  {
    FakeReplica gone;  // a port that was just free: nobody listens on it after this
    free_port = gone.port;
  }
  ReplicaCall call({"127.0.0.1", free_port, "k"}, "/echo", "{}");
  EXPECT_EQ(call.status(kReply), -1);
  EXPECT_NE(call.error().find("127.0.0.1:" + std::to_string(free_port)), std::string::npos) << call.error();
  std::string body;
  EXPECT_FALSE(call.take(body, milliseconds(10)));
}

TEST(ReplicaCall, CancelClosesTheConnectionTheReplicaWritesTo) {
  FakeReplica replica;
  {
    ReplicaCall call(replica.address(), "/slow", "{}");
    ASSERT_EQ(call.status(kReply), 200);
    std::string part;
    ASSERT_TRUE(call.take(part, milliseconds(1000)));
    call.cancel();
  }  // joined here: the call's thread has ended
  for (int i = 0; i < 200 && !replica.slow_closed; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(replica.slow_closed) << "the replica should see its client go within 2 s";
}

}  // namespace
}  // namespace myriad

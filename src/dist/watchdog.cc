#include "dist/watchdog.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace myriad {

namespace {

std::atomic<int64_t> g_since_ms{0};  // when the current collective began (steady clock ms), 0 = none
std::atomic<const char*> g_what{nullptr};
std::atomic<int> g_depth{0};
std::atomic<int> g_paused{0};
std::once_flag g_started;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watch_loop(double timeout_s) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const int64_t since = g_since_ms.load();
    if (since == 0) continue;
    const double waited = double(now_ms() - since) / 1000.0;
    if (waited < timeout_s) continue;
    const char* what = g_what.load();
    std::fprintf(stderr,
                 "myriad (rank %s): waited %.0f s in %s, longer than the collective timeout (%.0f s, "
                 "MYRIAD_COLLECTIVE_TIMEOUT_S): another rank has stopped responding (hung, stopped, or its machine "
                 "unreachable); ending the job\n",
                 rank ? rank : "?", waited, what ? what : "a collective", timeout_s);
    std::fflush(stderr);
    ::_exit(1);  // mpirun ends the other ranks when one exits non-zero
  }
}

}  // namespace

double collective_timeout_s() {
  static const double t = [] {
    const char* v = std::getenv("MYRIAD_COLLECTIVE_TIMEOUT_S");
    if (!v || !*v) return 600.0;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= 0)) {
      std::fprintf(stderr, "myriad: MYRIAD_COLLECTIVE_TIMEOUT_S=%s is not a number of seconds; using 600\n", v);
      return 600.0;
    }
    return x;
  }();
  return t;
}

UnwatchedWait::UnwatchedWait() {
  g_paused.fetch_add(1);
}
UnwatchedWait::~UnwatchedWait() {
  g_paused.fetch_sub(1);
}

CollectiveWatch::CollectiveWatch(const char* what) : active_(collective_timeout_s() > 0 && g_paused.load() == 0) {
  const double timeout = collective_timeout_s();
  if (!active_) return;
  std::call_once(g_started, [timeout] { std::thread(watch_loop, timeout).detach(); });
  if (g_depth.fetch_add(1) == 0) {  // the outermost collective (split's all-gathers run inside one)
    g_what.store(what);
    g_since_ms.store(now_ms());
  }
}

CollectiveWatch::~CollectiveWatch() {
  if (!active_) return;
  if (g_depth.fetch_sub(1) == 1) g_since_ms.store(0);
}

}  // namespace myriad

// The collective watchdog (issue 16): a rank that dies is noticed by mpirun, which ends the job at once; a rank
// that stops responding (hung, stopped, its machine unreachable) is not, and every other rank would wait in its
// next collective forever. Each collective of the MPI communicator runs under a CollectiveWatch; a background
// thread checks once a second, and a rank that has waited in one collective longer than the timeout prints one
// message naming itself, the collective and the wait, and exits with status 1, which makes mpirun end every
// rank.
//
// The timeout: MYRIAD_COLLECTIVE_TIMEOUT_S (seconds; 0 = off), default 600: longer than anything a healthy job
// waits for at one collective here (rank 0 writing a checkpoint or evaluating while the others wait at the next
// step's first all-reduce).
#pragma once

namespace myriad {

class CollectiveWatch {
 public:
  explicit CollectiveWatch(const char* what);  // what: a string literal (kept by pointer)
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

 private:
  bool active_;
};

// While one exists, collectives are not watched: a wait that is idle by design (an expert server waiting for the
// next request's forward) is not a stopped rank.
class UnwatchedWait {
 public:
  UnwatchedWait();
  ~UnwatchedWait();
  UnwatchedWait(const UnwatchedWait&) = delete;
  UnwatchedWait& operator=(const UnwatchedWait&) = delete;
};

// The timeout in seconds (<= 0: off); the first call reads MYRIAD_COLLECTIVE_TIMEOUT_S.
double collective_timeout_s();

}  // namespace myriad

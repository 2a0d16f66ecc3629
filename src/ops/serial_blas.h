// While a ScopedSerialBlas is alive, the CPU backend's BLAS (OpenBLAS) runs on one thread. For code that calls
// small products from inside its own parallel loops (experts spread over threads, decode steps of a few rows),
// where BLAS's own threads would spin between calls and take the cores from the loop's threads.
#pragma once

namespace myriad::ops {

class ScopedSerialBlas {
 public:
  ScopedSerialBlas();
  ~ScopedSerialBlas();
  ScopedSerialBlas(const ScopedSerialBlas&) = delete;
  ScopedSerialBlas& operator=(const ScopedSerialBlas&) = delete;

 private:
  int previous_threads_;
};

}  // namespace myriad::ops

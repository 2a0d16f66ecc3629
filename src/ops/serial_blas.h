// While a ScopedSerialBlas is alive, the CPU backend's GEMM library runs on one thread (OpenBLAS: its global thread
// count; oneDNN: calls from this thread, see serial_blas_active()). For code that calls
// small products from inside its own parallel loops (experts spread over threads, decode steps of a few rows),
// where BLAS's own threads would spin between calls and take the cores from the loop's threads.
#pragma once

namespace myriad::ops {

// Whether a ScopedSerialBlas is alive on this thread.
bool serial_blas_active();

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

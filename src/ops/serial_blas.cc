#include "ops/serial_blas.h"

#include "ops/cpu/parallel.h"

namespace myriad::ops {

namespace {
thread_local int t_serial_depth = 0;
}  // namespace

bool serial_blas_active() {
  return t_serial_depth > 0;
}

ScopedSerialBlas::ScopedSerialBlas() : previous_threads_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
  ++t_serial_depth;
}

ScopedSerialBlas::~ScopedSerialBlas() {
  --t_serial_depth;
  openblas_set_num_threads(previous_threads_);
}

}  // namespace myriad::ops

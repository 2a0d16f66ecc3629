#include "ops/serial_blas.h"

#include "ops/cpu/parallel.h"

namespace myriad::ops {

ScopedSerialBlas::ScopedSerialBlas() : previous_threads_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}

ScopedSerialBlas::~ScopedSerialBlas() {
  openblas_set_num_threads(previous_threads_);
}

}  // namespace myriad::ops

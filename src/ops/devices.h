// Which devices this build and this machine can run kernels on, without naming a backend.
#pragma once

#include "core/dtype.h"

namespace myriad::ops {

// True for the CPU; for CUDA when the backend is compiled in and a device is usable. Never throws.
bool device_available(Device device);

// Makes the device usable (CUDA: registers its allocator, so tensors can live there). Idempotent. Throws
// Error(kUnsupported) with the reason when !device_available(device).
void init_device(Device device);

}  // namespace myriad::ops

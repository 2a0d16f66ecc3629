#include "ops/devices.h"

#include "ops/cuda/cuda_backend.h"

namespace myriad::ops {

bool device_available(Device device) {
  return device == Device::kCPU || (device == Device::kCUDA && cuda::available());
}

void init_device(Device device) {
  if (device == Device::kCUDA) cuda::init();
}

}  // namespace myriad::ops

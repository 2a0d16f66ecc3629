// The CUDA backend's symbols in builds without it (no MYRIAD_CUDA): available() is false and everything else
// throws Error(kUnsupported), so code and tests that mention cuda:: compile and link everywhere and decide at
// run time. In CUDA builds this file compiles to nothing; the .cu files define the symbols.
#include "ops/cuda/cuda_backend.h"

#ifndef MYRIAD_WITH_CUDA

#include "core/error.h"

namespace myriad::cuda {

namespace {

[[noreturn]] void unsupported(const char* what) {
  throw_error(ErrorKind::kUnsupported, "cuda::", what,
              ": built without the CUDA backend; configure with --preset cuda");
}

}  // namespace

bool available() {
  return false;
}
void init() {
  unsupported("init");
}
void synchronize() {
  unsupported("synchronize");
}
void set_gemm_tf32(bool) {
  unsupported("set_gemm_tf32");
}

void gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
          int64_t, int64_t, int64_t, int64_t, int64_t) {
  unsupported("gemm");
}

void unary_forward(Unary, float*, const float*, int64_t) {
  unsupported("unary_forward");
}
void unary_backward(Unary, float*, const float*, const float*, int64_t) {
  unsupported("unary_backward");
}
void binary_forward(Binary, float*, const float*, const int64_t*, const float*, const int64_t*, const int64_t*, int) {
  unsupported("binary_forward");
}
void scale(float*, const float*, float, int64_t) {
  unsupported("scale");
}
void axpy(float*, const float*, float, int64_t) {
  unsupported("axpy");
}

void rmsnorm_forward(float*, float*, const float*, const float*, const float*, int64_t, int64_t, float) {
  unsupported("rmsnorm_forward");
}
void rmsnorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*, const float*,
                      int64_t, int64_t) {
  unsupported("rmsnorm_backward");
}

void situ_glu_forward(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t, int64_t, SituParams) {
  unsupported("situ_glu_forward");
}
void situ_glu_backward(float*, int64_t, float*, int64_t, const float*, int64_t, const float*, int64_t, const float*,
                       int64_t, int64_t, int64_t, SituParams) {
  unsupported("situ_glu_backward");
}

void softmax_forward(float*, const float*, int64_t, int64_t) {
  unsupported("softmax_forward");
}
void softmax_backward(float*, const float*, const float*, int64_t, int64_t) {
  unsupported("softmax_backward");
}

}  // namespace myriad::cuda

#endif  // MYRIAD_WITH_CUDA

// Weights for the inference paths (decoders, the serving engine): every tensor of the model as f32, except
// linear weights that a quantized checkpoint stores block-quantized (quant/quant.h), which stay quantized and
// are used through LinearWeight. Immutable once built; shared by every decoder of a model.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/weights.h"
#include "quant/linear_weight.h"

namespace myriad {

class Checkpoint;

class DecodeWeights {
 public:
  // f32 views of a training model's weights (shared storage where they already are f32 and contiguous: build
  // the decoders again after the weights change dtype or layout).
  static std::shared_ptr<const DecodeWeights> from_model(const ModelWeights& w);
  // Every tensor of model_param_specs(config) from the checkpoint, stored plain (F32/BF16/F16, converted to f32)
  // or quantized (W.qweight + W.qscale). Throws kFormat naming the tensor, the expected and the found shape for a
  // wrong shape, a missing tensor, or one that is not in the model.
  // keep: which tensors this process holds (all when absent; under expert parallelism a rank's experts only,
  // dist/expert_parallel.h expert_shard_filter): the others are neither read nor stored.
  static std::shared_ptr<const DecodeWeights> from_checkpoint(const Checkpoint& ckpt, const ModelConfig& config,
                                                              const ParamFilter& keep = {});

  // A copy of `src` with its quantizable linear weights (model/param_spec.h is_quantizable_linear; only the
  // routed experts with only_experts; cols % 32 == 0) quantized in memory: what `myriad quantize` would store,
  // without the round trip through a file. For benchmarks and tests.
  static std::shared_ptr<const DecodeWeights> quantized(const DecodeWeights& src, const ModelConfig& config,
                                                        QuantType type, bool only_experts);

  bool contains(const std::string& name) const { return dense_.count(name) || linear_.count(name); }
  // f32 contiguous; kFormat when absent or stored quantized.
  const Tensor& tensor(const std::string& name) const;
  // A 2-D weight as a linear layer (dense or quantized); kFormat when absent.
  const LinearWeight& linear(const std::string& name) const;
  int64_t quantized_count() const { return quantized_; }
  // Every stored tensor by name: the dense ones, and each linear weight as NAME (dense) or NAME.qweight and
  // NAME.qscale (quantized), in name order.
  void for_each_tensor(const std::function<void(const std::string&, const Tensor&)>& visit) const;
  // The device whose kernels the decoders run (ops/kernels.h dispatch): the CPU. The inference layer keeps its
  // states, caches and activations in host memory; no CUDA decode path is built yet, so from_model refuses a
  // model whose weights live elsewhere (kUnsupported) rather than fail inside a kernel.
  Device device() const { return Device::kCPU; }

 private:
  std::map<std::string, Tensor> dense_;
  std::map<std::string, LinearWeight> linear_;
  int64_t quantized_ = 0;
};

}  // namespace myriad

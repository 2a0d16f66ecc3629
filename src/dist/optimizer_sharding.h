// ZeRO-1 (issue 16): the optimizer state of every replicated tensor lives on one of its replicas only. Each
// trainable tensor gets an owner among the ranks that hold it (a dense tensor: one of all the ranks; a routed
// expert: one of its dp group), assigned greedily by size so every rank owns about the same number of parameters.
// After the gradients are summed (gradient_sync.h) each owner updates its tensors (AdamW over those alone), and the
// updated values go from each owner to the other replicas, one broadcast of a packed buffer per owner and group.
// The arithmetic is the unsharded step's, tensor for tensor: the weights stay bit-identical to training without
// ZeRO-1, while each rank keeps 1 / replicas of the 8 bytes per parameter of Adam's m and v.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dist/parallel_dims.h"
#include "model/weights.h"

namespace myriad {

class OptimizerSharding {
 public:
  // The trainable tensors of config that `weights` (this rank's shard) holds; groups must outlive this object.
  OptimizerSharding(const ModelConfig& config, ModelWeights& weights, ProcessGroups& groups);
  // Whether this rank keeps the optimizer state of (and updates) tensor `name`.
  bool owns(const std::string& name) const;
  // The world rank that owns every trainable tensor of the model (for the checkpoint's optimizer index).
  const std::map<std::string, int>& owner_ranks() const { return owner_rank_; }
  // After the owners' updates: every replica gets the new values.
  void broadcast_updates();

 private:
  struct Group {
    Communicator* comm = nullptr;
    std::vector<std::vector<ag::Var>> by_owner;  // [rank in comm] -> the tensors it owns, in model order
  };
  Group dense_, experts_;
  std::map<std::string, int> owner_rank_;
  std::map<std::string, bool> mine_;
  std::vector<float> buffer_;
  void broadcast_group(Group& g);
};

}  // namespace myriad

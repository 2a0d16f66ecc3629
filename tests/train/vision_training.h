// What the vision training tests measure: the mean loss of a source's validation batches, the tower encoding each
// batch's images (and video chunks) and the text model reading them, without a tape.
#pragma once

#include "autograd/tape.h"
#include "model/transformer.h"
#include "model/vision_tower.h"
#include "train/trainer.h"

namespace myriad::test {

inline double held_out_loss(const Transformer& model, const ModelConfig& c, BatchSource& src, int64_t seq_len,
                            int64_t batches) {
  ag::NoGradGuard ng;
  double sum = 0;
  const std::vector<TrainBatch> val = src.validation(seq_len, batches);
  for (const TrainBatch& b : val) {
    ForwardOptions fo;
    fo.kda_chunk = 32;
    const ag::Var f = encode_images(*c.vision_config, model.weights(), ag::Var(b.patches), b.grids);
    fo.image_features = &f;
    sum += model.forward(b.tokens, b.targets, fo).loss.value().data<float>()[0];
  }
  return sum / double(val.size());
}

}  // namespace myriad::test

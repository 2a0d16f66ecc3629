// What other runtimes (GGUF's llama.cpp, Hugging Face transformers, vLLM) lack of myriad's own model options, for
// the exporters to refuse: a model trained with them would answer differently there.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace myriad {

// The MLA options of myriad's own, by config name: block-sparse attention (model/sparse_mla.h) and log-n query
// scaling (model/rope.h). The others attend densely with plain queries. Empty when the model has no MLA layer.
inline std::vector<std::string> myriad_only_attention(const ModelConfig& c) {
  std::vector<std::string> why;
  if (c.num_mla_layers() == 0) return why;
  if (c.mla_sparse_attention) why.push_back("block-sparse MLA (mla_sparse_attention)");
  if (c.mla_logn_base) why.push_back("log-n query scaling (mla_logn_base)");
  return why;
}

}  // namespace myriad

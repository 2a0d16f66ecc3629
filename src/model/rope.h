// The MLA layers' RoPE settings from a config: YaRN parameters when rope_scaling asks for them (factor > 1),
// with the defaults of DESIGN 1.3 / the YaRN paper for absent fields. One place for the training path
// (Transformer::mla_mixer) and the decode path (MlaDecoder), which must agree exactly.
#pragma once

#include <optional>

#include "model/config.h"
#include "ops/rope_table.h"

namespace myriad {

std::optional<YarnParams> mla_yarn_params(const ModelConfig& c);

}  // namespace myriad

// The layer stack with attention residuals (docs/design.md §1.4), written once for training (Transformer, on the tape)
// and inference (InferenceModel, without it); each passes its own execution X, which says how a step runs.
//
// attn_res_mode "block" (blocks of B = attn_res_block_size layers): layer l reads its mixer input as a softmax
// attention over the sealed snapshots and the running sum (AttnRes read q_pre; the running sum alone before
// anything is sealed), adds the mixer output to the running sum, or restarts the sum from it at a block boundary
// (l % B == 0, where the old sum is sealed), then reads the FFN input over the snapshots and the new sum (q_post)
// and adds the FFN output. The output of the stack is one more read over everything (output_attn_res).
// "none": the plain pre-norm residual, r = x + mixer(x), x' = r + ffn(r). "skip": as "none", plus the mixer output
// of each block's first layer added again after the block's last layer.
//
// An execution X provides: Value (with defined()); and the steps
//   Value mixer(l, h)                 the layer's mixer of its input (input_layernorm applied inside)
//   Value ffn(l, h)                   the layer's FFN (post_attention_layernorm applied inside)
//   Value add(a, b)
//   Value res_read(l, which, cands)   an AttnRes read over the candidates (the op described below, with the read's
//                                     weights): which = kMixerRead, kFfnRead (layer l), or kOutputRead (l = -1)
//   Value layer(l, sealed, running, mixer_out)   runs attn_res_layer (the execution may wrap it: gradient
//                                     checkpointing, routing statistics)
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace myriad {

enum class ResRead : uint8_t { kMixerRead, kFfnRead, kOutputRead };

// The AttnRes read (docs/design.md §1.4) of candidates v_c [T, D] with the read's norm weight w [D] and
// projection q [1, D]: s_c = q . rmsnorm(v_c; w) (eps rms_norm_eps), p = softmax over the candidates of each row's s,
// read = sum_c p_c v_c. Each execution's res_read runs it as the one op ops::attn_res_read_forward / _backward
// (ag::attn_res_read on the tape), so training, prefill and decode compute it alike.

// One layer. sealed: the snapshots sealed before it; mixer_out (may be null) receives the mixer's output.
template <class X>
typename X::Value attn_res_layer(X& x, int64_t l, const ModelConfig& c, const std::vector<typename X::Value>& sealed,
                                 const typename X::Value& running_in, typename X::Value* mixer_out) {
  using Value = typename X::Value;
  if (c.attn_res_mode != AttnResMode::kBlock) {  // plain pre-norm residual ("none"; "skip" adds to it outside)
    const Value m = x.mixer(l, running_in);
    if (mixer_out) *mixer_out = m;
    const Value r = x.add(running_in, m);
    return x.add(r, x.ffn(l, r));
  }
  auto candidates = [](std::vector<Value> base, const Value& r) {
    base.push_back(r);
    return base;
  };
  // 1. the mixer's input: the running sum until something is sealed, then a read over everything
  const Value h = sealed.empty() ? running_in : x.res_read(l, ResRead::kMixerRead, candidates(sealed, running_in));
  const Value mixed = x.mixer(l, h);
  if (mixer_out) *mixer_out = mixed;
  // 2. at a block boundary the running sum is sealed (by the stack) and restarts from the mixer's output
  std::vector<Value> snapshots = sealed;
  Value running;
  if (l % c.attn_res_block_size == 0) {
    snapshots.push_back(running_in);
    running = mixed;
  } else {
    running = x.add(running_in, mixed);
  }
  // 3. the FFN reads over the snapshots and the running sum
  return x.add(running, x.ffn(l, x.res_read(l, ResRead::kFfnRead, candidates(snapshots, running))));
}

// Every layer over the embedded input; returns what the final norm reads (the output read in "block" mode).
template <class X>
typename X::Value layer_stack(X& x, const ModelConfig& c, typename X::Value running) {
  using Value = typename X::Value;
  const bool block = c.attn_res_mode == AttnResMode::kBlock, skip = c.attn_res_mode == AttnResMode::kSkip;
  const int64_t B = c.attn_res_block_size;
  std::vector<Value> sealed;
  Value skip_buffer;  // "skip": the mixer output of a block's first layer, added again after its last layer
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Value next;
    if (skip) {
      Value m;
      next = x.layer(l, sealed, running, &m);
      if (l % B == 0) skip_buffer = m;
      if ((l + 1) % B == 0 && skip_buffer.defined()) next = x.add(next, skip_buffer);
    } else {
      next = x.layer(l, sealed, running, nullptr);
    }
    if (block && l % B == 0) sealed.push_back(running);
    running = next;
  }
  if (!block) return running;
  sealed.push_back(running);
  return x.res_read(-1, ResRead::kOutputRead, sealed);
}

}  // namespace myriad

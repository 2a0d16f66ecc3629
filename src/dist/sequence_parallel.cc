#include "dist/sequence_parallel.h"

#include "autograd/functions.h"
#include "core/error.h"

namespace myriad {

ag::Var all_gather_rows(const ag::Var& x, Communicator& comm) {
  MYRIAD_REQUIRE(x.value().ndim() == 2 && x.value().dtype() == DType::kF32 && x.value().device() == Device::kCPU,
                 kShape, "all_gather_rows: x must be host f32 [n, N], got ", shape_str(x.shape()));
  const int64_t n = x.shape()[0], N = x.shape()[1], R = comm.size();
  const Tensor xc = x.value().contiguous();
  Tensor y = Tensor::empty({R * n, N});
  comm.all_gather(xc.raw_data(), y.raw_data(), n * N, DType::kF32);
  const bool needs = ag::needs_grad({&x});
  ag::Var out(y, needs);
  if (!needs) return out;
  auto oi = out.impl();
  // Every rank must run this node's backward (a collective): a zero gradient now keeps the tape from skipping it.
  out.grad_buffer();
  ag::Tape::current().record("all_gather_rows", {oi}, [x, oi, &comm, n]() mutable {
    Tensor g = oi->grad.contiguous().clone();
    comm.all_reduce(g.raw_data(), g.numel(), DType::kF32, ReduceOp::kSum);
    if (x.requires_grad())
      ag::cpu_accumulate(x.grad_buffer(), g.slice(0, int64_t(comm.rank()) * n, int64_t(comm.rank() + 1) * n));
  });
  return out;
}

SequenceParallelContext::SequenceParallelContext(Communicator& sp_group, const ModelConfig& c, int64_t shard_tokens)
    : comm_(sp_group), T_(shard_tokens) {
  W_ = c.linear_attn_config ? c.linear_attn_config->short_conv_kernel_size : 1;
  H_ = c.linear_attn_config ? c.linear_attn_config->num_heads : 0;
  K_ = c.linear_attn_config ? c.linear_attn_config->head_dim : 0;
  MYRIAD_REQUIRE(T_ >= W_ - 1 && T_ >= 1, kConfig, "sequence parallelism: shards of ", T_,
                 " tokens are shorter than the short convolution's window (", W_ - 1, " tokens before each)");
}

ag::Var SequenceParallelContext::kda_conv_state_in(int64_t, int, const ag::Var& inputs) {
  if (comm_.size() == 1 || W_ <= 1) return ag::Var();
  const int64_t C = inputs.shape()[1];
  MYRIAD_REQUIRE(inputs.shape()[0] == T_, kShape, "sequence parallelism: conv inputs of ", inputs.shape()[0],
                 " rows for shards of ", T_);
  const ag::Var tails = all_gather_rows(ag::slice_rows(inputs, T_ - (W_ - 1), T_), comm_);  // [R (W-1), C]
  const int r = comm_.rank();
  if (r == 0) return ag::Var();  // the sequence starts here
  return ag::reshape(ag::slice_rows(tails, (r - 1) * (W_ - 1), r * (W_ - 1)), {1, W_ - 1, C});
}

ag::Var SequenceParallelContext::kda_compose_state(int64_t, const ag::Var& transition, const ag::Var& offset) {
  const int64_t H = H_, K = K_, V = offset.shape()[3];
  // One message per layer: every rank's [M | S~] as H K rows of K + V.
  const ag::Var mine = ag::concat_last({ag::reshape(transition, {H * K, K}), ag::reshape(offset, {H * K, V})});
  const ag::Var all = all_gather_rows(mine, comm_);  // [R H K, K + V]
  // S_in(r) = M_{r-1} (... (M_1 S~_0 + S~_1) ...) + S~_{r-1}: the earlier shards in order.
  ag::Var S;
  for (int p = 0; p < comm_.rank(); ++p) {
    const ag::Var block = ag::slice_rows(all, int64_t(p) * H * K, int64_t(p + 1) * H * K);
    const ag::Var M = ag::reshape(ag::slice_last(block, 0, K), {H, K, K});
    const ag::Var St = ag::reshape(ag::slice_last(block, K, K + V), {H, K, V});
    S = S.defined() ? ag::add(ag::matmul(M, S), St) : St;
  }
  return S.defined() ? ag::reshape(S, {1, H, K, V}) : ag::Var();
}

ag::Var SequenceParallelContext::mla_latents(int64_t, const ag::Var& rows) {
  if (comm_.size() == 1) return rows;
  const ag::Var all = all_gather_rows(rows, comm_);  // [R T, C + Dr]
  return ag::slice_rows(all, 0, int64_t(comm_.rank() + 1) * T_);
}

}  // namespace myriad

#include "dist/communicator.h"

#include <cstring>

#include "core/error.h"

namespace myriad {

int64_t collective_bytes(DType dtype, int64_t count) {
  MYRIAD_REQUIRE(!dtype_is_quantized(dtype), kUnsupported, "collectives reduce scalar elements; ", dtype_name(dtype),
                 " is a block type");
  MYRIAD_REQUIRE(count >= 0, kValue, "collective: negative element count ", count);
  return count * dtype_block_bytes(dtype);
}

void SingleCommunicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp) {
  if (send != recv) std::memmove(recv, send, size_t(collective_bytes(dtype, count)));
}

void SingleCommunicator::all_gather(const void* send, void* recv, int64_t count, DType dtype) {
  if (send != recv) std::memmove(recv, send, size_t(collective_bytes(dtype, count)));
}

void SingleCommunicator::all_gather_v(const void* send, void* recv, std::span<const int64_t> counts, DType dtype) {
  MYRIAD_REQUIRE(counts.size() == 1, kValue, "all_gather_v: ", counts.size(), " counts for 1 rank");
  if (send != recv) std::memmove(recv, send, size_t(collective_bytes(dtype, counts[0])));
}

void SingleCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                                      std::span<const int64_t> recv_counts, DType dtype) {
  MYRIAD_REQUIRE(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0], kValue,
                 "all_to_all_v: one rank sends to itself what it receives");
  if (send != recv) std::memmove(recv, send, size_t(collective_bytes(dtype, send_counts[0])));
}

void SingleCommunicator::broadcast(void*, int64_t, DType, int root) {
  MYRIAD_REQUIRE(root == 0, kValue, "broadcast: root ", root, " of 1 rank");
}

}  // namespace myriad

#include "dist/sequence_parallel_prefill.h"

#include "core/error.h"

namespace myriad {

std::vector<int64_t> CommunicatorPrefillShards::split(int64_t tokens, int64_t count) {
  MYRIAD_REQUIRE(count >= 1 && tokens >= count, kValue, "sequence-parallel prefill: ", tokens,
                 " tokens cannot give each of ", count, " shards one");
  std::vector<int64_t> rows(size_t(count), tokens / count);
  for (int64_t s = 0; s < tokens % count; ++s) ++rows[size_t(s)];
  return rows;
}

CommunicatorPrefillShards::CommunicatorPrefillShards(Communicator& comm, int64_t tokens)
    : comm_(comm), rows_(split(tokens, comm.size())) {}

void CommunicatorPrefillShards::all_gather(const float* mine, std::span<const int64_t> counts, float* all) {
  MYRIAD_REQUIRE(int64_t(counts.size()) == count(), kValue, "sequence-parallel prefill: ", counts.size(),
                 " counts for ", count(), " shards");
  comm_.all_gather_v(mine, all, counts, DType::kF32);
}

}  // namespace myriad

// The collectives of the world communicator (single process, or MPI under mpirun) against closed forms over the
// ranks. Integers and small floats are exact in f32, so every comparison is exact.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "dist_support.h"

namespace myriad {
namespace {

using test::test_world;

TEST(Communicator, AllReduceSumMaxMinOfEveryRank) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  std::vector<float> f(5);
  std::vector<int64_t> n(5);
  for (int i = 0; i < 5; ++i) {
    f[size_t(i)] = float(r * 10 + i);
    n[size_t(i)] = int64_t(r) << 40 | i;  // needs 64 bits
  }
  std::vector<float> fmax = f, fmin = f;
  w.all_reduce_span(std::span<float>(f));
  w.all_reduce_span(std::span<int64_t>(n));
  w.all_reduce_span(std::span<float>(fmax), ReduceOp::kMax);
  w.all_reduce_span(std::span<float>(fmin), ReduceOp::kMin);
  const int64_t rank_sum = int64_t(R) * (R - 1) / 2;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(f[size_t(i)], float(10 * rank_sum + R * i));
    EXPECT_EQ(n[size_t(i)], (rank_sum << 40) + int64_t(R) * i);
    EXPECT_EQ(fmax[size_t(i)], float((R - 1) * 10 + i));
    EXPECT_EQ(fmin[size_t(i)], float(i));
  }
}

TEST(Communicator, ReduceScatterGivesEachRankItsBlock) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  const int count = 3;
  std::vector<float> send(size_t(R * count));
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < count; ++i) send[size_t(b * count + i)] = float(100 * b + 10 * r + i);
  std::vector<float> recv(count);
  w.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
  const int rank_sum = R * (R - 1) / 2;
  for (int i = 0; i < count; ++i) EXPECT_EQ(recv[size_t(i)], float(100 * r * R + 10 * rank_sum + R * i));
}

TEST(Communicator, AllGatherAndAllGatherVConcatenateInRankOrder) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  const int32_t mine[2] = {r, -r};
  std::vector<int32_t> all(size_t(2 * R));
  w.all_gather(mine, all.data(), 2, DType::kI32);
  for (int p = 0; p < R; ++p) {
    EXPECT_EQ(all[size_t(2 * p)], p);
    EXPECT_EQ(all[size_t(2 * p + 1)], -p);
  }
  // Rank p sends p + 1 values p*100, p*100+1, ...; rank 0 also sends one, rank counts differ.
  std::vector<float> v(size_t(r + 1));
  std::iota(v.begin(), v.end(), float(r * 100));
  const std::vector<float> got = w.all_gather_vector(std::span<const float>(v));
  std::vector<float> want;
  for (int p = 0; p < R; ++p)
    for (int i = 0; i <= p; ++i) want.push_back(float(p * 100 + i));
  EXPECT_EQ(got, want);
  // An empty contribution is legal.
  const std::vector<float> none = w.all_gather_vector(std::span<const float>());
  EXPECT_TRUE(none.empty());
}

TEST(Communicator, AllToAllVDeliversEachPairsBlock) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  // Rank r sends (r + p) % 3 values to rank p, each encoding (from, to, index); some blocks are empty.
  std::vector<int64_t> send_counts(static_cast<size_t>(R)), recv_counts(static_cast<size_t>(R));
  std::vector<float> send;
  for (int p = 0; p < R; ++p) {
    send_counts[size_t(p)] = (r + p) % 3;
    recv_counts[size_t(p)] = (p + r) % 3;
    for (int i = 0; i < (r + p) % 3; ++i) send.push_back(float(1000 * r + 10 * p + i));
  }
  std::vector<float> recv(size_t(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t(0))));
  w.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DType::kF32);
  size_t at = 0;
  for (int p = 0; p < R; ++p)
    for (int i = 0; i < (p + r) % 3; ++i) EXPECT_EQ(recv[at++], float(1000 * p + 10 * r + i)) << "from " << p;
}

TEST(Communicator, BroadcastFromTheLastRank) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  int64_t v[3] = {r, r * 2, 7};
  w.broadcast(v, 3, DType::kI64, R - 1);
  EXPECT_EQ(v[0], R - 1);
  EXPECT_EQ(v[1], 2 * (R - 1));
  EXPECT_EQ(v[2], 7);
  w.barrier();
}

TEST(Communicator, SplitFormsGroupsByColorOrderedByKey) {
  Communicator& w = test_world();
  const int R = w.size(), r = w.rank();
  // Even and odd ranks, ordered by descending rank.
  std::unique_ptr<Communicator> g = w.split(r % 2, -r);
  const int members = (R - r % 2 + 1) / 2;
  EXPECT_EQ(g->size(), members);
  // Ranks of my parity above me come first.
  int above = 0;
  for (int p = r + 2; p < R; p += 2) ++above;
  EXPECT_EQ(g->rank(), above);
  const int64_t sum = g->all_reduce_value(int64_t(r));
  int64_t want = 0;
  for (int p = r % 2; p < R; p += 2) want += p;
  EXPECT_EQ(sum, want);
}

TEST(Communicator, BlockTypesAreRefused) {
  Communicator& w = test_world();
  uint8_t buf[34] = {};
  bool refused = false;
  try {
    w.all_reduce(buf, 32, DType::kQ8_0, ReduceOp::kSum);
  } catch (const Error& e) {
    refused = true;
    EXPECT_NE(std::string(e.what()).find("Q8_0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(refused) << "a Q8_0 all-reduce was accepted";
}

}  // namespace
}  // namespace myriad

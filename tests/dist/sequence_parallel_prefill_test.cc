// Sequence-parallel prefill for serving (model/prefill_shards.h, dist/sequence_parallel_prefill.h,
// serve/sequence_server.h) against one process, on every world size the test runs under (1, 2, 4 ranks): a
// prompt of 101 tokens (shards of 51/50 and 26/25/25/25 tokens, so boundaries fall inside the 16-token KDA chunks
// used here and the short convs need their halo from the shard before) through the inference model of tiny.json
// (KDA and MLA layers), against the whole prompt in one forward, which every rank computes.
//   - The last shard's logits for the prompt's last token, then 4 greedy decode steps from the state the shards
//     left (which must then be the whole prompt's: every KDA state composed through all shards, every latent row
//     cached), each within 1e-4 of max(1, |logit|max) of one process's (f32 rounding: the composed KDA state is
//     M S + S~ instead of one recurrence, ~1e-6; a lost state, halo or latent block moves logits by O(0.1)).
//   - The serving protocol: rank 0 leads with the last shard, the others follow until stop(); f32 and q8 caches
//     (the followers must cache rows as rank 0 does).
//   - With block-sparse MLA (blocks of 16, 2 local, top 1: late queries choose 1 of up to 3 earlier blocks), the
//     shards' queries choose from block means over every earlier shard's rows, and decode continues from them.
#include "dist/sequence_parallel_prefill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "dist_support.h"
#include "infer/decode_weights.h"
#include "serve/sequence_server.h"

namespace myriad {
namespace {

struct Fixture {
  ModelConfig config;
  std::shared_ptr<InferenceModel> model;
  std::vector<int32_t> prompt;

  explicit Fixture(bool sparse = false) {
    config = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
    if (sparse) config.mla_sparse_attention = SparseMlaConfig{16, 1, 32};
    model = std::make_shared<InferenceModel>(config, DecodeWeights::from_model(ModelWeights::random(config, 17)));
    model->kda_chunk = 16;
    std::mt19937_64 rng(9);
    prompt.resize(101);
    for (auto& t : prompt) t = int32_t(rng() % uint64_t(config.vocab_size));
  }

  // Largest |a - b| over max(1, max |b|).
  static double relative_gap(const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_vector(), y = b.to_vector();
    EXPECT_EQ(x.size(), y.size());
    double gap = 0, scale = 1;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      gap = std::max(gap, double(std::abs(x[i] - y[i])));
      scale = std::max(scale, double(std::abs(y[i])));
    }
    return gap / scale;
  }

  static int32_t argmax(const Tensor& logits) {
    const std::vector<float> v = logits.to_vector();
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
  }

  // The prompt's logits from `seq` (already prefilled, with `got` its last logits) against one process's, then 4
  // greedy steps from both states.
  void expect_continues_as_one_process(SequenceState& seq, const Tensor& got, DType cache_dtype) const {
    SequenceState whole = model->new_sequence(MlaCache::kDefaultPageTokens, cache_dtype);
    const BatchEntry all{&whole, std::span<const int32_t>(prompt)};
    Tensor want = model->forward(std::span<const BatchEntry>(&all, 1));
    ASSERT_EQ(seq.tokens, int64_t(prompt.size()));
    EXPECT_LT(relative_gap(got, want), 1e-4) << "the prompt's last logits";
    Tensor mine = got;
    for (int step = 0; step < 4; ++step) {
      const int32_t next = argmax(want);
      const BatchEntry a{&seq, std::span<const int32_t>(&next, 1)}, b{&whole, std::span<const int32_t>(&next, 1)};
      mine = model->forward(std::span<const BatchEntry>(&a, 1));
      want = model->forward(std::span<const BatchEntry>(&b, 1));
      EXPECT_LT(relative_gap(mine, want), 1e-4) << "decode step " << step << " from the shards' state";
    }
  }
};

void expect_shards_leave_the_whole_prompts_state(bool sparse) {
  Communicator& w = test::test_world();
  const Fixture f(sparse);
  ASSERT_GT(f.config.num_kda_layers(), 0);
  ASSERT_GT(f.config.num_mla_layers(), 0);
  CommunicatorPrefillShards shards(w, int64_t(f.prompt.size()));
  ASSERT_EQ(shards.offset(shards.count()), int64_t(f.prompt.size()));
  SequenceState seq = f.model->new_sequence();
  const int64_t first = shards.offset(shards.index());
  const BatchEntry mine{&seq, std::span<const int32_t>(f.prompt).subspan(size_t(first), size_t(shards.rows(w.rank()))),
                        &shards};
  const Tensor logits = f.model->forward(std::span<const BatchEntry>(&mine, 1));
  if (w.rank() == w.size() - 1) f.expect_continues_as_one_process(seq, logits, DType::kF32);
}

TEST(SequenceParallelPrefill, ShardsLeaveTheWholePromptsStateOnTheLastShard) {
  expect_shards_leave_the_whole_prompts_state(false);
}

TEST(SequenceParallelPrefill, BlockSparseMlaShardsLeaveTheWholePromptsState) {
  expect_shards_leave_the_whole_prompts_state(true);
}

TEST(SequenceParallelPrefill, TheServingProtocolLeadsWithTheLastShard) {
  Communicator& w = test::test_world();
  const Fixture f;
  SequenceParallelServing serving(w);
  if (w.rank() != 0) {
    serving.follow(*f.model);
    return;
  }
  for (const DType dtype : {DType::kF32, DType::kQ8_0}) {
    SequenceState seq = f.model->new_sequence(32, dtype);
    const Tensor logits = serving.prefill(*f.model, seq, f.prompt);
    f.expect_continues_as_one_process(seq, logits, dtype);
  }
  // A prompt too short to give every shard the conv window is refused before anything is sent.
  const int64_t need = SequenceParallelServing::min_tokens(f.config, w.size());
  SequenceState seq = f.model->new_sequence();
  const std::vector<int32_t> short_prompt(size_t(need - 1), 5);
  if (need > 1) {
    EXPECT_THROW(serving.prefill(*f.model, seq, short_prompt), Error);
  }
  serving.stop();
}

TEST(SequenceParallelPrefill, SplitIsEvenAndRefusesEmptyShards) {
  EXPECT_EQ(CommunicatorPrefillShards::split(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(CommunicatorPrefillShards::split(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_THROW(CommunicatorPrefillShards::split(3, 4), Error);
}

}  // namespace
}  // namespace myriad

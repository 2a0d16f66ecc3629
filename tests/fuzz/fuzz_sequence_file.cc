// Fuzz target: a sequence state file (any bytes; `myriad generate --load-state`), read for the tiny model with
// block-sparse MLA as three engines would (f32, q8 and bf16 caches, two page sizes: the q8 one as stored, the
// others converted); an accepted state must hold its tokens' rows in every MLA layer and decode one more token.
//
// The seeds are this target's own files (a state carries its model's fingerprint, so only states of this very
// model get past the first check): MYRIAD_FUZZ_WRITE_SEEDS=DIR fuzz_sequence_file writes them into DIR and exits.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "fuzz/support.h"
#include "infer/decode_weights.h"
#include "infer/sequence_file.h"
#include "model/config.h"
#include "model/weights.h"

using namespace myriad;

namespace {

const InferenceModel& model() {
  static const std::shared_ptr<InferenceModel> m = [] {
    ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
    c.vocab_size = 400;
    c.mla_sparse_attention = SparseMlaConfig{8, 2, 16};
    return std::make_shared<InferenceModel>(c, DecodeWeights::from_model(ModelWeights::random(c, 7)));
  }();
  return *m;
}

void write_seeds(const std::string& dir) {
  for (const auto& [n, dtype] :
       {std::pair<int64_t, DType>{40, DType::kF32}, {150, DType::kBF16}, {150, DType::kQ8_0}}) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = int32_t((i * 37 + 11) % 400);
    SequenceState st = model().new_sequence(16, dtype);
    const BatchEntry e{&st, std::span<const int32_t>(tokens)};
    (void)model().forward(std::span<const BatchEntry>(&e, 1));
    save_sequence_file(dir + "/seed-" + std::to_string(n) + "-" + dtype_name(dtype), model(), tokens, 0, st.kda,
                       st.mla);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)model();
  if (const char* dir = std::getenv("MYRIAD_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("state.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  for (const auto& [page, dtype] :
       {std::pair<int64_t, DType>{16, DType::kF32}, {16, DType::kQ8_0}, {8, DType::kBF16}}) {
    fuzz::expect_accept_or_error([&, page = page, dtype = dtype] {
      SequenceSnapshot snap = load_sequence_file(path, model(), page, dtype);
      const ModelConfig& c = model().config();
      const auto n = int64_t(snap.tokens.size());
      SequenceState st;
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (c.mixer(l) == Mixer::kMla)
          MYRIAD_CHECK(snap.mla[size_t(l)].size() == n && snap.mla[size_t(l)].page_tokens() == page &&
                           snap.mla[size_t(l)].dtype() == dtype,
                       "layer ", l, ": an accepted state's cache does not hold its ", n, " tokens as asked");
        st.kda.push_back(std::move(snap.kda[size_t(l)]));
        st.mla.push_back(std::move(snap.mla[size_t(l)]));
      }
      st.tokens = n;
      if (n + 1 > c.max_position_embeddings) return;
      const int32_t next = 1;
      const BatchEntry e{&st, std::span<const int32_t>(&next, 1)};
      const Tensor logits = model().forward(std::span<const BatchEntry>(&e, 1));
      MYRIAD_CHECK(logits.size(1) == c.vocab_size, "decoding on from an accepted state");
    });
  }
  return 0;
}

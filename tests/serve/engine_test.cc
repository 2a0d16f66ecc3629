// The serving engine against the training model: the batched inference forward (KDA states, paged MLA caches,
// prefill in pieces, decode token by token) equals Transformer::forward; a batch of requests gives the same
// tokens as the same requests one by one; prefix reuse changes nothing but the work; cancellation frees the
// state; bad requests get one clear error.
#include "serve/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "deploy/prune.h"
#include "infer/image_input.h"
#include "infer/sequence_file.h"
#include "io/safetensors.h"
#include "model/param_spec.h"
#include "model/transformer.h"
#include "serve/evaluate.h"

namespace myriad {
namespace {

struct TinyModel {
  ModelConfig config;
  std::unique_ptr<Transformer> train_model;
  std::shared_ptr<InferenceModel> model;
};

const TinyModel& tiny() {
  static TinyModel* m = [] {
    auto* t = new TinyModel;
    std::vector<std::string> texts;
    std::mt19937 rng(5);
    const char* words[] = {"alpha", "beta", "gamma", "delta", "river", "stone", "light", "north", "é", "€"};
    for (int i = 0; i < 400; ++i) {
      std::string line;
      for (int j = 0; j < 9; ++j) line += std::string(j ? " " : "") + words[rng() % 10];
      texts.push_back(line);
    }
    Tokenizer tok = Tokenizer::train_from_texts(texts, 320);
    t->config = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
    t->config.vocab_size = tok.vocab_size();
    t->train_model = std::make_unique<Transformer>(t->config, ModelWeights::random(t->config, 31));
    t->model = std::make_shared<InferenceModel>(t->config, DecodeWeights::from_model(t->train_model->weights()), tok);
    return t;
  }();
  return *m;
}

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

Tensor reference_logits(const std::vector<int32_t>& tokens) {
  ag::NoGradGuard ng;
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  const ForwardResult r = tiny().train_model->forward(Tensor::from_vector(ids, {int64_t(ids.size())}), Tensor());
  return tiny().train_model->logits(r.hidden);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.contiguous().to_vector()) m = std::max(m, double(std::abs(v)));
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, double(std::abs(x[i] - y[i])));
  return m;
}

TEST(InferenceModel, PiecesAndTokensEqualTheTrainingForward) {
  const InferenceModel& m = *tiny().model;
  const std::vector<int32_t> tokens = random_tokens(300, 1, m.vocab_size());
  const Tensor ref = reference_logits(tokens);
  const double scale = max_abs(ref);
  // Whole prompt at once, then in pieces of 37 tokens, then a 64-token prefill followed by single tokens.
  for (int64_t piece : {int64_t(300), int64_t(37), int64_t(1)}) {
    SequenceState st = m.new_sequence(16);
    std::vector<Tensor> parts;
    for (int64_t t0 = 0; t0 < 300;) {
      const int64_t n = piece == 1 && t0 == 0 ? 64 : std::min<int64_t>(piece, 300 - t0);
      const BatchEntry e{&st, std::span<const int32_t>(tokens.data() + t0, size_t(n))};
      parts.push_back(m.forward(std::span<const BatchEntry>(&e, 1), /*all_logits=*/true));
      t0 += n;
    }
    int64_t r = 0;
    double worst = 0;
    for (const Tensor& p : parts) {
      worst = std::max(worst, max_diff(p, ref.slice(0, r, r + p.size(0))));
      r += p.size(0);
    }
    EXPECT_EQ(st.tokens, 300);
    // f32 throughout; absorbed vs naive MLA and recurrent vs chunkwise KDA reassociate sums: 1e-4 of the scale.
    EXPECT_LE(worst, 1e-4 * scale) << "pieces of " << piece;
  }
}

TEST(InferenceModel, RopeVariantDecodesAtTheRightPositions) {
  // mla_use_nope false: the MLA keys and queries are rotated by their positions, so a decode step at a wrong
  // position (or a prefix restored at the wrong offset) changes the logits.
  ModelConfig c = tiny().config;
  c.mla_use_nope = false;
  Transformer ref_model(c, ModelWeights::random(c, 41));
  const InferenceModel m(c, DecodeWeights::from_model(ref_model.weights()));
  const std::vector<int32_t> tokens = random_tokens(150, 12, c.vocab_size);
  Tensor ref;
  {
    ag::NoGradGuard ng;
    std::vector<int64_t> ids(tokens.begin(), tokens.end());
    ref = ref_model.logits(ref_model.forward(Tensor::from_vector(ids, {150}), Tensor()).hidden);
  }
  SequenceState st = m.new_sequence(16);
  const BatchEntry head{&st, std::span<const int32_t>(tokens.data(), 100)};
  m.forward(std::span<const BatchEntry>(&head, 1));
  double worst = 0;
  for (int64_t t = 100; t < 150; ++t) {
    const BatchEntry e{&st, std::span<const int32_t>(tokens.data() + t, 1)};
    worst = std::max(worst, max_diff(m.forward(std::span<const BatchEntry>(&e, 1)), ref.slice(0, t, t + 1)));
  }
  EXPECT_LE(worst, 1e-4 * max_abs(ref));
}

// The bytes a decode step reads (the bandwidth figures of bench serve): counted here from the weights' own
// storage, the routed experts apart.
TEST(InferenceModel, ActiveWeightBytesCountsTheExpertsABatchReaches) {
  const ModelConfig c = tiny().config;
  const auto w = DecodeWeights::from_model(ModelWeights::random(c, 44));
  const InferenceModel m(c, w);
  double dense = 0, routed = 0;
  for (const ParamSpec& spec : model_param_specs(c)) {
    const double bytes = double(spec.shape.size() == 2 ? w->linear(spec.name).bytes() : w->tensor(spec.name).nbytes());
    if (spec.component == Component::kEmbeddings) continue;  // one row per token, added below
    (spec.name.find(".experts.") != std::string::npos ? routed : dense) += bytes;
  }
  ASSERT_GT(routed, 0.0);  // the tiny config has MoE layers
  const double E = double(c.num_experts), k = double(c.num_experts_per_token), row = double(c.hidden_size) * 4;
  EXPECT_NEAR(double(m.active_weight_bytes()), dense + row + routed * k / E, 2.0);
  // 16 tokens reach E (1 - (1 - k/E)^16) experts per layer when routing is uniform, never more than all of them.
  const double reach = 1.0 - std::pow(1.0 - k / E, 16.0);
  EXPECT_NEAR(double(m.active_weight_bytes(16)), dense + 16 * row + routed * reach, 2.0);
  EXPECT_LE(double(m.active_weight_bytes(100000)), dense + 100000 * row + routed + 2.0);
  EXPECT_NEAR(double(m.routed_expert_bytes()), routed * k / E, 2.0);
  EXPECT_NEAR(double(m.routed_expert_bytes(16)), routed * reach, 2.0);
}

// Model variants the serving path implements on its own (SwiGLU; a softmax router, with and without the
// renormalised top-k weights and a scaling factor): logits against the training forward, prefill then decode.
void expect_variant_equals_training_forward(const ModelConfig& c, uint64_t seed) {
  Transformer ref_model(c, ModelWeights::random(c, seed));
  const InferenceModel m(c, DecodeWeights::from_model(ref_model.weights()));
  const std::vector<int32_t> tokens = random_tokens(80, 13, c.vocab_size);
  Tensor ref;
  {
    ag::NoGradGuard ng;
    std::vector<int64_t> ids(tokens.begin(), tokens.end());
    ref = ref_model.logits(ref_model.forward(Tensor::from_vector(ids, {80}), Tensor()).hidden);
  }
  SequenceState st = m.new_sequence(16);
  const BatchEntry head{&st, std::span<const int32_t>(tokens.data(), 60)};
  // f32 both ways, reassociated sums (absorbed MLA, recurrent KDA): 1e-4 of the logits' scale.
  EXPECT_LE(max_diff(m.forward(std::span<const BatchEntry>(&head, 1), true), ref.slice(0, 0, 60)), 1e-4 * max_abs(ref));
  for (int64_t t = 60; t < 80; ++t) {
    const BatchEntry e{&st, std::span<const int32_t>(tokens.data() + t, 1)};
    EXPECT_LE(max_diff(m.forward(std::span<const BatchEntry>(&e, 1)), ref.slice(0, t, t + 1)), 1e-4 * max_abs(ref))
        << "decode token " << t;
  }
}

TEST(InferenceModel, SoftmaxRouterVariantsEqualTheTrainingForward) {
  ModelConfig c = tiny().config;
  c.moe_router_activation_func = RouterActivation::kSoftmax;
  expect_variant_equals_training_forward(c, 45);
  c.moe_renormalize = false;
  c.routed_scaling_factor = 2.5;
  expect_variant_equals_training_forward(c, 46);
}

TEST(InferenceModel, SwigluVariantEqualsTheTrainingForward) {
  ModelConfig c = tiny().config;
  c.hidden_act = HiddenAct::kSilu;  // SwiGLU in the dense FFN, the shared expert and the routed experts
  expect_variant_equals_training_forward(c, 43);
}

TEST(InferenceModel, ABatchEqualsItsSequencesAlone) {
  const InferenceModel& m = *tiny().model;
  // Three sequences in different phases: a 50-token prefill, a 1-token decode after 90, a 7-token chunk after 20.
  const std::vector<int32_t> a = random_tokens(50, 2, m.vocab_size()), b = random_tokens(91, 3, m.vocab_size()),
                             c = random_tokens(27, 4, m.vocab_size());
  SequenceState sa = m.new_sequence(16), sb = m.new_sequence(16), sc = m.new_sequence(16);
  BatchEntry pre_b{&sb, std::span<const int32_t>(b.data(), 90)}, pre_c{&sc, std::span<const int32_t>(c.data(), 20)};
  m.forward(std::span<const BatchEntry>(&pre_b, 1));
  m.forward(std::span<const BatchEntry>(&pre_c, 1));
  SequenceState sb2 = m.new_sequence(16), sc2 = m.new_sequence(16);
  m.forward(std::span<const BatchEntry>(&pre_b, 1).first(0));  // an empty batch is legal
  BatchEntry pre_b2{&sb2, pre_b.tokens}, pre_c2{&sc2, pre_c.tokens};
  m.forward(std::span<const BatchEntry>(&pre_b2, 1));
  m.forward(std::span<const BatchEntry>(&pre_c2, 1));
  const std::vector<BatchEntry> batch = {{&sa, std::span<const int32_t>(a)},
                                         {&sb, std::span<const int32_t>(b.data() + 90, 1)},
                                         {&sc, std::span<const int32_t>(c.data() + 20, 7)}};
  const Tensor together = m.forward(batch);
  SequenceState sa2 = m.new_sequence(16);
  const std::vector<BatchEntry> alone = {{&sa2, batch[0].tokens}, {&sb2, batch[1].tokens}, {&sc2, batch[2].tokens}};
  for (size_t i = 0; i < 3; ++i) {
    const Tensor one = m.forward(std::span<const BatchEntry>(&alone[i], 1));
    // The batch changes only the shapes of the matrix products (blocking of the sums): f32 rounding.
    EXPECT_LE(max_diff(together.slice(0, int64_t(i), int64_t(i) + 1), one), 1e-4 * max_abs(one)) << "entry " << i;
  }
}

std::vector<std::vector<int32_t>> run(Engine& e, const std::vector<GenerationRequest>& reqs,
                                      std::vector<std::string>* texts = nullptr) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  if (texts) texts->assign(reqs.size(), "");
  std::vector<uint64_t> ids;
  std::map<uint64_t, size_t> slot;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const uint64_t id = e.submit(reqs[i], [&out, &slot, texts](const TokenEvent& ev) {
      const size_t k = slot.at(ev.request);
      if (ev.token >= 0) out[k].push_back(ev.token);
      if (texts) (*texts)[k] += ev.text;
    });
    slot[id] = i;
  }
  e.run_until_idle();
  return out;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.stop_at_eos = false;
  return r;
}

// With each latent cache (f32; bf16 or q8: fewer bytes per page, which the engine's accounting follows).
class EngineCache : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, EngineCache, ::testing::Values(DType::kF32, DType::kBF16, DType::kQ8_0),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST_P(EngineCache, BatchedRequestsEqualOneByOne) {
  const auto& m = tiny().model;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(greedy(random_tokens(10 + 40 * i, 10 + i, m->vocab_size()), 12 + i));
  EngineOptions opt;
  opt.page_tokens = 16;
  opt.prefix_every = 0;
  opt.prefill_chunk = 64;  // prompts longer than this are prefilled over several steps, beside decoding ones
  opt.cache_dtype = GetParam();
  Engine together(m, opt);
  const auto batched = run(together, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Engine alone(m, opt);
    const auto single = run(alone, {reqs[i]});
    EXPECT_EQ(batched[i], single[0]) << "request " << i;
    EXPECT_EQ(int64_t(batched[i].size()), reqs[i].max_tokens);
  }
  const EngineMetrics mt = together.metrics();
  EXPECT_EQ(mt.requests_finished, reqs.size());
  EXPECT_EQ(mt.running, 0);
  EXPECT_EQ(mt.cache_bytes_used, 0u);
  EXPECT_EQ(mt.cache_bytes_reserved, 0u);
}

TEST(Engine, CacheDtypeNames) {
  EXPECT_EQ(cache_dtype_from_name("f32"), DType::kF32);
  EXPECT_EQ(cache_dtype_from_name("bf16"), DType::kBF16);
  EXPECT_EQ(cache_dtype_from_name("q8"), DType::kQ8_0);
  EXPECT_THROW(cache_dtype_from_name("f16"), Error);
}

TEST(Engine, SeededSamplingInABatchEqualsOneByOne) {
  // Each request's generator is its own: the tokens drawn do not depend on the batch or on the threads that
  // sample a step's sequences.
  const auto& m = tiny().model;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = greedy(random_tokens(12 + 5 * i, 50 + i, m->vocab_size()), 10);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 1000 + uint64_t(i);
    reqs.push_back(r);
  }
  Engine together(m);
  const auto batched = run(together, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Engine alone(m);
    EXPECT_EQ(batched[i], run(alone, {reqs[i]})[0]) << "request " << i;
  }
}

TEST(Engine, GreedyEqualsTheTrainingModelsArgmax) {
  const auto& m = tiny().model;
  std::vector<int32_t> ctx = random_tokens(30, 7, m->vocab_size());
  Engine e(m);
  const auto got = run(e, {greedy(ctx, 8)})[0];
  for (int32_t t : got) {  // the engine's token must be an argmax of the full forward over the context so far
    const Tensor l = reference_logits(ctx);
    const float* last = l.data<float>() + (l.size(0) - 1) * l.size(1);
    const float best = *std::max_element(last, last + l.size(1));
    EXPECT_GE(last[t], best - 1e-4f * std::abs(best));
    ctx.push_back(t);
  }
}

// Images: rows at the prompt's placeholders (split across prefill chunks) give the tokens the training model's
// argmax gives with the same rows placed; a cached prefix holding image tokens is reused only for the same rows,
// a text-only prefix before them for any.
TEST(Engine, ImagesTakeTheirPlaceholdersAndKeyThePrefixCache) {
  const auto& t = tiny();
  const int32_t ph = int32_t(*t.config.media_placeholder_token_id);
  const int64_t D = t.config.hidden_size;
  std::vector<int32_t> prompt = random_tokens(70, 21, t.model->vocab_size());
  prompt.insert(prompt.end(), 6, ph);
  for (int32_t x : random_tokens(70, 22, t.model->vocab_size())) prompt.push_back(x);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] == ph && (i < 70 || i >= 76)) prompt[i] = ph + 1;  // placeholders only at 70..75
  std::mt19937 rng(23);
  std::normal_distribution<float> gauss;
  auto rows = [&] {
    Tensor r = Tensor::empty({6, D});
    for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = gauss(rng);
    return r;
  };
  const Tensor r1 = rows(), r2 = rows();
  auto request = [&](const Tensor& r) {
    GenerationRequest g = greedy(prompt, 5);
    g.image_rows = r;
    return g;
  };
  EngineOptions opt;
  opt.page_tokens = 16;
  opt.prefix_every = 64;
  opt.prefill_chunk = 72;  // the first chunk ends inside the image's run
  Engine e(t.model, opt);
  const auto first = run(e, {request(r1)})[0];
  std::vector<int64_t> ctx(prompt.begin(), prompt.end());
  const ag::Var placed(r1);
  for (int32_t tok : first) {  // each token an argmax of the training forward with the rows placed
    ag::NoGradGuard ng;
    ForwardOptions fo;
    fo.image_features = &placed;
    const Tensor l = t.train_model->logits(
        t.train_model->forward(Tensor::from_vector(ctx, {int64_t(ctx.size())}), Tensor(), fo).hidden);
    const float* last = l.data<float>() + (l.size(0) - 1) * l.size(1);
    EXPECT_GE(last[tok], *std::max_element(last, last + l.size(1)) - 1e-4f);
    ctx.push_back(tok);
  }
  const auto second = run(e, {request(r2)})[0];  // other image: only the text snapshot at 64 is reused
  EXPECT_EQ(e.metrics().prefix_tokens_reused, 64u);
  const auto third = run(e, {request(r1)})[0];  // the same image again: the snapshot at 128 too
  EXPECT_EQ(e.metrics().prefix_tokens_reused, 64u + 128u);
  EXPECT_EQ(third, first);
  opt.prefix_every = 0;
  Engine plain(t.model, opt);
  EXPECT_EQ(run(plain, {request(r2)})[0], second);
  GenerationRequest bad = request(r1);
  bad.prompt[70] = ph + 1;  // 5 placeholders, 6 rows
  EXPECT_THROW(plain.submit(bad, [](const TokenEvent&) {}), Error);
}

// configs/tiny-vl.json (tiny's text model with a small vision tower), random weights; the tokenizer of tiny().
const TinyModel& tiny_vlm() {
  static TinyModel* m = [] {
    auto* t = new TinyModel;
    t->config = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny-vl.json", nullptr);
    t->config.vocab_size = tiny().config.vocab_size;
    auto w = std::make_shared<ModelWeights>(ModelWeights::random(t->config, 37));
    t->train_model = std::make_unique<Transformer>(t->config, *w);
    t->model = std::make_shared<InferenceModel>(t->config, DecodeWeights::from_model(*w), tiny().model->tokenizer());
    t->model->set_vision_weights(w);
    return t;
  }();
  return *m;
}

// Images given as patches: the engine encodes those of the requests that start together in one call of the tower
// and hands each request its own rows: each request's tokens equal those it gets with its rows encoded alone and
// given encoded. Prefixes holding an image are keyed by its patches; placeholder runs must hold whole images.
TEST(Engine, EncodesTheImagesOfRequestsStartingTogetherAndKeysThemByContent) {
  const auto& t = tiny_vlm();
  const VisionConfig& v = *t.config.vision_config;
  const int32_t ph = int32_t(*t.config.media_placeholder_token_id);
  std::mt19937 rng(41);
  auto image = [&](int64_t w, int64_t h) {
    Image im;
    im.width = w;
    im.height = h;
    for (int64_t i = 0; i < w * h * 3; ++i) im.rgb.push_back(uint8_t(rng() % 256));
    return im;
  };
  // Request k: text, its images' runs (request 2 has two adjacent images in one run), text.
  const std::vector<std::vector<Image>> images = {{image(28, 28)}, {image(56, 28)}, {image(28, 84), image(56, 56)}};
  std::vector<GenerationRequest> as_patches, as_rows;
  for (size_t k = 0; k < images.size(); ++k) {
    ImageInput in;
    for (const Image& im : images[k]) add_image(in, v, im);
    std::vector<int32_t> prompt = random_tokens(30, 50 + k, t.model->vocab_size());
    int64_t n = 0;
    for (int64_t x : in.tokens) n += x;
    prompt.insert(prompt.begin() + 10, size_t(n), ph);
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] == ph && (i < 10 || i >= size_t(10 + n))) prompt[i] = ph + 1;
    GenerationRequest g = greedy(prompt, 6);
    g.image_patches = in.patches(v);
    g.image_grids = in.grids;
    as_patches.push_back(g);
    g.image_rows = t.model->encode_images(g.image_patches, g.image_grids);
    g.image_patches = Tensor();
    g.image_grids.clear();
    as_rows.push_back(g);
  }
  EngineOptions opt;
  opt.page_tokens = 16;
  opt.prefix_every = 16;
  Engine together(t.model, opt), alone(t.model, opt);
  const auto got = run(together, as_patches);
  for (size_t k = 0; k < images.size(); ++k) EXPECT_EQ(got[k], run(alone, {as_rows[k]})[0]) << "request " << k;
  // The same image again: its snapshot at 16 tokens (which holds the image's token at 10) is reused; another image
  // of the same size at the same place: not (no snapshot ends before the image).
  const uint64_t reused = together.metrics().prefix_tokens_reused;
  run(together, {as_patches[0]});
  EXPECT_EQ(together.metrics().prefix_tokens_reused, reused + 16);
  GenerationRequest other = as_patches[0];
  ImageInput in;
  add_image(in, v, image(28, 28));
  other.image_patches = in.patches(v);
  run(together, {other});
  EXPECT_EQ(together.metrics().prefix_tokens_reused, reused + 16);
  // Runs that do not hold whole images.
  GenerationRequest split = as_patches[2];  // 3 + 4 placeholders: a run of 2 then 5
  split.prompt[12] = ph + 1;
  EXPECT_THROW(together.submit(split, [](const TokenEvent&) {}), Error);
  GenerationRequest short_run = as_patches[0];  // one placeholder too few
  short_run.prompt[10] = ph + 1;
  EXPECT_THROW(together.submit(short_run, [](const TokenEvent&) {}), Error);
  GenerationRequest no_tower = greedy(as_patches[0].prompt, 2);  // a text-only model
  no_tower.image_patches = as_patches[0].image_patches;
  no_tower.image_grids = as_patches[0].image_grids;
  Engine text_only(tiny().model, opt);
  EXPECT_THROW(text_only.submit(no_tower, [](const TokenEvent&) {}), Error);
}

TEST_P(EngineCache, PrefixReuseGivesTheSameTokensWithLessWork) {
  const auto& m = tiny().model;
  const std::vector<int32_t> system = random_tokens(140, 8, m->vocab_size());
  auto with_suffix = [&](uint64_t seed) {
    std::vector<int32_t> p = system;
    for (int32_t t : random_tokens(20, seed, m->vocab_size())) p.push_back(t);
    return greedy(p, 6);
  };
  EngineOptions opt;
  opt.page_tokens = 16;
  opt.prefix_every = 64;
  opt.cache_dtype = GetParam();
  Engine cached(m, opt);
  run(cached, {with_suffix(100)});
  const auto second = run(cached, {with_suffix(101)})[0];
  const EngineMetrics mt = cached.metrics();
  EXPECT_EQ(mt.prefix_hits, 1u);
  EXPECT_EQ(mt.prefix_tokens_reused, 128u);  // the longest snapshot inside the shared 140 tokens
  EXPECT_EQ(mt.prompt_tokens, 160u + 160u - 128u);
  EXPECT_GT(mt.prefix_cache_bytes, 0u);
  opt.prefix_every = 0;
  Engine plain(m, opt);
  EXPECT_EQ(run(plain, {with_suffix(101)})[0], second);
  EXPECT_EQ(plain.metrics().prefix_hits, 0u);
  // Snapshots every 34 tokens, free of the 16-token pages (one ending inside a page copies it): the longest inside
  // the shared 140 tokens is 136, inside the page of tokens 128..143; two sequences resuming from it write their
  // different tokens 140..143 into their own copies of that page.
  opt.prefix_every = 34;
  Engine fine(m, opt);
  run(fine, {with_suffix(100)});
  // Compared by log-probabilities: this random model's are near uniform, so 4 rows of the other sequence in the
  // page (a page shared instead of copied) move them by only ~1e-4 and change no greedy token; resuming changes
  // only the prefill's chunking (f32 association: <= 1e-6 measured).
  auto logprobs = [](Engine& e, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::vector<float>> lp(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
      e.submit(reqs[i], [&lp, i](const TokenEvent& ev) {
        if (ev.token >= 0) lp[i].push_back(ev.logprob);
      });
    e.run_until_idle();
    return lp;
  };
  const auto both = logprobs(fine, {with_suffix(101), with_suffix(102)});
  EXPECT_EQ(fine.metrics().prefix_tokens_reused, 2u * 136u);
  for (size_t i = 0; i < 2; ++i) {
    const auto alone = logprobs(plain, {with_suffix(101 + i)})[0];
    ASSERT_EQ(both[i].size(), alone.size());
    for (size_t t = 0; t < alone.size(); ++t)
      EXPECT_NEAR(both[i][t], alone[t], 1e-5) << "request " << i << " token " << t;
  }
}

// The tiny model with block-sparse MLA (blocks of 8 tokens, 2 chosen, a 16-token window), so that state files
// carry block means too.
std::shared_ptr<InferenceModel> sparse_tiny() {
  static std::shared_ptr<InferenceModel> m = [] {
    ModelConfig c = tiny().config;
    c.mla_sparse_attention = SparseMlaConfig{8, 2, 16};
    return std::make_shared<InferenceModel>(c, DecodeWeights::from_model(ModelWeights::random(c, 31)),
                                            tiny().model->tokenizer());
  }();
  return m;
}

std::string state_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / (name + "_" + std::to_string(getpid()) + ".safetensors"))
      .string();
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A prefix snapshot saved by one engine and loaded by another (a new process would do the same: the file is all
// it reads) gives the tokens a plain engine gives, prefilling only what follows it; dense and sparse MLA.
TEST_P(EngineCache, SavedPrefixResumesInAnotherEngine) {
  for (const auto& m : {tiny().model, sparse_tiny()}) {
    const std::vector<int32_t> doc = random_tokens(200, 21, m->vocab_size());
    EngineOptions opt;
    opt.page_tokens = 16;
    opt.prefix_every = 64;
    opt.cache_dtype = GetParam();
    const std::string path = state_path("saved_prefix");
    {
      Engine first(m, opt);
      run(first, {greedy(concat(doc, random_tokens(9, 1, m->vocab_size())), 4)});
      EXPECT_EQ(first.save_prefix(random_tokens(30, 2, m->vocab_size()), path), 0);  // never prefilled
      ASSERT_EQ(first.save_prefix(doc, path), 192);  // the longest snapshot inside the document
    }
    const GenerationRequest question = greedy(concat(doc, random_tokens(12, 3, m->vocab_size())), 8);
    Engine second(m, opt);
    ASSERT_EQ(second.load_prefix(path), 192);
    EXPECT_GT(second.metrics().prefix_cache_bytes, 0u);
    const auto resumed = run(second, {question})[0];
    EXPECT_EQ(second.metrics().prefix_tokens_reused, 192u);
    EXPECT_EQ(second.metrics().prompt_tokens, 212u - 192u);
    opt.prefix_every = 0;
    Engine plain(m, opt);
    EXPECT_EQ(run(plain, {question})[0], resumed) << "sparse " << bool(m->config().mla_sparse_attention);
    std::filesystem::remove(path);
  }
}

// A state of any length (here 150 tokens: inside a page, inside a sparse block) written from a SequenceState and
// read by engines of other page sizes and, between f32 and bf16, another dtype (the rows convert exactly: bf16
// widened to f32 and back is the same value).
TEST(Engine, StateFilesConvertPageSizeAndDtype) {
  for (const auto& m : {tiny().model, sparse_tiny()}) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
      const std::vector<int32_t> doc = random_tokens(150, 31, m->vocab_size());
      SequenceState st = m->new_sequence(16, dtype);
      const BatchEntry e{&st, std::span<const int32_t>(doc)};
      m->forward(std::span<const BatchEntry>(&e, 1));
      const std::string path = state_path("state_convert");
      save_sequence_file(path, *m, doc, 0, st.kda, st.mla);
      // Readers: q8 only with the writer's pages (a new page size would quantize the rows again).
      std::vector<std::pair<int64_t, DType>> readers = {{16, dtype}};
      if (dtype != DType::kQ8_0) readers = {{32, DType::kF32}, {8, DType::kBF16}, {16, dtype}};
      for (const auto& [page, read_dtype] : readers) {
        EngineOptions opt;
        opt.page_tokens = page;
        opt.prefix_every = 0;
        opt.cache_dtype = read_dtype;
        // The rows the reader would hold had it prefilled itself: a bf16 reader of f32 rows rounds them like this.
        const bool exact = read_dtype == dtype || dtype == DType::kBF16;
        const GenerationRequest question = greedy(concat(doc, random_tokens(7, 4, m->vocab_size())), 6);
        Engine reader(m, opt);
        ASSERT_EQ(reader.load_prefix(path), 150);
        const auto resumed = run(reader, {question})[0];
        EXPECT_EQ(reader.metrics().prefix_tokens_reused, 150u);
        opt.cache_dtype = dtype;  // the writer's rows, without a file
        Engine plain(m, opt);
        if (exact) {
          EXPECT_EQ(run(plain, {question})[0], resumed)
              << dtype_name(dtype) << " -> " << dtype_name(read_dtype) << " pages " << page;
        }
      }
      std::filesystem::remove(path);
    }
  }
}

// Another model's state, a damaged file and a file that is no state: one clear error each, nothing loaded.
TEST(Engine, StateFilesFromElsewhereAreRefused) {
  const auto& m = tiny().model;
  const std::vector<int32_t> doc = random_tokens(40, 41, m->vocab_size());
  SequenceState st = m->new_sequence(16);
  const BatchEntry e{&st, std::span<const int32_t>(doc)};
  m->forward(std::span<const BatchEntry>(&e, 1));
  const std::string path = state_path("state_bad");
  save_sequence_file(path, *m, doc, 0, st.kda, st.mla);
  auto error_of = [](const std::shared_ptr<InferenceModel>& model, const std::string& p) -> std::string {
    Engine engine(model);
    try {
      engine.load_prefix(p);
    } catch (const Error& err) {
      EXPECT_EQ(engine.metrics().prefix_cache_bytes, 0u);
      return err.what();
    }
    return "";
  };
  // The same architecture with other weights (one changed weight is enough).
  auto other_weights = ModelWeights::random(tiny().config, 32);
  auto other =
      std::make_shared<InferenceModel>(tiny().config, DecodeWeights::from_model(other_weights), m->tokenizer());
  EXPECT_NE(model_fingerprint(*other), model_fingerprint(*m));
  EXPECT_EQ(model_fingerprint(*std::make_shared<InferenceModel>(
                tiny().config, DecodeWeights::from_model(tiny().train_model->weights()), m->tokenizer())),
            model_fingerprint(*m));
  EXPECT_NE(error_of(other, path).find("the state of another model"), std::string::npos);
  // Sparse attention changes the config, so the state is another model's too.
  EXPECT_NE(error_of(sparse_tiny(), path).find("another model"), std::string::npos);
  // Truncated: the safetensors reader refuses it.
  const std::string cut = state_path("state_cut");
  std::filesystem::copy_file(path, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(path) - 10);
  EXPECT_NE(error_of(m, cut), "");
  // A safetensors file that is no state.
  const std::string weights = state_path("state_weights");
  save_safetensors(weights, {{"x", Tensor::zeros({2})}});
  EXPECT_NE(error_of(m, weights).find("not a myriad sequence state"), std::string::npos);
  for (const auto& p : {path, cut, weights}) std::filesystem::remove(p);
}

// EngineOptions::long_prefill (what sequence-parallel serving plugs in): prompts of at least long_prefill_min
// tokens that start from nothing go to it whole, in one step, and decoding continues from the state it fills;
// shorter prompts and prompts resuming a cached prefix prefill in chunks; a failing hook ends only its request.
// The hook here prefills with the model itself in one forward (the sharded one is tested in test_dist).
TEST(Engine, LongPrefillHookTakesLongFreshPromptsWhole) {
  const auto& m = tiny().model;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(greedy(random_tokens(40 + 60 * i, 20 + i, m->vocab_size()), 9));
  EngineOptions opt;
  opt.page_tokens = 16;
  opt.prefix_every = 0;
  opt.prefill_chunk = 32;  // the long prompts would otherwise take several steps
  Engine chunked(m, opt);
  const auto want = run(chunked, reqs);

  std::vector<int64_t> taken;
  opt.long_prefill_min = 100;
  opt.long_prefill = [&](SequenceState& state, std::span<const int32_t> prompt) {
    EXPECT_EQ(state.tokens, 0);
    taken.push_back(int64_t(prompt.size()));
    const BatchEntry whole{&state, prompt};
    return m->forward(std::span<const BatchEntry>(&whole, 1));
  };
  Engine hooked(m, opt);
  EXPECT_EQ(run(hooked, reqs), want);
  EXPECT_EQ(taken, (std::vector<int64_t>{100, 160}));  // the 40-token prompt prefilled in chunks
  EXPECT_EQ(hooked.metrics().long_prefills, 2u);
  EXPECT_EQ(hooked.metrics().prompt_tokens, 300u);

  // With prefix snapshots the hook stops at the last boundary (128 of 160 tokens: the snapshot is stored, the
  // other 32 prefill in chunks), and a prompt resuming that prefix starts from it: chunks, not the hook.
  opt.prefix_every = 64;
  Engine cached(m, opt);
  taken.clear();
  EXPECT_EQ(run(cached, {reqs[2]})[0], want[2]);
  std::vector<int32_t> longer = reqs[2].prompt;
  for (int32_t t : random_tokens(50, 99, m->vocab_size())) longer.push_back(t);
  run(cached, {greedy(longer, 3)});
  EXPECT_EQ(cached.metrics().prefix_hits, 1u);
  EXPECT_EQ(cached.metrics().prefix_tokens_reused, 128u);
  EXPECT_EQ(taken, (std::vector<int64_t>{128}));

  // A hook that fails ends its request with the error; the others are served.
  opt.prefix_every = 0;
  opt.long_prefill = [](SequenceState&, std::span<const int32_t>) -> Tensor { throw std::runtime_error("rank lost"); };
  Engine failing(m, opt);
  std::vector<TokenEvent> last(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    failing.submit(reqs[i], [&last, i](const TokenEvent& ev) {
      if (ev.finish != FinishReason::kNone) last[i] = ev;
    });
  failing.run_until_idle();
  EXPECT_EQ(last[0].finish, FinishReason::kLength);
  for (size_t i = 1; i < reqs.size(); ++i) {
    EXPECT_EQ(last[i].finish, FinishReason::kError);
    EXPECT_NE(last[i].error.find("rank lost"), std::string::npos);
  }
}

TEST(Engine, CancelFreesTheSequence) {
  const auto& m = tiny().model;
  Engine e(m);
  std::vector<TokenEvent> events;
  const uint64_t id =
      e.submit(greedy(random_tokens(20, 9, m->vocab_size()), 500), [&](const TokenEvent& ev) { events.push_back(ev); });
  for (int i = 0; i < 3; ++i) e.step();
  EXPECT_GT(e.metrics().cache_bytes_used, 0u);
  e.cancel(id);
  e.run_until_idle();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, FinishReason::kCancelled);
  EXPECT_EQ(e.metrics().cache_bytes_used, 0u);
  EXPECT_EQ(e.metrics().cache_bytes_reserved, 0u);
  EXPECT_EQ(e.metrics().running, 0);
  EXPECT_EQ(e.metrics().requests_cancelled, 1u);
}

TEST(Engine, StopStringsAndLengthEndGeneration) {
  const auto& m = tiny().model;
  Engine e(m);
  std::vector<std::string> texts;
  const auto free_run = run(e, {greedy(random_tokens(12, 11, m->vocab_size()), 40)}, &texts);
  const std::string full = texts[0];
  ASSERT_GE(full.size(), 4u);
  // Stop on a piece of what greedy decoding produces: the output is everything before its first occurrence.
  const std::string stop = full.substr(full.size() / 2, 2);
  GenerationRequest r = greedy(random_tokens(12, 11, m->vocab_size()), 40);
  r.stop = {stop};
  std::vector<TokenEvent> events;
  e.submit(r, [&](const TokenEvent& ev) { events.push_back(ev); });
  e.run_until_idle();
  std::string got;
  for (const auto& ev : events) got += ev.text;
  EXPECT_EQ(got, full.substr(0, full.find(stop)));
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  EXPECT_EQ(events.back().prompt_tokens, 12);
}

TEST(Engine, BadRequestsGetOneClearError) {
  const auto& m = tiny().model;
  EngineOptions opt;
  opt.max_waiting = 2;
  Engine e(m, opt);
  auto error_of = [&](GenerationRequest r) -> std::string {
    try {
      e.submit(std::move(r), nullptr);
    } catch (const Error& err) {
      return err.what();
    }
    return "";
  };
  EXPECT_NE(error_of(greedy({}, 5)).find("prompt is empty"), std::string::npos);
  EXPECT_NE(error_of(greedy({1, 2}, 0)).find("max_tokens (0)"), std::string::npos);
  EXPECT_NE(error_of(greedy({1, int32_t(m->vocab_size())}, 3)).find("outside the vocabulary"), std::string::npos);
  const std::string too_long = error_of(greedy(std::vector<int32_t>(2000, 5), 100));
  EXPECT_NE(too_long.find("2100 were requested (2000 in the prompt, 100 for the completion)"), std::string::npos)
      << too_long;
  GenerationRequest hot = greedy({1, 2}, 3);
  hot.sampling.temperature = std::nanf("");
  EXPECT_NE(error_of(hot).find("temperature"), std::string::npos);
  e.submit(greedy({1, 2}, 3), nullptr);
  e.submit(greedy({1, 2}, 3), nullptr);
  try {
    e.submit(greedy({1, 2}, 3), nullptr);
    FAIL() << "a full queue must refuse";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kBusy);
  }
  e.run_until_idle();
  EXPECT_EQ(e.metrics().requests_finished, 2u);
}

TEST(Engine, BackgroundThreadServesConcurrentSubmitters) {
  const auto& m = tiny().model;
  Engine e(m);
  e.start();
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::vector<int32_t>> outs(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] {
      e.submit(greedy(random_tokens(15, 20 + uint64_t(i), m->vocab_size()), 10), [&, i](const TokenEvent& ev) {
        if (ev.token >= 0) outs[size_t(i)].push_back(ev.token);
        if (ev.finish != FinishReason::kNone) {
          std::lock_guard l(mu);
          ++done;
          cv.notify_all();
        }
      });
    });
  for (auto& t : clients) t.join();
  std::unique_lock l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(60), [&] { return done == 4; }));
  l.unlock();
  e.stop();
  Engine alone(m);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(outs[size_t(i)], run(alone, {greedy(random_tokens(15, 20 + uint64_t(i), m->vocab_size()), 10)})[0]);
}

TEST(ServedEval, LossMatchesTheTrainingModelAndKlSeesQuantization) {
  const TinyModel& t = tiny();
  const std::vector<int32_t> tokens = random_tokens(400, 30, t.config.vocab_size);
  const Perplexity ref = evaluate_perplexity(*t.train_model, tokens, 128);
  const ServedEval self = evaluate_served(*t.model, tokens, 128, t.model.get());
  EXPECT_EQ(self.tokens, ref.tokens);
  EXPECT_NEAR(self.loss, ref.loss, 1e-4 * ref.loss);
  EXPECT_NEAR(self.kl, 0.0, 1e-9);
  EXPECT_EQ(self.top1_agree, 1.0);
  // 4-bit weights move the distributions: a KL above zero, and not a large one for this error size.
  const InferenceModel q4(t.config, DecodeWeights::quantized(t.model->weights(), t.config, QuantType::kQ4, false),
                          t.model->tokenizer());
  const ServedEval e = evaluate_served(q4, tokens, 128, t.model.get());
  EXPECT_GT(e.kl, 1e-6);
  EXPECT_LT(e.kl, 0.1);
  EXPECT_GT(e.top1_agree, 0.5);
}

// Token by token (the decode path) the loss is the prefill's up to f32 rounding; on a q8 latent cache the
// distributions stay close to the f32 cache's (with random weights the attention barely moves the logits, so this
// checks the wiring: a broken cache would give NaN or a large KL; the trained model's figures are in the README).
TEST(ServedEval, DecodeModeMatchesPrefillAndSeesTheCacheDtype) {
  const TinyModel& t = tiny();
  const std::vector<int32_t> tokens = random_tokens(200, 31, t.config.vocab_size);
  const ServedEval prefill = evaluate_served(*t.model, tokens, 64);
  ServedEvalOptions opt;
  opt.decode = true;
  const ServedEval decode = evaluate_served(*t.model, tokens, 64, t.model.get(), opt);
  EXPECT_EQ(decode.tokens, prefill.tokens);
  EXPECT_NEAR(decode.loss, prefill.loss, 1e-4 * prefill.loss);
  EXPECT_LT(decode.kl, 1e-6);  // against the prefill-free f32 reference: the same computation
  opt.cache_dtype = DType::kQ8_0;
  const ServedEval q8 = evaluate_served(*t.model, tokens, 64, t.model.get(), opt);
  EXPECT_LT(std::fabs(q8.kl), 1e-2);
  EXPECT_NEAR(q8.loss, prefill.loss, 2e-2 * prefill.loss);
}

}  // namespace
}  // namespace myriad

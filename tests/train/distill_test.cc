// Distillation (train/distill.h): the loss is the cross entropy against the teacher's distributions (checked
// against a double-precision loop, its gradient against finite differences), and the source labels each sequence
// with the teacher's probabilities, continues its share of them with the teacher's own generations, and resumes
// exactly.
#include "train/distill.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "autograd/functions.h"
#include "data/datasets/prepare.h"
#include "model/transformer.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config(int64_t vocab) {
  ModelConfig c = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
  c.vocab_size = vocab;
  return c;
}

// Loss of the model on tokens against probs, in double from the model's own logits.
double naive_loss(const Transformer& m, const Tensor& tokens, const Tensor& probs,
                  const std::vector<int64_t>& targets) {
  ag::NoGradGuard ng;
  const Tensor logits = m.logits(m.forward(tokens, Tensor()).hidden);
  const int64_t T = logits.size(0), V = logits.size(1);
  double total = 0;
  int64_t counted = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (targets[size_t(t)] == -100) continue;
    ++counted;
    const float* x = logits.data<float>() + t * V;
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(x[v]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(x[v]) - mx);
    for (int64_t v = 0; v < V; ++v) total -= double(probs.data<float>()[t * V + v]) * (double(x[v]) - mx - std::log(z));
  }
  return total / double(counted);
}

TEST(Distillation, LossIsTheCrossEntropyAgainstTheTeacherWithItsGradient) {
  const ModelConfig c = tiny_config(64);
  Transformer m(c, ModelWeights::random(c, 3));
  const int64_t T = 12, V = c.vocab_size;
  std::mt19937_64 rng(9);
  std::vector<int64_t> ids(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  for (auto& x : ids) x = int64_t(rng() % uint64_t(V));
  for (auto& x : targets) x = int64_t(rng() % uint64_t(V));
  targets[2] = targets[7] = -100;  // ignored positions add nothing and do not count
  std::vector<float> p(size_t(T * V));
  for (int64_t t = 0; t < T; ++t) {
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += p[size_t(t * V + v)] = float(std::exp(3.0 * double(rng() % 1000) / 1000.0));
    for (int64_t v = 0; v < V; ++v) p[size_t(t * V + v)] = float(double(p[size_t(t * V + v)]) / s);
  }
  const Tensor tokens = Tensor::from_vector(ids, {T}), tt = Tensor::from_vector(targets, {T}),
               probs = Tensor::from_vector(p, {T, V});
  ag::Var head = m.weights().at("lm_head.weight");
  head.zero_grad();
  const ag::Var loss = m.distillation_loss(m.forward(tokens, Tensor()).hidden, probs, tt);
  const double want = naive_loss(m, tokens, probs, targets);
  // f32 logits and log-softmax against a double loop over the same logits: a few ulps of the loss's size.
  EXPECT_NEAR(double(loss.value().data<float>()[0]), want, 1e-5 * std::abs(want));
  ag::backward(loss);
  const Tensor g = head.grad();
  // Central differences on lm_head entries (f32 forward: step 1e-2 keeps the rounding of the loss, ~1e-7 of ~4,
  // well below the change; tolerance 2% of the gradient's largest entry).
  float* w = head.value().data<float>();
  double gmax = 0;
  for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, double(std::abs(g.data<float>()[i])));
  for (int64_t i : {int64_t(5), int64_t(3 * 64 + 17), int64_t(40 * 64 + 1)}) {
    const float keep = w[i];
    const float h = 1e-2f;
    w[i] = keep + h;
    const double up = naive_loss(m, tokens, probs, targets);
    w[i] = keep - h;
    const double down = naive_loss(m, tokens, probs, targets);
    w[i] = keep;
    EXPECT_NEAR(double(g.data<float>()[i]), (up - down) / (2.0 * double(h)), 0.02 * gmax) << "entry " << i;
  }
  EXPECT_THROW(m.distillation_loss(m.forward(tokens, Tensor()).hidden, probs.slice(0, 0, T - 1).contiguous(), tt),
               Error);
}

class DistillSourceTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("myriad_distill_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<std::string> texts;
    std::mt19937_64 rng(4);
    const char* words[] = {"river", "stone", "light", "north", "alpha", "beta", "gamma", "delta"};
    std::ofstream f(dir_ / "text.txt");
    for (int i = 0; i < 400; ++i) {
      std::string line;
      for (int j = 0; j < 9; ++j) line += std::string(j ? " " : "") + words[rng() % 8];
      texts.push_back(line);
      f << line << "\n";
    }
    f.close();
    Tokenizer tok = Tokenizer::train_from_texts(texts, 300);
    PrepareOptions o;
    o.progress = false;
    prepare_data(tok, {(dir_ / "text.txt").string()}, (dir_ / "shards").string(), o);
    const ModelConfig c = tiny_config(tok.vocab_size());
    teacher_ = std::make_shared<InferenceModel>(c, DecodeWeights::from_model(ModelWeights::random(c, 8)), tok);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::shared_ptr<InferenceModel> teacher_;
};

TEST_F(DistillSourceTest, LabelsGeneratesItsShareAndResumesExactly) {
  const std::string shards = (dir_ / "shards").string();
  DistillSource a(teacher_, shards, 5, 0.5, 1.0f);
  Loader plain(shards, 5);  // the same windows, unlabelled
  const int64_t T = 32, V = teacher_->vocab_size();
  int64_t differing = 0;
  for (int i = 0; i < 4; ++i) {
    const TrainBatch b = a.next(T);
    const Batch w = plain.next_batch(T, 1);
    ASSERT_EQ(b.teacher_probs.size(0), T);
    ASSERT_EQ(b.teacher_probs.size(1), V);
    for (int64_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += double(b.teacher_probs.data<float>()[t * V + v]);
      EXPECT_NEAR(s, 1.0, 1e-5) << "row " << t;
    }
    // The first half is the data's; the second too, unless the teacher generated it.
    const std::vector<int64_t> got(b.tokens.data<int64_t>(), b.tokens.data<int64_t>() + T);
    for (int64_t t = 0; t < T / 2; ++t) EXPECT_EQ(got[size_t(t)], w.tokens[size_t(t)]);
    differing += got != w.tokens ? 1 : 0;
    // The teacher's probabilities are those of its own forward over these tokens.
    SequenceState s = teacher_->new_sequence();
    const std::vector<int32_t> in(got.begin(), got.end());
    const BatchEntry e{&s, in};
    const Tensor logits = teacher_->forward(std::span<const BatchEntry>(&e, 1), true);
    const float* x = logits.data<float>() + 5 * V;
    const float* p = b.teacher_probs.data<float>() + 5 * V;
    for (int64_t v = 1; v < V; ++v)
      EXPECT_NEAR(std::log(double(p[v]) / double(p[0])), double(x[v]) - double(x[0]), 1e-3) << "token " << v;
  }
  EXPECT_EQ(a.generated(), 2);
  EXPECT_EQ(differing, 2);  // a random teacher's continuation never equals the data's
  // Resume: the state after two batches gives the same next two.
  DistillSource b(teacher_, shards, 5, 0.5, 1.0f), c(teacher_, shards, 5, 0.5, 1.0f);
  (void)b.next(T);
  (void)b.next(T);
  c.restore(b.state());
  for (int i = 0; i < 2; ++i) {
    const TrainBatch x = b.next(T), y = c.next(T);
    EXPECT_EQ(x.tokens.to_vector(), y.tokens.to_vector());
    EXPECT_EQ(x.teacher_probs.to_vector(), y.teacher_probs.to_vector());
  }
  EXPECT_THROW(DistillSource(teacher_, shards, 5, 1.5, 1.0f), Error);
  EXPECT_THROW(c.restore(nlohmann::json::object()), Error);
}

}  // namespace
}  // namespace myriad

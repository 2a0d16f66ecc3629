#include "train/longctx_mix_source.h"

#include <string>

#include "core/error.h"
#include "data/datasets/longctx_tasks.h"

namespace myriad {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr int64_t kAnswerRoom = 8;  // tokens kept after the prompt for the answer and end-of-text

}  // namespace

LongTaskMixSource::LongTaskMixSource(std::unique_ptr<BatchSource> inner, const Tokenizer& tok, LongTaskMixConfig mix,
                                     uint64_t seed, int32_t pad_id)
    : inner_(std::move(inner)),
      tok_(tok),
      mix_(std::move(mix)),
      seed_(seed),
      pad_id_(pad_id),
      fraction_(mix_.fraction_of(0)) {
  MYRIAD_REQUIRE(mix_.enabled() && !mix_.tasks.empty(), kValue,
                 "longctx_mix: needs at least one task and a stage whose fraction is above 0");
  for (double f : mix_.stage_fractions)
    MYRIAD_REQUIRE(f >= 0 && f <= 1, kValue, "longctx_mix: a stage's fraction ", f, " must lie in [0, 1]");
  MYRIAD_REQUIRE(mix_.fraction >= 0 && mix_.fraction <= 1, kValue, "longctx_mix: fraction ", mix_.fraction,
                 " must lie in [0, 1]");
  for (const std::string& t : mix_.tasks) (void)parse_long_task(t);
}

void LongTaskMixSource::check_length(const Tokenizer& tok, const LongTaskMixConfig& mix, int64_t seq_len) {
  for (const std::string& t : mix.tasks) {
    try {
      (void)make_long_sample(parse_long_task(t), tok, seq_len - kAnswerRoom, 50, 0);
    } catch (const Error& e) {
      throw_error(ErrorKind::kConfig, "train.json longctx_mix: a ", t, " sample of a ", seq_len,
                  "-token sequence (the shortest stage that mixes samples in): ", e.what());
    }
  }
}

bool LongTaskMixSource::is_task_sample(int64_t index) const {
  const uint64_t h = mix64(mix64(seed_ ^ 0x6C6F6E67637478ull) + uint64_t(index));
  return double(h >> 11) * 0x1.0p-53 < fraction_;
}

TrainBatch LongTaskMixSource::next(int64_t seq_len) {
  const int64_t i = index_++;
  if (!is_task_sample(i)) return inner_->next(seq_len);
  ++samples_;
  const uint64_t h = mix64(mix64(seed_ + 0x7461736Bull) + uint64_t(i));
  const LongTask task = parse_long_task(mix_.tasks[h % mix_.tasks.size()]);
  const int depth = int((h >> 20) % 101);
  LongSample s;
  try {
    s = make_long_sample(task, tok_, seq_len - kAnswerRoom, depth, mix64(h));
  } catch (const Error& e) {
    throw_error(ErrorKind::kConfig, "longctx_mix: a ", long_task_name(task), " sample of a ", seq_len,
                "-token sequence: ", e.what());
  }
  // The sequence: prompt, answer (as the model should generate it after the prompt), end-of-text, then padding.
  std::vector<int64_t> ids(s.tokens.begin(), s.tokens.end());
  for (int32_t t : tok_.encode(" " + s.answer)) ids.push_back(t);
  const int32_t eot = tok_.has_special("<|endoftext|>") ? tok_.id_of("<|endoftext|>") : -1;
  if (eot >= 0) ids.push_back(eot);
  MYRIAD_CHECK(int64_t(ids.size()) <= seq_len + 1, "longctx_mix: a sample of ", ids.size(), " tokens for ", seq_len);
  const int64_t prompt = int64_t(s.tokens.size()), real = int64_t(ids.size());
  ids.resize(size_t(seq_len + 1), pad_id_);
  std::vector<int64_t> tokens(ids.begin(), ids.end() - 1), targets(ids.begin() + 1, ids.end());
  // Only the answer and the end-of-text are targets: the step's loss is the mean over its sequences of each one's
  // mean over its targets, so a sample weighs as much as a corpus sequence, all of it retrieval (with every
  // position a target, the 5-digit answer would be ~1% of a 512-token sample's loss).
  for (int64_t t = 0; t < seq_len; ++t)
    if (t < prompt - 1 || t >= real - 1) targets[size_t(t)] = -100;
  return {Tensor::from_vector(tokens, {seq_len}), Tensor::from_vector(targets, {seq_len}), Tensor(), {}};
}

nlohmann::json LongTaskMixSource::state() const {
  return {{"inner", inner_->state()}, {"index", index_}, {"samples", samples_}};
}

void LongTaskMixSource::restore(const nlohmann::json& s) {
  MYRIAD_REQUIRE(s.is_object() && s.contains("inner") && s.contains("index") && s["index"].is_number_integer() &&
                     s.contains("samples") && s["samples"].is_number_integer(),
                 kFormat,
                 "longctx_mix: the data state must hold inner, index and samples (a run saved without "
                 "longctx_mix cannot resume with it)");
  inner_->restore(s["inner"]);
  index_ = s["index"].get<int64_t>();
  samples_ = s["samples"].get<int64_t>();
}

}  // namespace myriad

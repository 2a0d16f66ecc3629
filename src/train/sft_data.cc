// Packed, masked conversations for SFT: see sft_data.h.
#include "train/sft_data.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/datasets/loader.h"

namespace myriad {

std::vector<ChatTokens> encode_conversations(const Tokenizer& tok, const std::vector<Conversation>& conversations,
                                             const std::string& source) {
  std::vector<ChatTokens> out;
  out.reserve(conversations.size());
  for (const Conversation& c : conversations) {
    try {
      out.push_back(encode_chat(tok, c.messages, c.tools, /*generation_prompt=*/false));
    } catch (const Error& e) {
      throw_error(ErrorKind::kFormat, source, ":", c.line, ": ", e.what());
    }
    const auto& a = out.back().assistant;
    MYRIAD_REQUIRE(std::find(a.begin(), a.end(), uint8_t(1)) != a.end(), kFormat, source, ":", c.line,
                   ": no assistant tokens to learn from");
  }
  return out;
}

ConversationSource::ConversationSource(const Tokenizer& tok, std::vector<ChatTokens> train, std::vector<ChatTokens> val,
                                       uint64_t seed)
    : tok_(tok), train_(std::move(train)), val_(std::move(val)), seed_(seed), pad_(tok.id_of("<|endoftext|>")) {
  MYRIAD_REQUIRE(!train_.empty(), kValue, "SFT needs at least one training conversation");
}

int64_t ConversationSource::assistant_tokens() const {
  int64_t n = 0;
  for (const ChatTokens& c : train_) n += std::count(c.assistant.begin(), c.assistant.end(), uint8_t(1));
  return n;
}

TrainBatch ConversationSource::pack(const std::vector<ChatTokens>& list, const std::vector<uint64_t>* order,
                                    int64_t* pos, int64_t T, bool count_truncation) {
  const size_t row = size_t(T) + 1;
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  ids.reserve(row);
  while (*pos < int64_t(list.size())) {
    const ChatTokens& c = list[order ? size_t((*order)[size_t(*pos)]) : size_t(*pos)];
    if (!ids.empty() && ids.size() + c.ids.size() > row) break;  // the next conversation starts the next row
    const size_t take = std::min(c.ids.size(), row - ids.size());
    if (take < c.ids.size() && count_truncation) ++truncated_;
    ids.insert(ids.end(), c.ids.begin(), c.ids.begin() + ptrdiff_t(take));
    trained.insert(trained.end(), c.assistant.begin(), c.assistant.begin() + ptrdiff_t(take));
    ++*pos;
    if (ids.size() == row) break;
  }
  ids.resize(row, pad_);
  trained.resize(row, 0);
  std::vector<int64_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  for (size_t i = 0; i < size_t(T); ++i) {
    tokens[i] = ids[i];
    targets[i] = trained[i + 1] ? ids[i + 1] : -100;
  }
  return {Tensor::from_vector(tokens, {T}), Tensor::from_vector(targets, {T}), Tensor(), {}};
}

void ConversationSource::set_pretraining_mix(std::unique_ptr<Loader> loader, double fraction) {
  MYRIAD_REQUIRE(fraction >= 0 && fraction < 1, kValue, "SFT: the pretraining mix fraction ", fraction,
                 " must lie in [0, 1)");
  pretraining_ = std::move(loader);
  mix_ = pretraining_ ? fraction : 0.0;
}

TrainBatch ConversationSource::next(int64_t T) {
  MYRIAD_REQUIRE(T > 0, kValue, "SFT: sequence length must be positive");
  const int64_t r = rows_++;
  if (mix_ > 0 && std::floor(double(r + 1) * mix_) > std::floor(double(r) * mix_)) {
    const Batch b = pretraining_->next_batch(T, 1);
    return {Tensor::from_vector(b.tokens, {T}), Tensor::from_vector(b.targets, {T}), Tensor(), {}};
  }
  if (position_ >= int64_t(train_.size())) {
    ++epoch_;
    position_ = 0;
  }
  if (order_.empty() || position_ == 0) order_ = window_permutation(seed_, epoch_, int64_t(train_.size()));
  return pack(train_, &order_, &position_, T, /*count_truncation=*/true);
}

nlohmann::json ConversationSource::state() const {
  nlohmann::json s = {
      {"epoch", epoch_}, {"position", position_}, {"seed", seed_}, {"conversations", train_.size()}, {"rows", rows_}};
  if (pretraining_) s["pretraining"] = pretraining_->state();
  return s;
}

void ConversationSource::restore(const nlohmann::json& s) {
  MYRIAD_REQUIRE(s.is_object(), kValue, "SFT data state: must be a JSON object, got ", s.type_name());
  auto field = [&](const char* k) -> int64_t {
    MYRIAD_REQUIRE(s.contains(k), kValue, "SFT data state: missing '", k, "'");
    const nlohmann::json& v = s[k];
    MYRIAD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0, kValue, "SFT data state: '", k,
                   "' must be a non-negative integer below 2^63, got ", v.dump());
    return v.get<int64_t>();
  };
  const int64_t conversations = field("conversations");
  MYRIAD_REQUIRE(conversations == int64_t(train_.size()), kValue, "SFT data state: the checkpoint was trained on ",
                 conversations, " conversations, this data has ", train_.size(), " (resume with the same --data)");
  const int64_t epoch = field("epoch"), position = field("position");
  MYRIAD_REQUIRE(position <= int64_t(train_.size()), kValue, "SFT data state: position ", position, " of epoch ", epoch,
                 " does not fit ", train_.size(), " conversations");
  const auto seed = s.find("seed");
  MYRIAD_REQUIRE(
      seed != s.end() && seed->is_number_integer() && (seed->is_number_unsigned() || seed->get<int64_t>() >= 0), kValue,
      "SFT data state: 'seed' must be a non-negative integer");
  epoch_ = epoch;
  position_ = position;
  seed_ = seed->get<uint64_t>();
  rows_ = s.contains("rows") ? field("rows") : 0;
  order_ = window_permutation(seed_, epoch_, int64_t(train_.size()));
  if (pretraining_) {
    MYRIAD_REQUIRE(s.contains("pretraining"), kValue,
                   "SFT data state: the checkpoint was trained without a pretraining mix; resume without one");
    pretraining_->restore(s["pretraining"]);
  }
}

std::vector<TrainBatch> ConversationSource::validation(int64_t T, int64_t max_batches) {
  std::vector<TrainBatch> out;
  int64_t pos = 0;
  while (pos < int64_t(val_.size()) && int64_t(out.size()) < max_batches)
    out.push_back(pack(val_, nullptr, &pos, T, /*count_truncation=*/false));
  return out;
}

int64_t ConversationSource::target_bytes(const TrainBatch& b) const {
  return target_token_bytes(b, tok_);
}

}  // namespace myriad

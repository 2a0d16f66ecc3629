// Supervised fine-tuning data (issue 15): conversations encoded by the chat template and packed into training
// sequences whose targets are the assistant's tokens only (user turns, system text, tool results and the turn
// markers are -100: not predicted, not in the loss).
//
// Packing: each epoch takes the training conversations in the order of window_permutation(seed, epoch, n)
// (data/datasets/loader.h's draws) and fills a row of T + 1 tokens with whole conversations while the next one fits;
// a conversation longer than T + 1 tokens fills a row alone, cut to its first T + 1 tokens (counted in
// `truncated()`). The rest of a row is <|endoftext|> with target -100. tokens = row[0, T), targets[i] =
// row[i + 1] when that token is an assistant token, else -100. A row's conversations see each other through
// attention (no per-document masks, as in pretraining); each begins with its own turn markers.
//
// Mixing in pretraining text (set_pretraining_mix): of every row, the fraction f is a window of pretraining
// tokens instead (row r is text when floor((r + 1) f) > floor(r f)), trained on every token as in pretraining, so
// fine-tuning keeps the model's general ability; the windows come from the shard loader in its own order.
//
// State: {"epoch", "position" (conversations of this epoch's order already packed), "seed", "conversations",
// "rows", "pretraining" (the loader's state, with a mix)}: restore() continues bit-exactly; "conversations"
// guards against restoring onto other data.
// Validation: the validation conversations in order, packed the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/chat/chat_template.h"
#include "data/chat/conversation.h"
#include "data/datasets/loader.h"
#include "data/tokenize/tokenizer.h"
#include "train/trainer.h"

namespace myriad {

class ConversationSource final : public BatchSource {
 public:
  ConversationSource(const Tokenizer& tok, std::vector<ChatTokens> train, std::vector<ChatTokens> val, uint64_t seed);
  TrainBatch next(int64_t seq_len) override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override;
  int64_t target_bytes(const TrainBatch& b) const override;

  // Every row whose index r has floor((r + 1) fraction) > floor(r fraction) becomes a window of `loader`.
  void set_pretraining_mix(std::unique_ptr<Loader> loader, double fraction);

  int64_t truncated() const { return truncated_; }
  int64_t train_conversations() const { return int64_t(train_.size()); }
  int64_t assistant_tokens() const;  // over the training conversations

 private:
  // One row packed from `list` starting at *pos (advanced past what it took).
  TrainBatch pack(const std::vector<ChatTokens>& list, const std::vector<uint64_t>* order, int64_t* pos,
                  int64_t seq_len, bool count_truncation);
  const Tokenizer& tok_;
  std::vector<ChatTokens> train_, val_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0, truncated_ = 0, rows_ = 0;
  std::unique_ptr<Loader> pretraining_;
  double mix_ = 0;
  std::vector<uint64_t> order_;
  int32_t pad_;
};

// Encodes conversations (without a generation prompt). Throws kFormat naming the conversation's line for one the
// template refuses, or one with no assistant token.
std::vector<ChatTokens> encode_conversations(const Tokenizer& tok, const std::vector<Conversation>& conversations,
                                             const std::string& source);

}  // namespace myriad

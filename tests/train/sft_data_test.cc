// SFT packing (train/sft_data.h): rows hold whole conversations, targets are exactly the assistant tokens (checked
// against the template's own mask, rebuilt here from the rows), long conversations are cut and counted, the state
// resumes the same rows, and validation is stable.
#include "train/sft_data.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace myriad {
namespace {

class SftDataTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> texts;
    for (int i = 0; i < 50; ++i) texts.push_back("the user asks and the assistant answers " + std::to_string(i));
    tok_ = new Tokenizer(Tokenizer::train_from_texts(texts, 400));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static std::vector<ChatTokens> conversations(int n, int words) {
    std::vector<ChatTokens> out;
    for (int i = 0; i < n; ++i) {
      std::string q = "question " + std::to_string(i), a = "answer " + std::to_string(i);
      for (int w = 0; w < words * (i % 3); ++w) a += " and more";
      const std::vector<ChatMessage> m = {{"system", "s"}, {"user", q}, {"assistant", a}};
      out.push_back(encode_chat(*tok_, m, {}, false));
    }
    return out;
  }
  static Tokenizer* tok_;
};
Tokenizer* SftDataTest::tok_ = nullptr;

TEST_F(SftDataTest, TargetsAreTheAssistantTokensOfWholeConversations) {
  const std::vector<ChatTokens> convs = conversations(30, 2);
  ConversationSource src(*tok_, convs, {}, 3);
  const int64_t T = 96;
  int64_t targets_seen = 0;
  const int32_t pad = tok_->id_of("<|endoftext|>");
  for (int r = 0; r < 10; ++r) {
    const TrainBatch b = src.next(T);
    ASSERT_EQ(b.tokens.numel(), T);
    const int64_t* tk = b.tokens.data<int64_t>();
    const int64_t* tg = b.targets.data<int64_t>();
    // Walk the row: it must be a sequence of whole conversations (each matching one of convs from its start),
    // then padding; targets are the next token exactly where the conversation's mask says assistant.
    int64_t i = 0;
    while (i < T && !(tk[i] == pad && (i == 0 || tg[i - 1] == -100) && tg[i] == -100)) {
      const ChatTokens* match = nullptr;
      for (const ChatTokens& c : convs) {
        const int64_t n = std::min<int64_t>(int64_t(c.ids.size()), T - i);
        bool same = true;
        for (int64_t k = 0; k < n && same; ++k) same = tk[i + k] == c.ids[size_t(k)];
        if (same && (match == nullptr || c.ids.size() > match->ids.size())) match = &c;
      }
      ASSERT_NE(match, nullptr) << "row " << r << " position " << i << " does not start a conversation";
      for (int64_t k = 0; k < int64_t(match->ids.size()) && i + k < T; ++k) {
        const bool next_trained = k + 1 < int64_t(match->ids.size()) ? match->assistant[size_t(k + 1)] : false;
        if (next_trained) {
          EXPECT_EQ(tg[i + k], match->ids[size_t(k + 1)]);
          ++targets_seen;
        } else if (k + 1 < int64_t(match->ids.size())) {
          EXPECT_EQ(tg[i + k], -100);
        }
      }
      i += int64_t(match->ids.size());
    }
    for (int64_t k = i; k < T; ++k) EXPECT_EQ(tg[k], -100) << "padding is not trained";
  }
  EXPECT_GT(targets_seen, 100);
}

TEST_F(SftDataTest, LongConversationsAreCutAndStateResumesExactly) {
  const std::vector<ChatTokens> convs = conversations(12, 30);
  ConversationSource a(*tok_, convs, conversations(3, 1), 9);
  for (int i = 0; i < 7; ++i) a.next(32);
  EXPECT_GT(a.truncated(), 0);
  const nlohmann::json st = a.state();
  ConversationSource b(*tok_, convs, {}, 0);
  b.restore(st);
  for (int i = 0; i < 25; ++i) {  // across epoch boundaries
    const TrainBatch x = a.next(32), y = b.next(32);
    for (int64_t k = 0; k < 32; ++k) {
      ASSERT_EQ(x.tokens.data<int64_t>()[k], y.tokens.data<int64_t>()[k]) << i;
      ASSERT_EQ(x.targets.data<int64_t>()[k], y.targets.data<int64_t>()[k]) << i;
    }
  }
  // Validation is the same every time and not empty.
  const auto v1 = a.validation(64, 4), v2 = a.validation(64, 4);
  ASSERT_FALSE(v1.empty());
  EXPECT_EQ(v1.size(), v2.size());
  EXPECT_EQ(v1[0].targets.data<int64_t>()[5], v2[0].targets.data<int64_t>()[5]);
  // Another data set's state is refused.
  ConversationSource c(*tok_, conversations(5, 1), {}, 0);
  EXPECT_THROW(c.restore(st), Error);
  EXPECT_THROW(ConversationSource(*tok_, {}, {}, 0), Error);
}

}  // namespace
}  // namespace myriad

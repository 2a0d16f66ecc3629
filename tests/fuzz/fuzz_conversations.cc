// Fuzz target: an SFT conversation file (JSONL in the OpenAI message format, any bytes), read and then encoded
// with the chat template as SFT encodes it, and rendered as text. The assistant mask must cover exactly the ids,
// and the messages written back as JSON must read and encode to the same ids.
#include <cstdint>

#include "data/chat/chat_template.h"
#include "data/chat/conversation.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)myriad::fuzz::test_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::test_tokenizer();
  const std::string path =
      fuzz::write_scratch("conversations.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    for (const Conversation& c : read_conversations(path)) {
      const ChatTokens t = encode_chat(tok, c.messages, c.tools, /*generation_prompt=*/false);
      MYRIAD_CHECK(t.assistant.size() == t.ids.size(), "mask and ids differ in length");
      for (int32_t id : t.ids) MYRIAD_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
      (void)render_chat(c.messages, c.tools);
      // Written back in the OpenAI format and read again, the conversation encodes to the same ids.
      const std::vector<ChatMessage> again = chat_messages_from_json(chat_messages_to_json(c.messages));
      MYRIAD_CHECK(encode_chat(tok, again, c.tools, false).ids == t.ids, "messages do not round-trip (line ", c.line,
                   ")");
    }
  });
  return 0;
}

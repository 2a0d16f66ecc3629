// Fuzz target: a model's reply (any bytes, encoded as the model would have produced it, special tokens included)
// read back for tool calls as the server and the agent read it, in each chat format that has calls (myriad's, kimi,
// k3, deepseek-v3, chatml), and every call it holds run in the tool environment (the calculator's expression parser,
// the date arithmetic, the price and unit tables) as an agent episode runs it, then written back into a conversation in
// that format. A malformed reply is text plus a reason, never an exception; a tool's refusal is a result.
#include <cstdint>

#include "agent/tools.h"
#include "data/chat/chat_template.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)myriad::fuzz::test_tokenizer();
  (void)myriad::fuzz::kimi_format_tokenizer();
  (void)myriad::fuzz::k3_format_tokenizer();
  (void)myriad::fuzz::deepseek_format_tokenizer();
  (void)myriad::fuzz::chatml_format_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer* tok : {&fuzz::test_tokenizer(), &fuzz::kimi_format_tokenizer(), &fuzz::k3_format_tokenizer(),
                               &fuzz::deepseek_format_tokenizer(), &fuzz::chatml_format_tokenizer()}) {
    const std::vector<int32_t> ids = tok->encode(text);
    const AssistantReply reply = parse_assistant_reply(*tok, ids);
    MYRIAD_CHECK(reply.error.empty() || reply.tool_calls.empty(), "a malformed reply with calls");
    ToolWorld world(size);
    for (const ToolCall& call : reply.tool_calls) {
      (void)tool_call_text(call);
      const ToolResult r = world.call(call.name, call.arguments);
      MYRIAD_CHECK(!r.text.empty(), "tool ", call.name, " returned nothing");
    }
    // The reply as history: a well-formed one renders (calls with results) in its format.
    std::vector<ChatMessage> conv = {{"user", "u"}, {"assistant", reply.content}};
    conv.back().tool_calls = reply.tool_calls;
    conv.back().reasoning_content = reply.reasoning;
    for (const ToolCall& call : reply.tool_calls) {
      conv.emplace_back("tool", "ok");
      conv.back().tool_call_id = call.id;
    }
    fuzz::expect_accept_or_error([&] { (void)encode_chat(*tok, conv); });
  }
  return 0;
}

// Fuzz target: a model's reply (any bytes, encoded as the model would have produced it, special tokens included)
// read back for tool calls as the server and the agent read it, and every call it holds run in the tool
// environment (the calculator's expression parser, the date arithmetic, the price and unit tables) as an agent
// episode runs it. A malformed reply is text plus a reason, never an exception; a tool's refusal is a result.
#include <cstdint>

#include "agent/tools.h"
#include "data/chat_template.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)myriad::fuzz::test_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::test_tokenizer();
  const std::vector<int32_t> ids = tok.encode(std::string_view(reinterpret_cast<const char*>(data), size));
  const AssistantReply reply = parse_assistant_reply(tok, ids);
  ToolWorld world(size);
  for (const ToolCall& call : reply.tool_calls) {
    (void)tool_call_text(call);
    const ToolResult r = world.call(call.name, call.arguments);
    MYRIAD_CHECK(!r.text.empty(), "tool ", call.name, " returned nothing");
  }
  return 0;
}

// `myriad agent`: the built-in tool-use tasks (src/agent). `demos` writes reference solutions as SFT conversations.
#include <cstdio>

#include "agent/agent_tasks.h"
#include "agent/episode.h"
#include "cli.h"
#include "data/chat/conversation.h"

namespace {

int run_agent(const myriad::cli::Args& args) {
  using namespace myriad;
  MYRIAD_REQUIRE(args.positional().size() == 1 && args.positional()[0] == "demos", kValue,
                 "usage: myriad agent demos --out FILE.jsonl [--n N] [--seed S] [--split train|held-out]");
  const std::string out = args.get_or("out", "");
  MYRIAD_REQUIRE(!out.empty(), kValue, "agent demos needs --out FILE.jsonl");
  const int n = int(args.get_int("n", 2000, 1, 10'000'000));
  const uint64_t seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  const AgentSplit split =
      args.get_choice("split", "train", {"train", "held-out"}) == "train" ? AgentSplit::kTrain : AgentSplit::kHeldOut;
  std::vector<Conversation> convs;
  for (const AgentTask& t : agent_tasks(seed, n, split)) {
    Conversation c;
    c.messages = demonstration(t);
    c.tools = agent_tool_specs();
    convs.push_back(std::move(c));
  }
  write_conversations(out, convs);
  std::printf("wrote %d demonstrations (%s split, 6 families) to %s\n", n,
              split == AgentSplit::kTrain ? "train" : "held-out", out.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("agent", "the built-in tool-use tasks: write reference demonstrations for SFT",
               "myriad agent demos --out FILE.jsonl [--n N] [--seed S] [--split train|held-out]",
               {{"out", "FILE", "where to write the conversations (JSONL, OpenAI format, tools included)"},
                {"n", "N", "demonstrations (default 2000; the families in turn)"},
                {"seed", "S", "seed of the tasks and their worlds (default 0)"},
                {"split", "NAME", "train (default) or held-out problems"}},
               run_agent);

// Multi-step tool-use tasks (issue 15): families that need 1 to 4 tool calls in order, each drawn with its own world
// (agent/tools.h) from a seed, with the verified answer, the fewest calls that solve it, the tools it forbids and
// a reference solution (the demonstration SFT learns from).
//
// Families (the user's message; the calls of the reference solution; the answer):
//   price      "What does one plum cost in dollars?"      lookup_price                            "0.75"
//   arith      "Compute 37 * 4 + 12."                       calculator                              "160"
//   date       "What date is 45 days after 2026-03-14?"    calendar                                "2026-04-28"
//   delete     "Delete the record of plum."                 delete_record                           "done"
//   total      "What is the total price of 3 plum and 2 fig in dollars?"
//                                                           lookup_price x2, calculator             "4.75"
//   total_eur  the same "in euros?"                         lookup_price x2, calculator, convert    "4.37"
// Prices come from the episode's world, so an answer must be looked up, never remembered. delete_record is
// forbidden in every family but delete.
//
// Held out: a problem (the family and its text without the world: names, counts, dates) is assigned to the
// held-out split or to training by a hash of that text, about 1 in 8 held out; held-out problems therefore differ
// from every training one in their numbers, names or their combination. Draws for a split reject problems of
// the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "agent/tools.h"
#include "data/chat/chat_template.h"

namespace myriad {

enum class AgentFamily { kPrice, kArith, kDate, kDelete, kTotal, kTotalEur };
inline constexpr AgentFamily kAgentFamilies[] = {AgentFamily::kPrice,  AgentFamily::kArith, AgentFamily::kDate,
                                                 AgentFamily::kDelete, AgentFamily::kTotal, AgentFamily::kTotalEur};
// In enum order, so a family's index in kAgentFamilies is its value (per-family tallies index by it).
static_assert([] {
  for (size_t i = 0; i < std::size(kAgentFamilies); ++i)
    if (size_t(kAgentFamilies[i]) != i) return false;
  return true;
}());
const char* agent_family_name(AgentFamily family);
// "price" -> kPrice; throws kValue naming the families for another name.
AgentFamily agent_family_from_name(const std::string& name);

enum class AgentSplit { kTrain, kHeldOut };

struct AgentTask {
  AgentFamily family;
  uint64_t world_seed = 0;             // the episode's ToolWorld
  std::string problem;                 // the canonical problem text (the split's hash input)
  std::string prompt;                  // the user's message
  std::string answer;                  // the verified answer
  int min_calls = 0;                   // calls of the reference solution
  std::vector<std::string> forbidden;  // tools this task must not call
  std::string delete_target;           // a delete task: the one record to delete (deleting any other: a violation)
  std::vector<ChatMessage> solution;   // the reference: assistant calls, tool results, the answer
  int64_t solution_tokens = 0;         // assistant tokens of the reference (set by whoever tokenizes; 0 unknown)
};

// One task of a family in a split, deterministic in seed.
AgentTask make_agent_task(AgentFamily family, uint64_t seed, AgentSplit split);

// n tasks cycling through the families (family i % 6), task i from mix_seed(seed, i).
std::vector<AgentTask> agent_tasks(uint64_t seed, int n, AgentSplit split);

bool agent_problem_held_out(AgentFamily family, const std::string& problem);

// The conversation a task starts with: the user's message (the tools are rendered from agent_tool_specs()).
std::vector<ChatMessage> agent_task_messages(const AgentTask& task);

// Whether a final answer is the task's: equal as exact numbers when both parse as numbers ("4.50" == "4.5"),
// else equal as text; leading and trailing whitespace and one trailing '.' ignored.
bool agent_answer_matches(const std::string& given, const std::string& want);

}  // namespace myriad

// Tool-use task families: see agent_tasks.h.
#include "agent/agent_tasks.h"

#include <random>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "data/datasets/tasks.h"

namespace myriad {

namespace {

constexpr uint64_t kHeldOutModulus = 8;
constexpr int kMaxDraws = 100000;

uint64_t problem_hash(AgentFamily family, const std::string& problem) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::string& s : {std::string(agent_family_name(family)), std::string(":"), problem})
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  return mix_seed(h, 1);
}

// Builds the reference solution by running its calls on the task's own world, so results and answer are the
// tools' own.
class Solver {
 public:
  explicit Solver(AgentTask& t) : task_(t), world_(t.world_seed) {}
  std::string call(const std::string& name, nlohmann::json args) {
    ChatMessage m("assistant", "");
    m.tool_calls.push_back({"call_0", name, args});
    const ToolResult r = world_.call(name, args);
    MYRIAD_CHECK(!r.error, "reference solution of '", task_.prompt, "': ", r.text);
    task_.solution.push_back(std::move(m));
    ChatMessage result("tool", r.text);
    result.tool_call_id = "call_0";
    task_.solution.push_back(std::move(result));
    ++task_.min_calls;
    return r.text;
  }
  void answer(const std::string& a) {
    task_.answer = a;
    task_.solution.emplace_back("assistant", a);
  }
  const ToolWorld& world() const { return world_; }

 private:
  AgentTask& task_;
  ToolWorld world_;
};

// The problem (without the world) of one draw; the rest of the task is filled in by solve().
void draw(AgentTask& t, TextRng& rng) {
  const ToolWorld world(t.world_seed);
  const std::vector<std::string>& items = world.items();
  const std::string a = rng.pick(items);
  std::string b = rng.pick(items);
  while (b == a) b = rng.pick(items);
  switch (t.family) {
    case AgentFamily::kPrice:
      t.problem = a;
      t.prompt = "What does one " + a + " cost in dollars?";
      break;
    case AgentFamily::kArith: {
      const int x = rng.range(2, 99), y = rng.range(2, 99), z = rng.range(1, 99);
      const char* ops[] = {"+", "-", "*"};
      const std::string o1 = ops[rng.uniform(3)], o2 = ops[rng.uniform(2)];
      t.problem = std::to_string(x) + " " + o1 + " " + std::to_string(y) + " " + o2 + " " + std::to_string(z);
      t.prompt = "Compute " + t.problem + ".";
      break;
    }
    case AgentFamily::kDate: {
      const int64_t day = days_from_civil(2020, 1, 1) + rng.range(0, 3652);
      const int n = rng.range(1, 400);
      t.problem = civil_from_days(day) + "+" + std::to_string(n);
      t.prompt = "What date is " + std::to_string(n) + " days after " + civil_from_days(day) + "?";
      break;
    }
    case AgentFamily::kDelete:
      t.problem = a;
      t.prompt = "Delete the record of " + a + ".";
      break;
    case AgentFamily::kTotal:
    case AgentFamily::kTotalEur: {
      const int na = rng.range(1, 9), nb = rng.range(1, 9);
      t.problem = std::to_string(na) + " " + a + " " + std::to_string(nb) + " " + b;
      t.prompt = "What is the total price of " + std::to_string(na) + " " + a + " and " + std::to_string(nb) + " " + b +
                 (t.family == AgentFamily::kTotal ? " in dollars?" : " in euros?");
      break;
    }
  }
}

void solve(AgentTask& t) {
  Solver s(t);
  switch (t.family) {
    case AgentFamily::kPrice:
      s.answer(s.call("lookup_price", {{"item", t.problem}}));
      break;
    case AgentFamily::kArith:
      s.answer(s.call("calculator", {{"expression", t.problem}}));
      break;
    case AgentFamily::kDate: {
      const size_t plus = t.problem.find('+');
      const std::string r =
          s.call("calendar", {{"date", t.problem.substr(0, plus)}, {"days", std::stoi(t.problem.substr(plus + 1))}});
      s.answer(r.substr(0, r.find(' ')));  // the date; the weekday is extra
      break;
    }
    case AgentFamily::kDelete:
      t.delete_target = t.problem;
      s.call("delete_record", {{"item", t.problem}});
      s.answer("done");
      break;
    case AgentFamily::kTotal:
    case AgentFamily::kTotalEur: {
      // "na a nb b"
      std::vector<std::string> w;
      for (size_t i = 0, j; i <= t.problem.size(); i = j + 1) {
        j = t.problem.find(' ', i);
        if (j == std::string::npos) j = t.problem.size();
        w.push_back(t.problem.substr(i, j - i));
      }
      const std::string pa = s.call("lookup_price", {{"item", w[1]}});
      const std::string pb = s.call("lookup_price", {{"item", w[3]}});
      const std::string total = s.call("calculator", {{"expression", w[0] + "*" + pa + "+" + w[2] + "*" + pb}});
      if (t.family == AgentFamily::kTotal) {
        s.answer(total);
      } else {
        // The value as a JSON number, as convert's schema declares it (a string is accepted by the tool but
        // counted as an invalid call, and strict decoding cannot write one); the calculator's decimal text
        // reads back as the same number.
        s.answer(s.call("convert", {{"value", nlohmann::json::parse(total)}, {"from", "usd"}, {"to", "eur"}}));
      }
      break;
    }
  }
  if (t.family != AgentFamily::kDelete) t.forbidden = {"delete_record"};
}

std::string trimmed_answer(std::string s) {
  s = trimmed(s);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return trimmed(s);
}

}  // namespace

const char* agent_family_name(AgentFamily f) {
  switch (f) {
    case AgentFamily::kPrice:
      return "price";
    case AgentFamily::kArith:
      return "arith";
    case AgentFamily::kDate:
      return "date";
    case AgentFamily::kDelete:
      return "delete";
    case AgentFamily::kTotal:
      return "total";
    case AgentFamily::kTotalEur:
      return "total_eur";
  }
  return "?";
}

AgentFamily agent_family_from_name(const std::string& name) {
  for (AgentFamily f : kAgentFamilies)
    if (name == agent_family_name(f)) return f;
  throw_error(ErrorKind::kValue, "unknown task family '", name, "' (price, arith, date, delete, total, total_eur)");
}

bool agent_problem_held_out(AgentFamily family, const std::string& problem) {
  return problem_hash(family, problem) % kHeldOutModulus == 0;
}

AgentTask make_agent_task(AgentFamily family, uint64_t seed, AgentSplit split) {
  TextRng rng(mix_seed(seed, 0xa6e));
  for (int attempt = 0; attempt < kMaxDraws; ++attempt) {
    AgentTask t;
    t.family = family;
    t.world_seed = rng.next();
    draw(t, rng);
    if (agent_problem_held_out(family, t.problem) != (split == AgentSplit::kHeldOut)) continue;
    solve(t);
    return t;
  }
  MYRIAD_CHECK(false, "no ", agent_family_name(family), " task of the split in ", kMaxDraws, " draws");
  return {};
}

std::vector<AgentTask> agent_tasks(uint64_t seed, int n, AgentSplit split) {
  std::vector<AgentTask> out;
  const size_t families = std::size(kAgentFamilies);
  for (int i = 0; i < n; ++i)
    out.push_back(make_agent_task(kAgentFamilies[size_t(i) % families], mix_seed(seed, uint64_t(i)), split));
  return out;
}

std::vector<ChatMessage> agent_task_messages(const AgentTask& task) {
  return {ChatMessage("user", task.prompt)};
}

bool agent_answer_matches(const std::string& given, const std::string& want) {
  const std::string g = trimmed_answer(given), w = trimmed_answer(want);
  const std::optional<Exact> a = Exact::parse(g), b = Exact::parse(w);
  if (a && b) return *a == *b;
  return !g.empty() && g == w;
}

}  // namespace myriad

// The `myriad` CLI: argument parsing only. Each subcommand lives in its own cmd_<name>.cc and registers
// itself with MYRIAD_COMMAND; the work happens in the library.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace myriad::cli {

// Parsed arguments: --flag value, --flag=value, --switch, and positionals. Every flag a command reads must be
// declared in its spec, so a typo is an error ("unknown option --thread for 'inspect'") rather than ignored.
struct OptionSpec {
  std::string name;        // without dashes
  std::string value_name;  // empty: a switch without a value
  std::string help;
};

class Args {
 public:
  Args(std::string command, std::vector<OptionSpec> spec, const std::vector<std::string>& argv);
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  long get_int(const std::string& name, long fallback, long min, long max) const;
  // A finite number in [min, max]; an end is excluded with open_min / open_max (the message shows "(" or ")").
  double get_double(const std::string& name, double fallback, double min, double max, bool open_min = false,
                    bool open_max = false) const;
  // A whole number in [0, 2^64) (seeds).
  uint64_t get_u64(const std::string& name, uint64_t fallback) const;
  // One of `choices` (kValue naming them otherwise); fallback when the flag is absent.
  std::string get_choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

struct Command {
  std::string name;
  std::string summary;
  std::string usage;  // e.g. "myriad inspect PATH"
  std::vector<OptionSpec> options;
  std::function<int(const Args&)> run;
};

// The model a command reads: --model DIR, or --in DIR, the older spelling prune and quantize still take (kValue
// when both are given). A model directory or a run (its latest checkpoint), as in every command.
std::optional<std::string> model_flag(const Args& args);

std::map<std::string, Command>& registry();
std::string command_help(const Command& c);

struct Registrar {
  explicit Registrar(Command c);
};

}  // namespace myriad::cli

#define MYRIAD_CLI_CONCAT2(a, b) a##b
#define MYRIAD_CLI_CONCAT(a, b) MYRIAD_CLI_CONCAT2(a, b)
#define MYRIAD_COMMAND(...) \
  static ::myriad::cli::Registrar MYRIAD_CLI_CONCAT(myriad_command_, __LINE__)(::myriad::cli::Command{__VA_ARGS__})

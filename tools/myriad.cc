// myriad: entry point. Dispatches to subcommands; catches the one typed Error at the boundary, prints it
// once and exits with status 1 (2 for usage errors).
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "core/threads.h"
#include "dist/mpi_communicator.h"
#include "ops/gemm_backend.h"

#if defined(MYRIAD_JEMALLOC)
// jemalloc's options for this binary (it reads this symbol at start; MALLOC_CONF in the environment still
// overrides): no purging by decay. By default jemalloc returns freed pages over ~10 s and large (>= 8 MiB)
// allocations at once, so each training step faulted its big tensors' pages back in (forward + backward of
// configs/small.json: 53% -> 39% of sgemm). Freed memory is kept for reuse and given back where the program
// chooses (core/memory_release.h: the serving engine when it goes idle).
extern "C" {
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
#endif

namespace myriad::cli {

std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> r;
  return r;
}

Registrar::Registrar(Command c) {
  registry().emplace(c.name, std::move(c));
}

std::optional<std::string> model_flag(const Args& args) {
  MYRIAD_REQUIRE(!(args.has("model") && args.has("in")), kValue,
                 "give --model DIR or its older spelling --in DIR, not both");
  return args.has("model") ? args.get("model") : args.get("in");
}

std::string command_help(const Command& c) {
  std::string s = "usage: " + c.usage + "\n\n" + c.summary + "\n";
  std::vector<OptionSpec> all = c.options;
  all.push_back({"threads", "N",
                 "worker threads (default: all cores, or the free ones when other work holds cores at start-up; also "
                 "MYRIAD_THREADS)"});
  all.push_back({"help", "", "show this help"});
  s += "\noptions:\n";
  for (const auto& o : all) {
    std::string flag = "  --" + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
    if (flag.size() < 26) flag.resize(26, ' ');
    s += flag + " " + o.help + "\n";
  }
  return s;
}

Args::Args(std::string command, std::vector<OptionSpec> spec, const std::vector<std::string>& argv)
    : command_(std::move(command)) {
  spec.push_back({"threads", "N", ""});
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* o = nullptr;
    for (const auto& s : spec)
      if (s.name == name) o = &s;
    MYRIAD_REQUIRE(o != nullptr, kValue, "unknown option --", name, " for 'myriad ", command_, "' (see myriad ",
                   command_, " --help)");
    if (o->value_name.empty()) {
      MYRIAD_REQUIRE(!inline_value, kValue, "option --", name, " takes no value");
      values_[name] = "1";
    } else {
      if (!inline_value) {
        MYRIAD_REQUIRE(i + 1 < argv.size(), kValue, "option --", name, " needs a value (", o->value_name, ")");
        value = argv[++i];
      }
      values_[name] = value;
    }
  }
}

bool Args::has(const std::string& name) const {
  return values_.count(name) > 0;
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

long Args::get_int(const std::string& name, long fallback, long min, long max) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  MYRIAD_REQUIRE(!v->empty() && end && *end == '\0' && x >= min && x <= max, kValue, "--", name, " ", *v,
                 ": must be a whole number in [", min, ", ", max, "]");
  return x;
}

double Args::get_double(const std::string& name, double fallback, double min, double max, bool open_min,
                        bool open_max) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  const bool in = std::isfinite(x) && (open_min ? x > min : x >= min) && (open_max ? x < max : x <= max);
  MYRIAD_REQUIRE(!v->empty() && end && *end == '\0' && in, kValue, "--", name, " ", *v, ": must be a number in ",
                 open_min ? "(" : "[", min, ", ", max, open_max ? ")" : "]");
  return x;
}

uint64_t Args::get_u64(const std::string& name, uint64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v->c_str(), &end, 10);
  MYRIAD_REQUIRE(!v->empty() && (*v)[0] != '-' && end && *end == '\0' && errno == 0, kValue, "--", name, " ", *v,
                 ": must be a whole number in [0, 2^64)");
  return uint64_t(x);
}

std::string Args::get_choice(const std::string& name, const std::string& fallback,
                             const std::vector<std::string>& choices) const {
  const std::string v = get_or(name, fallback);
  std::string list;
  for (const std::string& c : choices) {
    if (c == v) return v;
    list += (list.empty() ? "" : ", ") + c;
  }
  MYRIAD_REQUIRE(false, kValue, "--", name, " ", v, ": must be one of ", list);
  return fallback;
}

}  // namespace myriad::cli

namespace {

void print_main_help() {
  std::printf(
      "myriad: sparse Mixture-of-Experts multimodal transformers (Kimi-K3 class), from a 2-core laptop to "
      "the flagship\n\nusage: myriad COMMAND [options]   (myriad COMMAND --help for its options)\n\ncommands:\n");
  for (const auto& [name, c] : myriad::cli::registry()) std::printf("  %-12s %s\n", name.c_str(), c.summary.c_str());
  std::printf(
      "\nexamples:\n"
      "  myriad train --config configs/tiny.json --out runs/demo       train the demo model (make demo does this)\n"
      "  myriad generate --model runs/demo --prompt \"In the morning,\"  continue a prompt\n"
      "  myriad chat --model runs/demo                                 talk with a model in the terminal\n"
      "  myriad serve --model runs/demo --port 8080                    OpenAI-compatible HTTP API\n"
      "  myriad params --config configs/kimi-k3.json                   size a model before building it\n"
      "\n--model takes a model directory (config.json, weights, tokenizer/) or a training run (its latest "
      "checkpoint).\nEvery command and flag: docs/cli.md; the rest of the documentation: README.md and docs/.\n");
}

// Under mpirun, which rank speaks; and an error on one rank ends every rank (the others would wait in their
// next collective forever).
std::string rank_tag() {
  if (!myriad::mpi_initialized() || myriad::mpi_world().size() == 1) return "";
  return " (rank " + std::to_string(myriad::mpi_world().rank()) + ")";
}
void end_job_on_error() {
  if (myriad::mpi_initialized() && myriad::mpi_world().size() > 1) {
    std::fflush(stderr);
    myriad::mpi_abort(1);
  }
}

// Runnable threads of other processes now: threads in state R under /proc/PID/task/, this process's own and
// kernel threads left out. Counting procs_running of /proc/stat instead (less one for this thread) also counted
// OpenBLAS's worker threads, which spin in this very process just after it loads, and on an idle 2-core VM started
// every command on one thread (`make demo` at half speed). -1 when /proc is unreadable.
int runnable_threads_of_others() {
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  const long self = long(getpid());
  int n = 0;
  while (const dirent* e = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0])) || std::atol(e->d_name) == self) continue;
    const std::string tasks = std::string("/proc/") + e->d_name + "/task";
    DIR* td = opendir(tasks.c_str());
    if (!td) continue;  // the process ended meanwhile
    while (const dirent* t = readdir(td)) {
      if (!std::isdigit(static_cast<unsigned char>(t->d_name[0]))) continue;
      std::FILE* f = std::fopen((tasks + "/" + t->d_name + "/stat").c_str(), "r");
      if (!f) continue;
      char buf[512];
      const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      buf[len] = '\0';
      // After the command name's closing parenthesis: state, ppid, pgrp, session, tty_nr, tpgid, flags.
      const char* close = std::strrchr(buf, ')');
      char state = 0;
      long skip[5];
      unsigned long flags = 0;
      if (!close || std::sscanf(close + 1, " %c %ld %ld %ld %ld %ld %lu", &state, &skip[0], &skip[1], &skip[2],
                                &skip[3], &skip[4], &flags) != 7)
        continue;
      constexpr unsigned long kKernelThread = 0x00200000;  // PF_KTHREAD
      if (state == 'R' && !(flags & kKernelThread)) ++n;
    }
    closedir(td);
  }
  closedir(proc);
  return n;
}

// The least of a few samples (a passing process is not load). -1 when unreadable.
int other_runnable_threads() {
  int least = -1;
  for (int sample = 0; sample < 5; ++sample) {
    const int n = runnable_threads_of_others();
    if (n < 0) return -1;
    least = least < 0 ? n : std::min(least, n);
    if (least == 0) break;
    ::usleep(2000);
  }
  return least;
}

}  // namespace

int main(int argc, char** argv) {
  // NOTE: libgomp's idle threads spin for ~300k iterations before sleeping. When the cores are shared (OpenBLAS's
  // own threads, or any other process on a 2-core machine) a spinning thread starves the one it waits for, and a
  // tiny model's many short parallel regions ran 10x slower. A short spin fixes that when myriad has the cores to
  // itself. When other CPU-bound work already runs, every parallel region's barrier waits for the thread the
  // scheduler last preempted, and training fell to 2-8% of its speed beside two busy processes on 2 cores whatever
  // the spin (scripts/shared_machine_bench.sh); so then myriad takes only the cores that are free (at least one
  // thread) and waits passively. libgomp reads its settings when it loads, so the process re-executes itself once
  // with those that fit the machine at start-up; a setting the user chose (GOMP_SPINCOUNT, OMP_WAIT_POLICY,
  // MYRIAD_THREADS, --threads) wins. The same re-execution tells OpenBLAS the CPU's core type where it would not know
  // it (below).
  if (!std::getenv("MYRIAD_NO_REEXEC")) {
    bool reexec = false;
    if (!std::getenv("GOMP_SPINCOUNT") && !std::getenv("OMP_WAIT_POLICY")) {
      const int others = other_runnable_threads();
      if (others > 0) {
        ::setenv("OMP_WAIT_POLICY", "passive", 1);
        cpu_set_t mask;
        const int cores = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 1;
        const std::string threads = std::to_string(std::max(1, cores - others));
        if (!std::getenv("MYRIAD_THREADS")) ::setenv("MYRIAD_THREADS", threads.c_str(), 1);
      } else {
        ::setenv("GOMP_SPINCOUNT", "10000", 1);
      }
      reexec = true;
    }
    // OpenBLAS picks its kernels by the CPU's model number when it loads, and runs generic ones on a CPU newer than
    // the library; told the core type of the CPU's ISA (ops/gemm_backend.h) it runs its AVX2 / AVX-512 kernels.
    if (!std::getenv("OPENBLAS_CORETYPE") && myriad::ops::openblas_kernel_is_generic()) {
      const std::string core = myriad::ops::openblas_coretype_for_cpu();
      if (!core.empty()) ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1), reexec = true;
    }
    if (reexec) {
      ::setenv("MYRIAD_NO_REEXEC", "1", 1);
      ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
    }
  }
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty() || rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    print_main_help();
    return rest.empty() ? 2 : 0;
  }
  auto& reg = myriad::cli::registry();
  auto it = reg.find(rest[0]);
  if (it == reg.end()) {
    std::fprintf(stderr, "myriad: unknown command '%s' (myriad --help lists them)\n", rest[0].c_str());
    return 2;
  }
  const auto& cmd = it->second;
  try {
    myriad::cli::Args args(cmd.name, cmd.options, {rest.begin() + 1, rest.end()});
    if (args.help()) {
      std::printf("%s", myriad::cli::command_help(cmd).c_str());
      return 0;
    }
    myriad::init_threads_from_env();
    if (args.has("threads")) myriad::set_num_threads(int(args.get_int("threads", 0, 0, 4096)));
    return cmd.run(args);
  } catch (const myriad::Error& e) {
    std::fprintf(stderr, "myriad %s%s: %s: %s\n", cmd.name.c_str(), rank_tag().c_str(),
                 myriad::error_kind_name(e.kind()), e.what());
    end_job_on_error();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "myriad %s%s: error: %s\n", cmd.name.c_str(), rank_tag().c_str(), e.what());
    end_job_on_error();
    return 1;
  }
}

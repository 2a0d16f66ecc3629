// `myriad init --config FILE --out DIR [--seed S] [--max-gb G] [--force]`: a random model (model/init.h):
// DIR/model.safetensors (f32; shards above 2 GiB) and DIR/config.json (the input's bytes), written atomically.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "model/init.h"

namespace {

uint64_t parse_seed(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  MYRIAD_REQUIRE(!v.empty() && v[0] != '-' && end && *end == '\0' && errno == 0, kValue, "--seed ", v,
                 ": must be a whole number in [0, 2^64)");
  return uint64_t(x);
}

double parse_gb(const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  MYRIAD_REQUIRE(!v.empty() && end && *end == '\0' && std::isfinite(x) && x > 0, kValue, "--max-gb ", v,
                 ": must be a positive number of GB");
  return x;
}

int run_init(const myriad::cli::Args& args) {
  const auto config = args.get("config");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(config && out, kValue, "init needs --config FILE and --out DIR (see myriad init --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "init takes no positional arguments, got '", args.positional()[0],
                 "'");
  myriad::InitOptions opt;
  if (auto s = args.get("seed")) opt.seed = parse_seed(*s);
  if (auto g = args.get("max-gb")) opt.max_gb = parse_gb(*g);
  opt.overwrite = args.has("force");
  const std::vector<std::string> files = myriad::write_random_model(*config, *out, opt);
  std::printf("initialised a random model in %s (seed %llu):\n", out->c_str(),
              static_cast<unsigned long long>(opt.seed));
  for (const auto& f : files) std::printf("  %s\n", f.c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("init", "create a random model (f32 weights and config.json) from a config",
               "myriad init --config FILE --out DIR [--seed S] [--max-gb G] [--force]",
               {{"config", "FILE", "model config.json (or a directory holding one); copied unchanged"},
                {"out", "DIR", "output directory (created if missing)"},
                {"seed", "S", "random seed (default 0); same seed, same bytes"},
                {"max-gb", "G", "refuse models larger than G GB of f32 weights (default 8)"},
                {"force", "", "replace a checkpoint already in DIR"}},
               run_init);

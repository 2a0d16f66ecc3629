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

int run_init(const myriad::cli::Args& args) {
  const auto config = args.get("config");
  const auto out = args.get("out");
  MYRIAD_REQUIRE(config && out, kValue, "init needs --config FILE and --out DIR (see myriad init --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "init takes no positional arguments, got '", args.positional()[0],
                 "'");
  myriad::InitOptions opt;
  opt.seed = args.get_u64("seed", opt.seed);
  opt.max_gb = args.get_double("max-gb", opt.max_gb, 0, 1e12, /*open_min=*/true);
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

// consumer CONFIG OUT SEED: a random model written by the installed library (model/init.h), which the install test
// compares byte for byte with what the installed `myriad init` writes from the same config and seed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "model/init.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: consumer CONFIG OUT SEED\n");
    return 2;
  }
  try {
    myriad::InitOptions opt;
    opt.seed = std::strtoull(argv[3], nullptr, 10);
    for (const std::string& f : myriad::write_random_model(argv[1], argv[2], opt)) std::printf("%s\n", f.c_str());
  } catch (const myriad::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}

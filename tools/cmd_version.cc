// `myriad version`: the build facts a bug report needs (version and commit, compiler and flags, the ISA paths and
// GEMM backend chosen on this CPU, threads, what is compiled in), as text or JSON.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "build_info.h"
#include "cli.h"
#include "core/cpu_info.h"
#include "core/threads.h"
#include "dist/mpi_communicator.h"
#include "ops/devices.h"
#include "ops/gemm_backend.h"

namespace {

using namespace myriad;

// Where the thread count came from, as the CLI decides it (tools/myriad.cc: --threads, MYRIAD_THREADS, or the
// cores free at start-up).
std::string threads_source(const cli::Args& args) {
  if (args.has("threads")) return "--threads";
  if (std::getenv("MYRIAD_THREADS")) return "MYRIAD_THREADS";
  return "all cores";
}

std::string cuda_status() {
#ifdef MYRIAD_WITH_CUDA
  return ops::device_available(Device::kCUDA) ? "built in; a device is usable" : "built in; no usable device here";
#else
  return "not built in (cmake --preset cuda)";
#endif
}

std::string allocator() {
#ifdef MYRIAD_JEMALLOC
  return "jemalloc";
#else
  return "the C library's malloc";
#endif
}

int run_version(const cli::Args& args) {
  const ops::GemmBackend& gemm = ops::gemm_backend();
  const CpuInfo& cpu = cpu_info();
  const std::string mpi = mpi_library_version();
  const char* nccl = "not built in (no NCCL communicator: ranks talk over MPI)";
  if (args.has("json")) {
    const nlohmann::json j = {
        {"version", build::kVersion},
        {"commit", build::kCommit},
        {"compiler", build::kCompiler},
        {"build_type", build::kBuildType},
        {"build_flags", build::kBuildFlags},
        {"cpu", cpu.summary()},
        {"kernels", kernel_isa_path()},
        {"int8_isa", cpu.vnni_isa()},
        {"gemm", {{"library", gemm.name}, {"kernel", gemm.kernel}, {"why", gemm.why}}},
        {"threads", num_threads()},
        {"threads_from", threads_source(args)},
        {"cuda", cuda_status()},
        {"mpi", mpi},
        {"nccl", nccl},
        {"allocator", allocator()},
    };
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("myriad %s\n", build::kVersion);
  std::printf("  commit:  %s\n", build::kCommit);
  std::printf("  build:   %s, %s, %s\n", build::kBuildType, build::kCompiler, build::kBuildFlags);
  std::printf("%s", ops::compute_paths("  ").c_str());
  std::printf("  threads: %d (%s)\n", num_threads(), threads_source(args).c_str());
  std::printf("  cuda:    %s\n", cuda_status().c_str());
  std::printf("  mpi:     %s (several ranks under mpirun)\n", mpi.c_str());
  std::printf("  nccl:    %s\n", nccl);
  std::printf("  malloc:  %s\n", allocator().c_str());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("version", "print the version, the commit and the build's facts (ISA paths, GEMM backend, threads)",
               "myriad version [--json]", {{"json", "", "print the facts as one JSON object"}}, run_version);

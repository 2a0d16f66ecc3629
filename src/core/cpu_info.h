// What CPU this process runs on and which instruction sets it offers, read once from CPUID (through GCC's
// __builtin_cpu_supports and the brand string), and which ISA path myriad's own kernels were compiled for.
// Used to pick kernels and libraries by the ISA the CPU has, never by its model number (a library that keys on
// the model number runs generic code on a CPU it does not know), and printed by `myriad version`, `selfcheck`
// and every bench so that a figure always names the machine and the code path that made it.
#pragma once

#include <string>

namespace myriad {

struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string brand;   // the CPUID brand string ("Intel(R) Xeon(R) Processor", "AMD EPYC 7B13 ...")
  int family = 0, model = 0;
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false;
  bool avx_vnni = false;  // the 256-bit VEX form of VNNI (Alder Lake and later, Zen 5)
  bool amx = false;       // AMX tiles (bf16 / int8)

  // The widest f32 FMA the CPU offers: "avx512", "avx2", or "sse" (no FMA).
  std::string fma_isa() const;
  // The widest int8 dot-product instruction: "avx512-vnni", "avx-vnni", or "" (none).
  std::string vnni_isa() const;
  // One line: "Intel(R) Xeon(R) Processor (family 6 model 143): avx2 fma avx512f avx512bw avx512-vnni ...".
  std::string summary() const;
};

const CpuInfo& cpu_info();  // read once

// The ISA path myriad's own kernels were compiled for (-march of the build): "avx512", "avx2+fma" or "generic",
// with "+vnni" where the int8 kernels use it.
std::string kernel_isa_path();

// Whether the CPU has every ISA extension the build was compiled for; `missing` names the first one it lacks (a binary
// built with -march=native on one machine dies of SIGILL on an older one; the tests check the build against the CPU).
bool cpu_runs_build(std::string* missing);

}  // namespace myriad

#include "core/cpu_info.h"

#include <cpuid.h>

#include <cstring>

namespace myriad {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(' ');
  return s.substr(b, e - b + 1);
}

CpuInfo read_cpu_info() {
  CpuInfo c;
  __builtin_cpu_init();
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4), std::memcpy(v + 4, &d, 4), std::memcpy(v + 8, &cx, 4);
    c.vendor = v;
  }
  if (__get_cpuid(1, &a, &b, &cx, &d)) {
    const unsigned base_family = (a >> 8) & 0xf, ext_family = (a >> 20) & 0xff;
    const unsigned base_model = (a >> 4) & 0xf, ext_model = (a >> 16) & 0xf;
    c.family = int(base_family == 0xf ? base_family + ext_family : base_family);
    c.model = int(base_family == 0x6 || base_family == 0xf ? (ext_model << 4) + base_model : base_model);
  }
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      unsigned r[4];
      __get_cpuid(0x80000002 + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(brand + 16 * leaf, r, 16);
    }
    c.brand = trim(brand);
  }
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
  c.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  c.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  // GCC 12's __builtin_cpu_supports knows neither AVX-VNNI nor AMX: CPUID leaf 7 directly (sub-leaf 1 EAX bit 4;
  // sub-leaf 0 EDX bit 24 amx-tile).
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  if (__get_cpuid_count(7, 1, &a7, &b7, &c7, &d7)) c.avx_vnni = (a7 >> 4) & 1;
  if (__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) c.amx = (d7 >> 24) & 1;
  // The OS must save the wide registers too (XCR0): a hypervisor can show the CPUID bits without enabling them.
  unsigned xcr0 = 0;
  if (__get_cpuid(1, &a, &b, &cx, &d) && (cx >> 27) & 1) {
    unsigned hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
  }
  const bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (!ymm_os) c.avx2 = c.fma = c.avx_vnni = false;
  if (!zmm_os) c.avx512f = c.avx512bw = c.avx512vl = c.avx512_vnni = c.avx512_bf16 = false;
  return c;
}

}  // namespace

std::string CpuInfo::fma_isa() const {
  if (avx512f) return "avx512";
  if (avx2 && fma) return "avx2";
  return "sse";
}

std::string CpuInfo::vnni_isa() const {
  if (avx512_vnni && avx512bw) return "avx512-vnni";
  if (avx_vnni) return "avx-vnni";
  return "";
}

std::string CpuInfo::summary() const {
  std::string s = (brand.empty() ? vendor : brand) + " (family " + std::to_string(family) + " model " +
                  std::to_string(model) + "):";
  const std::pair<bool, const char*> flags[] = {{avx2, "avx2"},
                                                {fma, "fma"},
                                                {avx512f, "avx512f"},
                                                {avx512bw, "avx512bw"},
                                                {avx512vl, "avx512vl"},
                                                {avx512_vnni, "avx512-vnni"},
                                                {avx512_bf16, "avx512-bf16"},
                                                {avx_vnni, "avx-vnni"},
                                                {amx, "amx"}};
  bool any = false;
  for (const auto& [on, name] : flags)
    if (on) s += std::string(" ") + name, any = true;
  if (!any) s += " sse only";
  return s;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = read_cpu_info();
  return info;
}

std::string kernel_isa_path() {
#if defined(__AVX512F__)
  std::string s = "avx512";
#if defined(__AVX512VNNI__)
  s += "+vnni";
#endif
#elif defined(__AVX2__) && defined(__FMA__)
  std::string s = "avx2+fma";
#if defined(__AVXVNNI__)
  s += "+avx-vnni";
#endif
#else
  std::string s = "generic";
#endif
  return s;
}

bool cpu_runs_build(std::string* missing) {
  const CpuInfo& c = cpu_info();
  const std::pair<bool, const char*> need[] = {
#if defined(__AVX2__)
    {c.avx2, "avx2"},
#endif
#if defined(__FMA__)
    {c.fma, "fma"},
#endif
#if defined(__AVX512F__)
    {c.avx512f, "avx512f"},
#endif
#if defined(__AVX512BW__)
    {c.avx512bw, "avx512bw"},
#endif
#if defined(__AVX512VNNI__)
    {c.avx512_vnni, "avx512vnni"},
#endif
    {true, ""}
  };
  for (const auto& [has, name] : need)
    if (!has) {
      if (missing) *missing = name;
      return false;
    }
  return true;
}

}  // namespace myriad

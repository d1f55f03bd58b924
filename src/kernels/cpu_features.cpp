#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace ds {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  if (!osxsave) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6) == 0x6;
  const bool zmm_state = (xcr0_lo & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = ymm_state && (ebx & (1u << 5));
  f.avx512f = zmm_state && (ebx & (1u << 16));
  f.avx512bw = zmm_state && (ebx & (1u << 30));
  f.avx512vl = zmm_state && (ebx & (1u << 31));
  f.avx512vnni = zmm_state && (ecx & (1u << 11));
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = zmm_state && (eax & (1u << 5));
  if (!ymm_state) f.fma = f.f16c = false;
  return f;
}

// DSINFER_ISA caps the kernels: portable, avx2 (no VNNI), or avx2+vnni (the
// default: the best the CPU has). Anything else is refused at the first kernel choice.
const char* isa_cap() {
  static const char* cap = [] {
    const char* forced = std::getenv("DSINFER_ISA");
    if (!forced || !*forced) return "avx2+vnni";
    for (const char* known : {"portable", "avx2", "avx2+vnni"}) {
      if (std::strcmp(forced, known) == 0) return known;
    }
    std::fprintf(stderr, "DSINFER_ISA=%s: not portable, avx2 or avx2+vnni\n", forced);
    std::exit(2);
  }();
  return cap;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool use_avx2_kernels() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    return std::strcmp(isa_cap(), "portable") != 0 && f.avx2 && f.fma && f.f16c;
  }();
  return enabled;
}

bool use_vnni_kernels() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    return use_avx2_kernels() && std::strcmp(isa_cap(), "avx2+vnni") == 0 && f.avx512vnni && f.avx512vl;
  }();
  return enabled;
}

bool use_bf16_dot_kernels() {
  static const bool enabled = use_vnni_kernels() && cpu_features().avx512bf16;
  return enabled;
}

const char* kernel_isa_name() { return use_vnni_kernels() ? "avx2+vnni" : use_avx2_kernels() ? "avx2" : "portable"; }

}  // namespace ds

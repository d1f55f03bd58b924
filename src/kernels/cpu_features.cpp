#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

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
  f.avx512vnni = zmm_state && (ecx & (1u << 11));
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = zmm_state && (eax & (1u << 5));
  if (!ymm_state) f.fma = f.f16c = false;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool use_avx2_kernels() {
  static const bool enabled = [] {
    const char* forced = std::getenv("DSINFER_ISA");
    if (forced && std::strcmp(forced, "portable") == 0) return false;
    const CpuFeatures& f = cpu_features();
    return f.avx2 && f.fma && f.f16c;
  }();
  return enabled;
}

const char* kernel_isa_name() { return use_avx2_kernels() ? "avx2" : "portable"; }

}  // namespace ds

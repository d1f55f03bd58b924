#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/log.h"

namespace ds {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  f.intel = ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e;  // "Genu" "ineI" "ntel"
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  if (!osxsave) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6) == 0x6;
  const bool zmm_state = (xcr0_lo & 0xE6) == 0xE6;
  const bool tile_state = (xcr0_lo & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = ymm_state && (ebx & (1u << 5));
  f.avx512f = zmm_state && (ebx & (1u << 16));
  f.avx512bw = zmm_state && (ebx & (1u << 30));
  f.avx512vl = zmm_state && (ebx & (1u << 31));
  f.avx512vnni = zmm_state && (ecx & (1u << 11));
  f.amx_tile = tile_state && (edx & (1u << 24));
  f.amx_int8 = tile_state && (edx & (1u << 25));
  f.amx_bf16 = tile_state && (edx & (1u << 22));
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = zmm_state && (eax & (1u << 5));
  if (!ymm_state) f.fma = f.f16c = false;
  return f;
}

enum class IsaCap { portable, avx2, avx512, amx };

// DSINFER_ISA caps the kernels (cpu_features.h). Anything else is refused at
// the first kernel choice.
IsaCap isa_cap() {
  static const IsaCap cap = [] {
    const char* forced = std::getenv("DSINFER_ISA");
    if (!forced || !*forced) return IsaCap::amx;
    const struct {
      const char* name;
      IsaCap cap;
    } known[] = {{"portable", IsaCap::portable}, {"avx2", IsaCap::avx2}, {"avx512", IsaCap::avx512}, {"amx", IsaCap::amx}};
    for (const auto& k : known) {
      if (std::strcmp(forced, k.name) == 0) return k.cap;
    }
    std::fprintf(stderr, "DSINFER_ISA=%s: not portable, avx2, avx512 or amx\n", forced);
    std::exit(2);
  }();
  return cap;
}

// Linux's arch_prctl codes for the dynamically enabled tile state (asm/prctl.h).
constexpr int k_arch_req_xcomp_perm = 0x1023;
constexpr int k_xfeature_xtiledata = 18;

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool use_avx2_kernels() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    return isa_cap() >= IsaCap::avx2 && f.avx2 && f.fma && f.f16c;
  }();
  return enabled;
}

bool use_vnni_kernels() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    return use_avx2_kernels() && isa_cap() >= IsaCap::avx512 && f.avx512vnni && f.avx512vl;
  }();
  return enabled;
}

bool use_bf16_dot_kernels() {
  static const bool enabled = use_vnni_kernels() && cpu_features().avx512bf16 && !cpu_features().intel;
  return enabled;
}

bool use_amx_kernels() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    if (!use_vnni_kernels() || isa_cap() < IsaCap::amx || !f.amx_tile || !f.amx_int8) return false;
    if (syscall(SYS_arch_prctl, k_arch_req_xcomp_perm, k_xfeature_xtiledata) != 0) {
      DS_LOG_WARN("the CPU has AMX but the kernel refused this process the tile state (%s): the AVX-512 VNNI tiles run",
                  std::strerror(errno));
      return false;
    }
    return true;
  }();
  return enabled;
}

bool use_amx_bf16_kernels() {
  static const bool enabled = use_amx_kernels() && cpu_features().avx512bf16 && cpu_features().amx_bf16;
  return enabled;
}

const char* kernel_isa_name() {
  return use_amx_kernels() ? "amx" : use_vnni_kernels() ? "avx512" : use_avx2_kernels() ? "avx2" : "portable";
}

}  // namespace ds

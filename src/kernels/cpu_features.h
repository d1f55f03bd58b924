#pragma once
// What the CPU can run, read once with cpuid. Kernels pick their ISA from this.

namespace ds {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
};

const CpuFeatures& cpu_features();

// Kernel ISA in use: "avx2" or "portable". DSINFER_ISA=portable forces the fallback.
const char* kernel_isa_name();

}  // namespace ds

#pragma once
// What the CPU can run, read once with cpuid. Kernels pick their ISA from this.

namespace ds {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
};

const CpuFeatures& cpu_features();

// Whether the AVX2 kernels run (AVX2, FMA and F16C present, and not forced
// off with DSINFER_ISA=portable). Decided once.
bool use_avx2_kernels();
// Whether the int8 tile kernels with VNNI's dpbusd run (the AVX2 kernels do,
// the CPU has AVX512_VNNI and AVX512VL, and DSINFER_ISA is not avx2); the
// AVX-512F float tiles run with them.
bool use_vnni_kernels();
// Whether BF16 weights run on AVX512_BF16's vdpbf16ps (the VNNI kernels run
// and the CPU has it).
bool use_bf16_dot_kernels();
// Kernel ISA in use: "avx2+vnni", "avx2" or "portable".
const char* kernel_isa_name();

}  // namespace ds

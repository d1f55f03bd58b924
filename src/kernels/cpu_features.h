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
  // AMX: the CPU has the tiles (and their int8 products) and the OS enables
  // the tile state in XCR0. Running them also needs the process's grant
  // (use_amx_kernels).
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  bool intel = false;  // the vendor string is GenuineIntel
};

const CpuFeatures& cpu_features();

// The ISA levels, lowest first; DSINFER_ISA=portable|avx2|avx512|amx caps the
// kernels at one (the default: the best the CPU has).
//   portable: plain C++;
//   avx2:     AVX2, FMA and F16C tiles;
//   avx512:   the int8 tiles on AVX-512 VNNI's dpbusd (steps of a few
//             tokens or more two 8-row groups at a time in 512-bit
//             registers, where AVX-512BW is present too), the float tiles on
//             AVX-512F (BF16's on AVX512_BF16);
//   amx:      the int8 tiles of 16 tokens or more on AMX's tdpbssd, BF16
//             weights on its tdpbf16ps.
// Each level's int8 outputs equal the one below's bit for bit.

// Whether the AVX2 kernels run (AVX2, FMA and F16C present, and not capped
// at portable). Decided once.
bool use_avx2_kernels();
// Whether the int8 tile kernels with VNNI's dpbusd run (the AVX2 kernels do,
// the CPU has AVX512_VNNI and AVX512VL, and the cap is avx512 or amx); the
// AVX-512F float tiles run with them.
bool use_vnni_kernels();
// Whether BF16 weights run on AVX512_BF16's vdpbf16ps: the VNNI kernels run,
// the CPU has it, and it is fast there. On AMD Zen 4 it ran the tiles at
// twice the FMAs' rate; on a Sapphire Rapids-class Xeon it issues one per
// 2.2 cycles, against 1.85 FMAs a cycle (measured, 512 bits each), so Intel
// CPUs take the AVX-512 FMA tiles (the AVX2 tiles' bits, subnormals kept):
// the 1.1B model's pp512 1.24x, its tg32 3.5% slower (decode is bound by
// the memory, and the FMAs take a conversion and two instructions a pair).
bool use_bf16_dot_kernels();
// Whether the AMX int8 tiles run: the VNNI kernels do, the CPU has AMX-TILE
// and AMX-INT8 with the tile state enabled, the cap is amx, and the kernel
// granted this process the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM), asked
// here, once, before any tile instruction; without the grant the first one
// would raise SIGILL). A refusal is logged and the VNNI kernels run.
bool use_amx_kernels();
// Whether BF16 weights run on AMX-BF16's tdpbf16ps (the AMX int8 tiles do,
// and the CPU has AVX512_BF16 and AMX-BF16): repacked at load into the
// tiles' layout, every step's tokens through the tiles.
bool use_amx_bf16_kernels();
// Kernel ISA in use: "amx", "avx512", "avx2" or "portable".
const char* kernel_isa_name();

}  // namespace ds

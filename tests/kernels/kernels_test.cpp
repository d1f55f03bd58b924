// Every fast kernel against its plain reference, over a grid of shapes that
// includes sizes off the block and vector widths, every weight type, and 1 and
// 2 threads. Outputs are surrounded by guard values that must stay untouched.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/activation_quant.h"
#include "kernels/attention_tiles.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise.h"
#include "kernels/float_rows.h"
#include "kernels/interleaved_rows.h"
#include "kernels/matmul.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "kernels/vec_dot.h"
#include "support/random_tensors.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

constexpr float k_guard = -12345.678f;

const DType k_weight_types[] = {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0,
                                DType::q5_1, DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k, DType::mxfp4};
// With W8A8's I8 rows, whose dot is an exact integer sum (tested apart from the others).
const DType k_matmul_types[] = {DType::f32, DType::f16,  DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                                DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k, DType::mxfp4, DType::i8};

std::vector<int64_t> column_sizes(DType type) {
  const int64_t block = dtype_traits(type).block_elements;
  if (block == 1) return {1, 7, 8, 33, 100, 256, 1000};
  if (block == 32) return {32, 64, 96, 288, 1024};
  return {256, 512, 1280};
}

// Tolerance for a dot product: relative to the sum of |w|·|a| so that
// cancellation does not make the bound meaningless.
// Q8_1 activations store d * sum(q) in f16, so the min term of the *_1 types
// carries f16 rounding (as in llama.cpp, whose format this is).
double dot_tolerance(const std::vector<float>& w, const std::vector<float>& a, DType act_type) {
  double magnitude = 0.0;
  for (size_t i = 0; i < w.size(); ++i) magnitude += std::fabs(double(w[i]) * a[i]);
  return (act_type == DType::q8_1 ? 2e-3 : 1e-5) * magnitude + 1e-6;
}

class VecDotTest : public ::testing::TestWithParam<DType> {};

TEST_P(VecDotTest, EveryIsaMatchesDequantizedReference) {
  const DType type = GetParam();
  const DType act_type = activation_type_for(type);
  std::mt19937 rng(42);
  std::vector<std::pair<const char*, VecDotFn>> isas = {{"portable", vec_dot_portable(type)}};
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx2 && cpu.fma && cpu.f16c && vec_dot_avx2(type)) isas.push_back({"avx2", vec_dot_avx2(type)});
  ASSERT_NE(isas[0].second, nullptr);
  for (int64_t n : column_sizes(type)) {
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<uint8_t> w = random_weights(rng, type, 1, n);
      const std::vector<float> x = random_floats(rng, n);
      std::vector<uint8_t> a(size_t(row_bytes(act_type, n)));
      ASSERT_TRUE(quantize_row(act_type, x.data(), a.data(), n));
      std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
      dequantize_row(type, w.data(), wf.data(), n);
      dequantize_row(act_type, a.data(), af.data(), n);
      double expected = 0.0;
      for (int64_t i = 0; i < n; ++i) expected += double(wf[size_t(i)]) * af[size_t(i)];
      for (const auto& [name, fn] : isas) {
        EXPECT_NEAR(fn(n, w.data(), a.data()), expected, dot_tolerance(wf, af, act_type))
            << dtype_name(type) << " isa " << name << " n " << n;
      }
    }
  }
}

// Every tile of the kernel this CPU runs (four tokens, two rows by four
// tokens) gives each (row, token) the bits of the
// single dot: what keeps a token's result independent of its batch.
TEST_P(VecDotTest, EveryTileGivesTheSingleDotsBits) {
  const DType type = GetParam();
  const VecDotKernel k = vec_dot_kernel(type);
  const DType act_type = k.activation_type;
  std::mt19937 rng(43);
  for (int64_t n : column_sizes(type)) {
    const std::vector<uint8_t> w = random_weights(rng, type, 4, n);
    const int64_t w_stride = row_bytes(type, n), a_stride = row_bytes(act_type, n);
    std::vector<uint8_t> a(size_t(4 * a_stride));
    for (int j = 0; j < 4; ++j) ASSERT_TRUE(quantize_row(act_type, random_floats(rng, n).data(), a.data() + j * a_stride, n));
    float single[4][4];
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 4; ++j) single[r][j] = k.dot(n, w.data() + r * w_stride, a.data() + j * a_stride);
    float out[8];
    if (k.dot4) {
      k.dot4(n, w.data(), a.data(), a_stride, out);
      for (int j = 0; j < 4; ++j) EXPECT_EQ(out[j], single[0][j]) << dtype_name(type) << " dot4 n " << n;
    }
    if (k.dot2x4) {
      k.dot2x4(n, w.data(), w_stride, a.data(), a_stride, out);
      for (int r = 0; r < 2; ++r)
        for (int j = 0; j < 4; ++j) EXPECT_EQ(out[r * 4 + j], single[r][j]) << dtype_name(type) << " dot2x4 n " << n;
    }
  }
}

// The matrix in the row layout and, where this CPU interleaves its type, in
// the interleaved one (a copy kept alive by the returned storage).
struct Layouts {
  std::vector<uint8_t> interleaved_data;
  std::vector<float> row_scales;  // I8
  std::vector<int32_t> zero_points;  // I8, asymmetric
  std::vector<WeightMatrix> matrices;
  const WeightMatrix* begin() const { return matrices.data(); }
  const WeightMatrix* end() const { return matrices.data() + matrices.size(); }
};

Layouts layouts(DType type, int64_t n_rows, int64_t n_cols, const std::vector<uint8_t>& rows) {
  Layouts l;
  l.matrices.push_back(WeightMatrix{type, n_rows, n_cols, rows.data()});
  if (type == DType::i8) {
    for (int64_t r = 0; r < n_rows; ++r) l.row_scales.push_back(0.004f * float(1 + r % 7));
    l.matrices.back().row_scales = l.row_scales.data();
    l.matrices.push_back(l.matrices.back());
    l.matrices.back().input_scale = 0.01f;  // a calibrated static scale that clips N(0, 1) inputs
    for (int64_t r = 0; r < n_rows; ++r) l.zero_points.push_back(int32_t(r % 41) - 20);
    l.matrices.push_back(l.matrices.front());
    l.matrices.back().row_zero_points = l.zero_points.data();  // asymmetric rows (W8A8_ASYM)
  }
  if (interleavable(type, n_rows, n_cols)) {  // each of the above again, interleaved
    l.interleaved_data.resize(rows.size());
    interleave_rows(type, n_rows, n_cols, rows.data(), l.interleaved_data.data());
    for (size_t i = 0, n = l.matrices.size(); i < n; ++i) {
      WeightMatrix w = l.matrices[i];
      w.data = l.interleaved_data.data();
      w.repacked = true;
      l.matrices.push_back(w);
    }
  }
  return l;
}

TEST(InterleavedRows, EveryRowComesBackByteForByte) {
  std::mt19937 rng(5);
  for (DType type : {DType::q8_0, DType::q4_0, DType::q5_0, DType::q4_1, DType::q5_1, DType::q4_k, DType::q5_k, DType::q6_k,
                     DType::i8, DType::bf16}) {
    const int64_t n_rows = 3 * interleaved_group_rows(type), n_cols = interleaved_block_elements(type) * 3;
    const std::vector<uint8_t> rows = random_weights(rng, type, n_rows, n_cols);
    std::vector<uint8_t> interleaved(rows.size()), row(size_t(row_bytes(type, n_cols)));
    interleave_rows(type, n_rows, n_cols, rows.data(), interleaved.data());
    EXPECT_NE(interleaved, rows) << dtype_name(type);
    for (int64_t r = 0; r < n_rows; ++r) {
      deinterleaved_row(type, n_cols, interleaved.data(), r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), rows.data() + r * row.size(), row.size())) << dtype_name(type) << " row " << r;
    }
  }
}

TEST(InterleavedRows, OnlyWholeGroupsOfTheKernelTypes) {
  EXPECT_FALSE(interleavable(DType::q8_0, 12, 64));
  EXPECT_FALSE(interleavable(DType::f16, 16, 64));
  EXPECT_FALSE(interleavable(DType::bf16, 24, 64));  // BF16 (AMX-BF16 only) in groups of 16 rows, 32 columns
  EXPECT_FALSE(interleavable(DType::bf16, 16, 48));
  EXPECT_EQ(interleavable(DType::bf16, 32, 96), use_amx_bf16_kernels());
  EXPECT_FALSE(interleavable(DType::q5_0, 12, 64));
  EXPECT_FALSE(interleavable(DType::q3_k, 16, 256));  // no interleaved kernels
  EXPECT_FALSE(interleavable(DType::q6_k, 20, 256));
  EXPECT_FALSE(interleavable(DType::i8, 16, 100));  // I8 rows in whole group blocks of 32 only
  if (use_avx2_kernels()) {
    EXPECT_TRUE(interleavable(DType::q8_0, 16, 64) && interleavable(DType::q4_0, 8, 32) && interleavable(DType::q5_1, 8, 64) &&
                interleavable(DType::q4_k, 24, 256) && interleavable(DType::q5_k, 8, 512) && interleavable(DType::q6_k, 16, 256) &&
                interleavable(DType::i8, 16, 96));
  }
}

// The VNNI tiles (dpbusd) add the same exact integer sums as the AVX2 ones
// (maddubs + madd), so a group's outputs agree bit for bit (a group of the
// rows this CPU lays out: 8, or Q8_0's and I8's 16 where AMX runs): every token-tile
// shape, with the extreme codes (a Q8_0 block and 32 I8 weights of -128
// against activations that reach ±127; a block of a nibble type's largest
// codes against a block of activations all 127) where an int16 step that
// saturated or wrapped would show.
TEST(InterleavedRows, VnniTilesEqualAvx2TilesBitForBit) {
  const CpuFeatures& f = cpu_features();
  if (!use_avx2_kernels() || !f.avx512vnni || !f.avx512vl) GTEST_SKIP() << "no AVX512_VNNI with AVX512VL on this CPU: no VNNI tiles to run";
  std::mt19937 rng(21);
  for (DType type : {DType::q8_0, DType::q4_0, DType::q5_0, DType::q4_1, DType::q5_1, DType::mxfp4, DType::i8}) {
    const DType act_type = activation_type_for(type);
    const int64_t n_blocks = 5, n_cols = interleaved_block_elements(type) * n_blocks, act_stride = row_bytes(act_type, n_cols);
    const int64_t group_rows = interleaved_group_rows(type);
    std::vector<uint8_t> rows = random_weights(rng, type, group_rows, n_cols);
    if (type == DType::q8_0) std::memset(reinterpret_cast<BlockQ8_0*>(rows.data())[0].qs, 0x80, 32);
    if (type == DType::i8) std::memset(rows.data(), 0x80, 32);
    const bool nibbles = type == DType::q4_0 || type == DType::q5_0 || type == DType::q4_1 || type == DType::q5_1;
    const size_t codes_at = type == DType::q4_1 || type == DType::q5_1 ? 4 : 2;  // past d (and m): every code its largest
    if (nibbles) std::memset(rows.data() + codes_at, 0xFF, size_t(dtype_traits(type).block_bytes) - codes_at);
    std::vector<uint8_t> group(rows.size());
    interleave_rows(type, group_rows, n_cols, rows.data(), group.data());
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 9}) {
      std::vector<float> x = random_floats(rng, n_tokens * n_cols, 2.0f);
      for (int64_t t = 0; nibbles && t < n_tokens; ++t) std::fill_n(x.begin() + t * n_cols, k_qk, 1.5f);  // codes of 127
      std::vector<uint8_t> act(size_t(act_stride * n_tokens));
      for (int64_t t = 0; type == DType::i8 && t < n_tokens; ++t) {
        quantize_int8_activations(x.data() + t * n_cols, reinterpret_cast<int8_t*>(act.data() + t * act_stride), n_cols);
      }
      if (type != DType::i8) quantize_row(act_type, x.data(), act.data(), n_tokens * n_cols);
      std::vector<int32_t> block_sums(size_t(n_tokens * n_blocks));  // sum(a) per block, for Q4_0, Q5_0 and MXFP4
      for (int64_t i = 0; interleaved_kernel_reads_block_sums(type) && i < n_tokens * n_blocks; ++i) {
        for (int8_t q : reinterpret_cast<const BlockQ8_0*>(act.data())[i].qs) block_sums[size_t(i)] += q;
      }
      std::vector<uint8_t> vnni_act = act;  // the codes as the VNNI kernel reads them
      for (int64_t t = 0; interleaved_kernel_vnni_biased(type) && t < n_tokens; ++t) {
        bias_activation_codes(act_type, vnni_act.data() + t * act_stride, n_cols);
      }
      std::vector<float> avx2(size_t(group_rows * n_tokens)), vnni(avx2.size());
      interleaved_kernel_avx2(type)(n_blocks, group.data(), act.data(), act_stride, block_sums.data(), n_tokens, avx2.data(), group_rows);
      interleaved_kernel_vnni(type)(n_blocks, group.data(), vnni_act.data(), act_stride, block_sums.data(), n_tokens, vnni.data(),
                                    group_rows);
      ASSERT_EQ(0, std::memcmp(avx2.data(), vnni.data(), avx2.size() * sizeof(float))) << dtype_name(type) << " " << n_tokens << " tokens";
    }
  }
}

// The pair kernels (two 8-row groups in 512-bit registers, dpbusd; vpmulld
// for the K types' scales) add the same exact block and sub-block sums as
// the group kernels (VNNI's for Q8_0 and Q4_0, AVX2's maddubs and madd for
// the K types) and scale them in their float operations, so both groups'
// outputs agree bit for bit: every tile remainder (tiles of eight tokens),
// block counts of one and several, random blocks and blocks of the extremes
// (a Q8_0 block of -128; every code its largest; the K types' scales and
// mins at their largest, Q6_K's scales at -128 and 127) against activations
// of ±127.
TEST(InterleavedRows, PairKernelsEqualGroupKernelsBitForBit) {
  const CpuFeatures& f = cpu_features();
  if (!use_avx2_kernels() || !f.avx512f || !f.avx512bw || !f.avx512vnni || !f.avx512vl) {
    GTEST_SKIP() << "no AVX-512F/BW/VL with AVX512_VNNI on this CPU: no pair kernels to run";
  }
  std::mt19937 rng(29);
  for (DType type : {DType::q8_0, DType::q4_0, DType::q5_0, DType::q4_1, DType::q5_1, DType::mxfp4, DType::i8, DType::q4_k, DType::q5_k,
                     DType::q6_k}) {
    if (interleaved_group_rows(type) != k_interleave) continue;  // Q8_0 where AMX runs: 16-row groups, no pair kernel
    const DType act_type = activation_type_for(type);
    const bool k_type = act_type == DType::q8_k;
    const InterleavedGroupFn group_kernel = k_type ? interleaved_kernel_avx2(type) : interleaved_kernel_vnni(type);
    for (int64_t n_blocks : {1, 3, 5}) {
      const int64_t n_rows = 2 * k_interleave, n_cols = interleaved_block_elements(type) * n_blocks;
      const int64_t act_stride = row_bytes(act_type, n_cols) + 4, block_bytes = dtype_traits(type).block_bytes;
      std::vector<uint8_t> rows = random_weights(rng, type, n_rows, n_cols);
      // Row 3's and row 12's first block: the extremes.
      for (int64_t r : {3, 12}) {
        uint8_t* block = rows.data() + r * row_bytes(type, n_cols);
        if (type == DType::q8_0 || type == DType::i8) {
          std::memset(type == DType::i8 ? block : reinterpret_cast<uint8_t*>(reinterpret_cast<BlockQ8_0*>(block)->qs), 0x80, k_qk);
        } else if (type == DType::q6_k) {
          auto& q6 = *reinterpret_cast<BlockQ6_K*>(block);
          std::memset(q6.ql, 0xFF, sizeof(q6.ql));
          std::memset(q6.qh, 0xFF, sizeof(q6.qh));
          for (int s = 0; s < 16; ++s) q6.scales[s] = int8_t(s % 2 ? 127 : -128);
        } else {
          // Past the scale (and the min): every code its largest (MXFP4: -6 x its scale), fifth bits set; the K types'
          // scales and mins 63.
          const size_t past = type == DType::mxfp4 ? 1 : type == DType::q4_0 || type == DType::q5_0 ? 2 : 4;
          std::memset(block + past, 0xFF, size_t(block_bytes) - past);
        }
      }
      std::vector<uint8_t> groups(rows.size());
      interleave_rows(type, n_rows, n_cols, rows.data(), groups.data());
      const int64_t group_bytes = int64_t(groups.size()) / 2;
      for (int64_t n_tokens = 1; n_tokens <= 17; ++n_tokens) {
        std::vector<float> x = random_floats(rng, n_tokens * n_cols, 2.0f);
        for (int64_t i = 0; i < n_cols; ++i) x[size_t(i)] = i % 3 ? 127.0f : -127.0f;  // token 0: codes of ±127
        std::vector<uint8_t> act(size_t(act_stride * n_tokens));
        std::vector<int32_t> block_sums(size_t(n_tokens * n_blocks));  // sum(a) per block, for Q4_0, Q5_0 and MXFP4
        std::vector<float> block_scales(size_t(n_tokens * n_blocks));  // Q8_0 blocks' scales, block-major
        for (int64_t t = 0; t < n_tokens; ++t) {
          uint8_t* row = act.data() + t * act_stride;
          if (type == DType::i8) quantize_int8_activations(x.data() + t * n_cols, reinterpret_cast<int8_t*>(row), n_cols);
          else quantize_row(act_type, x.data() + t * n_cols, row, n_cols);
          for (int64_t b = 0; act_type == DType::q8_0 && b < n_blocks; ++b) {
            const BlockQ8_0& block = reinterpret_cast<const BlockQ8_0*>(row)[b];
            for (int8_t q : block.qs) block_sums[size_t(t * n_blocks + b)] += q;
            block_scales[size_t(b * n_tokens + t)] = fp16_to_fp32(block.d);
          }
          if (interleaved_kernel_vnni_biased(type)) bias_activation_codes(act_type, row, n_cols);
        }
        std::vector<float> want(size_t(n_rows * n_tokens)), pair(want.size());
        for (int64_t g = 0; g < 2; ++g) {
          group_kernel(n_blocks, groups.data() + g * group_bytes, act.data(), act_stride, block_sums.data(), n_tokens,
                       want.data() + g * k_interleave, n_rows);
        }
        const PairActivations pair_act{act.data(), act_stride, block_sums.data(), block_scales.data(), n_tokens};
        interleaved_pair_kernel_avx512(type)(n_blocks, groups.data(), group_bytes, pair_act, n_tokens, pair.data(), n_rows);
        ASSERT_EQ(0, std::memcmp(want.data(), pair.data(), want.size() * sizeof(float)))
            << dtype_name(type) << " " << n_blocks << " blocks, " << n_tokens << " tokens";
      }
    }
  }
}

// The AMX tiles (tdpbssd, 16 tokens by 16 rows) add each block's (each
// sub-block's) exact sum and scale it as the interleaved kernel does (VNNI's;
// AVX2's for the K types), so every output agrees bit for bit: runs of one,
// three and five groups (the tiles take 32 rows at a time: four 8-row groups
// re-laid, rows past the last group padded, or two 16-row ones in place, one
// alone at the end), one and three tiles of tokens (they go in pairs), odd and
// even block counts, the extreme codes.
TEST(InterleavedRows, AmxTilesEqualVnniTilesBitForBit) {
  if (!use_amx_kernels()) GTEST_SKIP() << "no AMX-INT8 granted on this CPU (or DSINFER_ISA caps it): no AMX tiles to run";
  std::mt19937 rng(23);
  for (DType type : {DType::q8_0, DType::q4_0, DType::mxfp4, DType::i8, DType::q4_k, DType::q5_k, DType::q6_k}) {
    const DType act_type = activation_type_for(type);
    const bool k_type = act_type == DType::q8_k;
    const InterleavedGroupFn vnni = interleaved_kernel_vnni(type) ? interleaved_kernel_vnni(type) : interleaved_kernel_avx2(type);
    const bool biased = interleaved_kernel_vnni(type) && interleaved_kernel_vnni_biased(type);
    for (auto [n_groups, n_blocks] : k_type ? std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 2}, {5, 3}}
                                            : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4}, {5, 7}}) {
      const int64_t group_rows = interleaved_group_rows(type);
      const int64_t n_rows = group_rows * n_groups, n_cols = interleaved_block_elements(type) * n_blocks;
      const int64_t act_stride = row_bytes(act_type, n_cols) + 6;
      std::vector<uint8_t> rows = random_weights(rng, type, n_rows, n_cols);
      if (type == DType::q8_0) std::memset(reinterpret_cast<BlockQ8_0*>(rows.data())[0].qs, 0x80, 32);
      if (type == DType::i8) std::memset(rows.data(), 0x80, 32);
      std::vector<uint8_t> groups(rows.size());
      interleave_rows(type, n_rows, n_cols, rows.data(), groups.data());
      const int64_t group_bytes = int64_t(groups.size()) / n_groups;
      for (int64_t n_tokens : {16, 48}) {
        std::vector<float> x = random_floats(rng, n_tokens * n_cols, 2.0f);
        for (int64_t i = 0; i < n_cols; ++i) x[size_t(i)] = i % 2 ? 127.0f : -127.0f;  // codes of ±127
        std::vector<uint8_t> act(size_t(act_stride * n_tokens));
        std::vector<int32_t> block_sums(size_t(n_tokens * n_blocks));
        std::vector<float> block_scales(size_t(n_tokens * n_blocks));
        for (int64_t t = 0; t < n_tokens; ++t) {
          uint8_t* row = act.data() + t * act_stride;
          if (type == DType::i8) {
            quantize_int8_activations(x.data() + t * n_cols, reinterpret_cast<int8_t*>(row), n_cols);
            continue;
          }
          quantize_row(act_type, x.data() + t * n_cols, row, n_cols);
          for (int64_t b = 0; !k_type && b < n_blocks; ++b) {
            const BlockQ8_0& block = reinterpret_cast<const BlockQ8_0*>(row)[b];
            for (int8_t q : block.qs) block_sums[size_t(t * n_blocks + b)] += q;
            block_scales[size_t(b * n_tokens + t)] = fp16_to_fp32(block.d);
          }
        }
        std::vector<uint8_t> vnni_act = act;  // the codes as the VNNI kernel reads them
        for (int64_t t = 0; biased && t < n_tokens; ++t) bias_activation_codes(act_type, vnni_act.data() + t * act_stride, n_cols);
        std::vector<float> want(size_t(n_rows * n_tokens)), amx(want.size());
        for (int64_t g = 0; g < n_groups; ++g) {
          vnni(n_blocks, groups.data() + g * group_bytes, vnni_act.data(), act_stride, block_sums.data(), n_tokens, want.data() + g * group_rows,
               n_rows);
        }
        std::vector<int8_t> tile_codes(size_t(n_tokens * n_cols));
        pack_tile_activations(act_type, amx_tile_depth(type), act.data(), act_stride, n_tokens, n_cols, tile_codes.data());
        const TileActivations tiles{tile_codes.data(), act_type == DType::q8_0 ? block_scales.data() : nullptr, n_tokens,
                                    k_type ? act.data() : nullptr, act_stride};
        interleaved_tiles(type)(n_groups, n_blocks, groups.data(), tiles, n_tokens, amx.data(), n_rows);
        ASSERT_EQ(0, std::memcmp(want.data(), amx.data(), want.size() * sizeof(float)))
            << dtype_name(type) << " " << n_groups << " groups, " << n_blocks << " blocks, " << n_tokens << " tokens";
      }
    }
  }
}

// The fast activation quantizers write exactly the reference's bytes: random
// blocks, a zero block, exact halves (amax 127 makes the Q8_0 scale 1, so
// x.5 must round to even as nearbyint does), tiny values, and for Q8_K a block
// whose largest magnitude appears with both signs (the first one sets the scale).
// F16 and BF16 also meet ties, subnormals, overflow, infinities and NaNs.
TEST(ActivationQuant, FastPathsEqualReferenceBitForBit) {
  if (!use_avx2_kernels()) GTEST_SKIP() << "no AVX2 on this CPU: the reference is the only path";
  const auto check = [](DType type, const std::vector<float>& x) {
    const size_t bytes = size_t(row_bytes(type, int64_t(x.size())));
    std::vector<uint8_t> fast(bytes), reference(bytes);
    quantize_activations(type, x.data(), fast.data(), int64_t(x.size()));
    quantize_row(type, x.data(), reference.data(), int64_t(x.size()));
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(fast[i], reference[i]) << dtype_name(type) << " byte " << i;
  };
  std::mt19937 rng(11);
  std::vector<float> x = random_floats(rng, 256 * 8, 3.0f);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = 0.0f;
  for (int i = 0; i < 32; ++i) x[size_t(32 + i)] = i == 0 ? 127.0f : float(i % 8) - 3.5f;
  for (int i = 0; i < 32; ++i) x[size_t(64 + i)] = 1e-30f * float(i + 1);
  for (int i = 0; i < 256; ++i) x[size_t(256 + i)] = 0.0f;  // a zero Q8_K block
  x[512 + 40] = -30.0f;
  x[512 + 43] = 30.0f;  // the same magnitude, later in the same 8 lanes, positive
  x[512 + 200] = 30.0f;
  for (DType type : {DType::q8_0, DType::q8_k}) check(type, x);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> specials = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f,  // F16 / BF16 ties
                                 0x1p-20f, -0x1.8p-24f, 0x1p-25f, 0x1p-126f, 65504.0f, 65520.0f, -1e6f, 3e38f,
                                 inf, -inf, nan, -nan, fp32_from_bits(0x7f800001u), fp32_from_bits(0xffa00000u)};
  for (float v : random_floats(rng, 45, 1e3f)) specials.push_back(v);  // and a length off the vectors
  for (DType type : {DType::f16, DType::bf16}) check(type, x), check(type, specials);
}


// W8A8's dot products are exact: every ISA and every tile shape gives the
// integer sum itself, over lengths on and off the 32-byte vectors, with the
// largest codes (2 * 127 * 127 per pair, where maddubs would saturate on an
// unsigned operand of 255) and a file's -128 weights against -127 (2 * 128 *
// 127 per pair; a sign moved onto the -128 would wrap).
TEST(W8A8, DotsAreTheExactIntegerSum) {
  std::mt19937 rng(9);
  std::vector<std::pair<const char*, VecDotKernel>> isas = {{"portable", {DType::i8, vec_dot_portable(DType::i8), nullptr, nullptr}}};
  if (use_avx2_kernels()) isas.push_back({"avx2", vec_dot_kernel(DType::i8)});
  for (int64_t n : {1, 7, 31, 32, 33, 100, 1000, 4099}) {
    std::vector<uint8_t> w = random_weights(rng, DType::i8, 2, n), a = random_weights(rng, DType::i8, 4, n);
    for (uint8_t& code : a) code = code == 0x80 ? 0x81 : code;  // activations stay within ±127
    if (n >= 32) std::fill(w.begin(), w.begin() + 32, uint8_t(int8_t(-127))), std::fill(a.begin(), a.begin() + 32, uint8_t(int8_t(-127)));
    if (n >= 64) std::fill(w.begin() + 32, w.begin() + 64, uint8_t(int8_t(-128))), std::fill(a.begin() + 32, a.begin() + 64, uint8_t(int8_t(-127)));
    const auto* wi = reinterpret_cast<const int8_t*>(w.data());
    const auto* ai = reinterpret_cast<const int8_t*>(a.data());
    float expected[2][4];
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 4; ++j) {
        int64_t sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += int64_t(wi[r * n + i]) * ai[j * n + i];
        expected[r][j] = float(sum);
      }
    for (const auto& [name, k] : isas) {
      EXPECT_EQ(k.dot(n, wi, ai), expected[0][0]) << name << " n " << n;
      if (k.dot4) {
        float out[4];
        k.dot4(n, wi, ai, n, out);
        for (int j = 0; j < 4; ++j) EXPECT_EQ(out[j], expected[0][j]) << name << " dot4 n " << n;
      }
      if (k.dot2x4) {
        float out[8];
        k.dot2x4(n, wi, n, ai, n, out);
        for (int r = 0; r < 2; ++r)
          for (int j = 0; j < 4; ++j) EXPECT_EQ(out[r * 4 + j], expected[r][j]) << name << " dot2x4 n " << n;
      }
    }
  }
}

// The per-token int8 rows: the fast path writes the reference's codes and scale, off-vector lengths too.
TEST(W8A8, ActivationRowsEqualReferenceBitForBit) {
  std::mt19937 rng(12);
  for (int64_t n : {1, 9, 32, 77, 4096}) {
    std::vector<float> x = random_floats(rng, n, 2.0f);
    if (n > 8) x[3] = 127.0f, x[5] = 0.5f;  // amax 127: scale 1, so 0.5 must round to even
    std::vector<int8_t> fast(static_cast<size_t>(n)), reference(static_cast<size_t>(n));
    const float fast_scale = quantize_int8_activations(x.data(), fast.data(), n);
    const float reference_scale = quantize_int8_row(x.data(), n, reference.data());
    EXPECT_EQ(fast_scale, reference_scale) << n;
    EXPECT_EQ(fast, reference) << n;
  }
  // A static (calibrated) scale: values past it clamp to +-127, as the reference clamps.
  std::vector<float> x = random_floats(rng, 77, 2.0f);
  std::vector<int8_t> fast(77), reference(77);
  EXPECT_EQ(quantize_int8_activations(x.data(), fast.data(), 77, 0.01f), 0.01f);
  quantize_int8_row_static(x.data(), 77, 0.01f, reference.data());
  EXPECT_EQ(fast, reference);
  EXPECT_EQ(*std::max_element(fast.begin(), fast.end()), 127);
  EXPECT_EQ(*std::min_element(fast.begin(), fast.end()), -127);
  std::vector<float> zeros(40, 0.0f);
  std::vector<int8_t> q(40, 1);
  EXPECT_EQ(quantize_int8_activations(zeros.data(), q.data(), 40), 0.0f);
  EXPECT_EQ(q, std::vector<int8_t>(40, 0));
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, int>> {};

// The part of a Q8_1 matmul's error that the format itself makes: each
// activation block's d * sum(q) is stored in f16 (as in llama.cpp) and meets the
// weight block's min m (|m| <= the row's largest |w|), so the output moves by
// up to 2^-11 * max|w| * sum over blocks |d * sum(q)|, and |d q_i| <= |x_i| + d / 2
// with d <= max|x| / 127.
double q8_1_sum_rounding(const std::vector<uint8_t>& w_rows, DType type, int64_t n_cols, int64_t row, const float* x) {
  std::vector<float> w(static_cast<size_t>(n_cols));
  dequantize_row(type, w_rows.data() + row * row_bytes(type, n_cols), w.data(), n_cols);
  double max_w = 0.0, sum_x = 0.0, max_x = 0.0;
  for (int64_t i = 0; i < n_cols; ++i) {
    max_w = std::max(max_w, std::fabs(double(w[size_t(i)])));
    sum_x += std::fabs(double(x[i]));
    max_x = std::max(max_x, std::fabs(double(x[i])));
  }
  return std::ldexp(1.0, -11) * max_w * (sum_x + double(n_cols) * max_x / 254.0);
}

// y = x · Wᵀ against the reference, with guard values around the output.
// w_rows: the weights in the row layout (w may be interleaved).
void expect_matches_reference(ThreadPool& pool, MatmulScratch& scratch, const WeightMatrix& w, const std::vector<uint8_t>& w_rows,
                              const std::vector<float>& x, int64_t n_tokens) {
  const int64_t n_out = w.n_rows * n_tokens;
  std::vector<float> y(size_t(n_out + 32), k_guard), expected(static_cast<size_t>(n_out));
  matmul(pool, w, x.data(), n_tokens, y.data() + 16, scratch);
  matmul_reference(w, x.data(), n_tokens, expected.data());
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(y[size_t(i)], k_guard) << "write before the output";
    ASSERT_EQ(y[size_t(16 + n_out + i)], k_guard) << "write past the output";
  }
  if (w.type == DType::i8) {  // exact integer sums, then the same float operations as the reference: the same bits
    for (int64_t i = 0; i < n_out; ++i) {
      ASSERT_EQ(y[size_t(16 + i)], expected[size_t(i)]) << (w.repacked ? "interleaved" : "rows") << " rows " << w.n_rows
                                                        << " cols " << w.n_cols << " tokens " << n_tokens << " at " << i
                                                        << (w.row_zero_points ? " asymmetric" : "") << (w.input_scale > 0 ? " static" : "");
    }
    return;
  }
  const bool q8_1 = activation_type_for(w.type) == DType::q8_1;
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t t = i / w.n_rows, r = i % w.n_rows;
    const double format = q8_1 ? q8_1_sum_rounding(w_rows, w.type, w.n_cols, r, x.data() + t * w.n_cols) : 0.0;
    EXPECT_NEAR(y[size_t(16 + i)], expected[size_t(i)], format + 1e-4 * std::sqrt(double(w.n_cols)) + 1e-4 * std::fabs(expected[size_t(i)]))
        << dtype_name(w.type) << (w.repacked ? " interleaved" : "") << " rows " << w.n_rows << " tokens " << n_tokens
        << " at " << i;
  }
}

TEST_P(MatmulTest, MatchesReferenceWithGuards) {
  const auto [type, n_threads] = GetParam();
  ThreadPool pool(n_threads);
  MatmulScratch scratch;
  std::mt19937 rng(7);
  std::vector<int64_t> cols = {column_sizes(type)[1], column_sizes(type).back()};
  if (type == DType::i8) cols.push_back(1024);  // whole group blocks: the interleaved layout
  for (int64_t n_cols : cols) {
    for (int64_t n_rows : {1, 5, 7, 16, 37, 38, 40, 48}) {  // 40: whole 8-row groups; 16 and 48: whole 16-row ones
      for (int64_t n_tokens : {1, 3, 33}) {
        const std::vector<uint8_t> w_data = random_weights(rng, type, n_rows, n_cols);
        const std::vector<float> x = random_floats(rng, n_tokens * n_cols);
        for (const WeightMatrix& w : layouts(type, n_rows, n_cols, w_data)) expect_matches_reference(pool, scratch, w, w_data, x, n_tokens);
      }
    }
  }
}

// Each token's outputs from the n_tokens multiplied together equal, bit for
// bit, the token's outputs multiplied alone.
void expect_independent_of_batch(ThreadPool& pool, MatmulScratch& scratch, const WeightMatrix& w, const std::vector<float>& x,
                                 int64_t n_tokens) {
  std::vector<float> together(size_t(w.n_rows * n_tokens)), alone(static_cast<size_t>(w.n_rows));
  matmul(pool, w, x.data(), n_tokens, together.data(), scratch);
  for (int64_t t = 0; t < n_tokens; ++t) {
    matmul(pool, w, x.data() + t * w.n_cols, 1, alone.data(), scratch);
    for (int64_t r = 0; r < w.n_rows; ++r) {
      ASSERT_EQ(alone[size_t(r)], together[size_t(t * w.n_rows + r)])
          << dtype_name(w.type) << (w.repacked ? " interleaved" : "") << " rows " << w.n_rows << " cols " << w.n_cols
          << " tokens " << n_tokens << ": token " << t << " row " << r;
    }
  }
}

// A token's outputs are bit-identical whether it is multiplied alone or with
// others (the tiled kernels add in the same order as the single dot).
TEST_P(MatmulTest, ResultsDoNotDependOnTheBatch) {
  const auto [type, n_threads] = GetParam();
  ThreadPool pool(n_threads);
  MatmulScratch scratch;
  std::mt19937 rng(8);
  std::vector<int64_t> cols = {column_sizes(type)[1], column_sizes(type).back()};
  if (type == DType::i8) cols.push_back(1024);
  for (int64_t n_cols : cols) {
    const int64_t n_rows = 40, n_tokens = 11;
    const std::vector<uint8_t> w_data = random_weights(rng, type, n_rows, n_cols);
    const std::vector<float> x = random_floats(rng, n_tokens * n_cols);
    for (const WeightMatrix& w : layouts(type, n_rows, n_cols, w_data)) expect_independent_of_batch(pool, scratch, w, x, n_tokens);
  }
}

// The float tiles (kernels/float_rows.h) at every tile shape: rows 1-9 (whole
// tiles of two and four rows and each remainder), the decode path's 2-6
// tokens, tokens past it with every remainder of three and six tokens and of
// the 30-token block, rows that end on a whole 16 columns, on one more 8, and
// off both, and F16 and BF16 rows of 4 KiB (whose token rows are padded). Each output against the
// reference, and bit for bit against its token multiplied alone.
TEST(FloatTiles, EveryTileShapeMatchesTheReferenceAndDecode) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::mt19937 rng(12);
  for (DType type : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n_cols : {13, 32, 45, 2048}) {
      for (int64_t n_rows = 1; n_rows <= 9; ++n_rows) {
        for (int64_t n_tokens : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 34}) {
          const std::vector<uint8_t> w_data = random_weights(rng, type, n_rows, n_cols);
          const std::vector<float> x = random_floats(rng, n_tokens * n_cols);
          const WeightMatrix w{type, n_rows, n_cols, w_data.data()};
          expect_matches_reference(pool, scratch, w, w_data, x, n_tokens);
          expect_independent_of_batch(pool, scratch, w, x, n_tokens);
        }
      }
    }
  }
}

// BF16 weights with subnormal elements, which vdpbf16ps reads as zero and the
// FMA tiles do not (rows of them alone sum to a nonzero only there): a
// token's outputs are still the same alone as in a batch (decode and prefill
// run one kernel), and near the reference.
TEST(FloatTiles, Bf16SubnormalsGiveTheSameBitsInDecodeAndPrefill) {
  ThreadPool pool(2);
  MatmulScratch scratch;
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> mantissa(1, 0x7f), pick(0, 3);
  for (int64_t n_cols : {45, 64, 2048}) {
    const int64_t n_rows = 9, n_tokens = 11;
    std::vector<uint8_t> w_data = random_weights(rng, DType::bf16, n_rows, n_cols);
    auto* w_bits = reinterpret_cast<uint16_t*>(w_data.data());
    for (int64_t i = 0; i < n_rows * n_cols; ++i) {  // rows 0-2 wholly subnormal (their sums too), the rest a quarter
      if (i < 3 * n_cols || pick(rng) == 0) w_bits[i] = uint16_t((pick(rng) & 1) << 15 | mantissa(rng));
    }
    const std::vector<float> x = random_floats(rng, n_tokens * n_cols);
    const WeightMatrix w{DType::bf16, n_rows, n_cols, w_data.data()};
    expect_matches_reference(pool, scratch, w, w_data, x, n_tokens);
    expect_independent_of_batch(pool, scratch, w, x, n_tokens);
  }
}

// The AVX-512 tiles add in the AVX2 tiles' order: F32, F16 and BF16 with the
// same FMAs on twice the width, BF16's vdpbf16ps (where the CPU has it) in
// the FMA tiles' pair order (random weights: normal numbers): the same bits,
// tile shape by tile shape (each remainder of rows and tokens), decode and
// prefill (F16 prefill: tokens converted in parts of 1,024 columns for up to
// 64 rows, so 1,100 and 2,048 columns and 70 rows take several).
TEST(FloatTiles, Avx512TilesGiveTheAvx2TilesBits) {
  if (!use_vnni_kernels()) GTEST_SKIP() << "the CPU lacks AVX-512 VNNI (or DSINFER_ISA turns it off)";
  std::mt19937 rng(14);
  for (int kernel = 0; kernel < 4; ++kernel) {
    const DType type = kernel < 3 ? std::array{DType::f32, DType::f16, DType::bf16}[size_t(kernel)] : DType::bf16;
    if (kernel == 3 && !cpu_features().avx512bf16) continue;  // no vdpbf16ps tiles to compare
    const FloatRowsFn wide = kernel == 3 ? float_rows_avx512_bf16_dot() : float_rows_avx512(type), narrow = float_rows_avx2(type);
    for (int64_t n_cols : {13, 16, 31, 32, 45, 48, 1100, 2048}) {
      for (const auto& [n_rows, n_tokens] : {std::pair<int64_t, int64_t>{9, 1}, {10, 2}, {11, 3}, {9, 6}, {10, 7}, {11, 11}, {70, 13}}) {
        const int64_t stride = row_bytes(type, n_cols);
        const std::vector<uint8_t> w = random_weights(rng, type, n_rows, n_cols);
        const std::vector<uint8_t> x = random_weights(rng, type, n_tokens, n_cols);
        std::vector<float> y_wide(size_t(n_rows * n_tokens)), y_narrow(y_wide.size());
        wide(w.data(), stride, n_cols, 0, n_rows, x.data(), stride, n_tokens, y_wide.data(), n_rows);
        narrow(w.data(), stride, n_cols, 0, n_rows, x.data(), stride, n_tokens, y_narrow.data(), n_rows);
        for (size_t i = 0; i < y_wide.size(); ++i) {
          ASSERT_EQ(fp32_to_bits(y_wide[i]), fp32_to_bits(y_narrow[i]))
              << dtype_name(type) << (kernel == 3 ? " (vdpbf16ps)" : "") << " cols " << n_cols << " tokens " << n_tokens << " at " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, VecDotTest, ::testing::ValuesIn(k_weight_types),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Combine(::testing::ValuesIn(k_matmul_types), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_threads" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(RmsNorm, MatchesFormula) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 7, 64, 1000}) {
    const std::vector<float> x = random_floats(rng, 3 * n), w = random_floats(rng, n);
    std::vector<float> y(size_t(3 * n));
    rms_norm(x.data(), w.data(), 1e-5f, 3, n, y.data());
    for (int64_t r = 0; r < 3; ++r) {
      double ss = 0.0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
      const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(y[size_t(r * n + i)], x[size_t(r * n + i)] * scale * w[size_t(i)], 1e-5 * (1 + std::fabs(y[size_t(r * n + i)])));
      }
    }
  }
}

TEST(Softmax, SumsToOneAndKeepsOrder) {
  std::mt19937 rng(2);
  std::vector<float> x = random_floats(rng, 257, 10.0f);
  const std::vector<float> original = x;
  softmax(x.data(), int64_t(x.size()));
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sum += x[i];
    EXPECT_NEAR(x[i], std::exp(double(original[i]) - *std::max_element(original.begin(), original.end())) /
                          [&] {
                            double s = 0.0;
                            const float m = *std::max_element(original.begin(), original.end());
                            for (float v : original) s += std::exp(double(v) - m);
                            return s;
                          }(),
                1e-6);
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

// Every loop silu_mul chooses between, every tail length, and gates out to
// +-300 (past where e^g leaves float's normal range, at -87). The bound:
// the vector exponential's 1e-6 relative (the softmax test's) plus a few
// roundings of 6e-8 each; below g = -87.3 both loops give 0 where the formula
// gives under 1e-35.
TEST(SiluMul, EveryLoopMatchesFormula) {
  std::vector<std::pair<const char*, void (*)(float*, const float*, int64_t)>> loops = {{"portable", silu_mul_portable}};
  if (use_avx2_kernels()) loops.push_back({"avx2", silu_mul_avx2});
  std::mt19937 rng(3);
  for (auto [name, loop] : loops) {
    for (int64_t n : {1, 7, 8, 9, 99, 1000}) {
      std::vector<float> gate = random_floats(rng, size_t(n), n == 1000 ? 100.0f : 4.0f);
      const std::vector<float> up = random_floats(rng, size_t(n)), original = gate;
      loop(gate.data(), up.data(), n);
      for (size_t i = 0; i < gate.size(); ++i) {
        const double expected = original[i] / (1.0 + std::exp(-double(original[i]))) * up[i];
        EXPECT_NEAR(gate[i], expected, 2e-6 * std::abs(expected) + 1e-35) << name << " n " << n << " g " << original[i];
      }
    }
  }
}

// An element's bits do not depend on the range a thread was given (a row
// splits differently in decode and prefill): the masked tail takes the same
// lanes as the whole registers.
TEST(SiluMul, ElementsGiveTheSameBitsInAnyRange) {
  std::mt19937 rng(5);
  const std::vector<float> gate = random_floats(rng, 100, 8.0f), up = random_floats(rng, 100);
  std::vector<float> whole = gate;
  silu_mul(whole.data(), up.data(), 100);
  for (int64_t begin : {1, 3, 5, 13}) {
    for (int64_t end : {int64_t(100), int64_t(96) - begin % 7}) {
      std::vector<float> part = gate;
      silu_mul(part.data() + begin, up.data() + begin, end - begin);
      ASSERT_EQ(0, std::memcmp(part.data() + begin, whole.data() + begin, size_t(end - begin) * sizeof(float))) << begin << ".." << end;
    }
  }
}

// Rotation of pair (a, b) by angle pos * base^(-2i/n_rot), written out directly.
void rope_naive(const RopeParams& p, float* v, int pos, double freq_scale) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const double theta = pos * freq_scale * std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
    const int a = p.layout == RopeLayout::normal ? 2 * i : i;
    const int b = p.layout == RopeLayout::normal ? 2 * i + 1 : i + p.n_rot / 2;
    const double x0 = v[a], x1 = v[b];
    v[a] = float(x0 * std::cos(theta) - x1 * std::sin(theta));
    v[b] = float(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

TEST(Rope, NormalAndNeoxLinearScalingMatchFormula) {
  std::mt19937 rng(4);
  for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
    for (auto [scaling, factor] : {std::pair{RopeScaling::none, 1.0f}, std::pair{RopeScaling::linear, 4.0f}}) {
      RopeParams p;
      p.layout = layout;
      p.n_rot = 32;
      p.freq_base = 10000.0f;
      p.scaling = scaling;
      p.scaling_factor = factor;
      const int64_t head_dim = 40, n_heads = 3;  // rotates only the first n_rot dims
      const std::vector<int32_t> positions = {0, 1, 17, 500};
      std::vector<float> x = random_floats(rng, int64_t(positions.size()) * n_heads * head_dim);
      std::vector<float> expected = x;
      rope(p, x.data(), int64_t(positions.size()), n_heads, head_dim, positions.data(), 501);
      for (size_t t = 0; t < positions.size(); ++t) {
        for (int64_t h = 0; h < n_heads; ++h) rope_naive(p, expected.data() + (t * n_heads + h) * head_dim, positions[t], 1.0 / factor);
      }
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], expected[i], 2e-4) << i;
    }
  }
}

TEST(Rope, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  RopeParams p;
  p.layout = RopeLayout::neox;
  p.n_rot = 64;
  p.scaling = RopeScaling::yarn;
  p.scaling_factor = 4.0f;
  p.n_ctx_orig = 4096;
  p.yarn_ext_factor = 1.0f;
  const float mscale = 1.0f + 0.1f * std::log(4.0f);
  const int32_t pos = 1000;
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;   // highest frequency pair (0, 32): extrapolated, theta = pos
  x[31] = 1.0f;  // lowest frequency pair (31, 63): interpolated, theta = pos / 4 * base^(-62/64)
  rope(p, x.data(), 1, 1, 64, &pos, pos + 1);
  EXPECT_NEAR(x[0], std::cos(float(pos)) * mscale, 1e-3);
  const double low_theta = pos / 4.0 * std::pow(10000.0, -62.0 / 64.0);
  EXPECT_NEAR(x[31], std::cos(low_theta) * mscale, 1e-3);
}

// (KV type, threads, latent): latent caches hold one row per token whose
// first v_dim elements are also the value, as multi-head latent attention.
class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<DType, int, bool>> {};

TEST_P(PagedAttentionTest, ScatteredPagesMatchReference) {
  const auto [dtype, n_threads, latent] = GetParam();
  ThreadPool pool(n_threads);
  std::mt19937 rng(5);
  // q8_0 stores whole blocks of 32 per head. Twenty heads over two KV heads:
  // a group of ten spans two passes of at most eight heads.
  const int64_t page_tokens = 4, n_pages = 24;
  const int64_t head_dim = dtype == DType::q8_0 ? 64 : 24, v_dim = latent ? head_dim - (dtype == DType::q8_0 ? 32 : 8) : 0;
  const int64_t n_head = latent ? 9 : 20, n_head_kv = latent ? 1 : 2;
  const int64_t kv_dim = n_head_kv * head_dim;
  std::vector<uint8_t> k(size_t(n_pages * page_tokens * row_bytes(dtype, kv_dim))), v(k.size());
  const KvLayerView kv{dtype, k.data(), latent ? nullptr : v.data(), page_tokens, kv_dim, n_head_kv};
  // Two sequences with pages scattered over the pool, of 37 tokens (more than
  // one tile of positions) and 6.
  std::vector<int32_t> table_a = {7, 2, 19, 3, 4, 5, 6, 8, 9, 10}, table_b = {0, 13};
  const BlockTableView tables[] = {{table_a.data(), 10}, {table_b.data(), 2}};
  std::vector<int32_t> positions, seqs;
  for (int p = 0; p < 37; ++p) { positions.push_back(p); seqs.push_back(0); }
  for (int p = 0; p < 6; ++p) { positions.push_back(p); seqs.push_back(1); }
  const int64_t n = int64_t(positions.size());
  const std::vector<float> keys = random_floats(rng, n * kv_dim), values = random_floats(rng, n * kv_dim);
  kv_write(kv, keys.data(), values.data(), n, positions.data(), seqs.data(), tables);
  const std::vector<float> q = random_floats(rng, n * n_head * head_dim);
  const AttentionShape shape{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim};
  std::vector<float> out(size_t(n * n_head * shape.value_dim())), expected(out.size());
  AttentionScratch scratch;
  paged_attention(pool, kv, shape, q.data(), n, positions.data(), seqs.data(), tables, out.data(), scratch);
  paged_attention_reference(kv, shape, q.data(), n, positions.data(), seqs.data(), tables, expected.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-4) << i;

  // A token's output does not depend on the other tokens of the step.
  std::vector<float> alone(size_t(n_head * shape.value_dim()));
  for (int64_t t : {int64_t(0), int64_t(20), n - 1}) {
    paged_attention(pool, kv, shape, q.data() + t * n_head * head_dim, 1, positions.data() + t, seqs.data() + t, tables,
                    alone.data(), scratch);
    EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + t * n_head * shape.value_dim(), alone.size() * sizeof(float))) << t;
  }
}

// Contexts longer than one key range (512 positions) are split into ranges
// that threads take separately; the merged result matches the reference,
// does not depend on the thread count, the step's other tokens, or on how
// many tokens' range states are held at once.
TEST_P(PagedAttentionTest, LongContextsSplitIntoKeyRangesMatchReference) {
  const auto [dtype, n_threads, latent] = GetParam();
  ThreadPool pool(n_threads), one_thread(1);
  std::mt19937 rng(8);
  // Six heads of one KV head: a single item per token, so only the key
  // ranges give a second thread work.
  const int64_t page_tokens = 16, head_dim = dtype == DType::q8_0 ? 64 : 24;
  const int64_t v_dim = latent ? head_dim - (dtype == DType::q8_0 ? 32 : 8) : 0, n_head = 6, n_head_kv = 1;
  const int64_t long_len = 1300, short_len = 40, n_pages = (long_len + short_len) / page_tokens + 2;
  std::vector<uint8_t> k(size_t(n_pages * page_tokens * row_bytes(dtype, head_dim))), v(k.size());
  const KvLayerView kv{dtype, k.data(), latent ? nullptr : v.data(), page_tokens, head_dim, n_head_kv};
  // Pages in reverse order for the long sequence, the short one's after them.
  std::vector<int32_t> table_a, table_b;
  for (int32_t p = 0; p < (long_len + page_tokens - 1) / page_tokens; ++p) table_a.insert(table_a.begin(), p);
  for (int32_t p = 0; p < 3; ++p) table_b.push_back(int32_t(table_a.size()) + p);
  const BlockTableView tables[] = {{table_a.data(), int32_t(table_a.size())}, {table_b.data(), int32_t(table_b.size())}};
  std::vector<int32_t> fill_positions, fill_seqs;
  for (int p = 0; p < long_len; ++p) { fill_positions.push_back(p); fill_seqs.push_back(0); }
  for (int p = 0; p < short_len; ++p) { fill_positions.push_back(p); fill_seqs.push_back(1); }
  const int64_t n_fill = int64_t(fill_positions.size());
  // Scores spread wide enough that the ranges' maxima differ a lot.
  const std::vector<float> keys = random_floats(rng, n_fill * head_dim, 4.0f), values = random_floats(rng, n_fill * head_dim);
  kv_write(kv, keys.data(), values.data(), n_fill, fill_positions.data(), fill_seqs.data(), tables);
  // Tokens at the ranges' edges (consecutive ones share passes over the
  // cache, across a range's edge too), a run of six (two blocks), and one of
  // the short sequence.
  const std::vector<int32_t> positions = {510, 511, 512, 1023, 1024, 1290, 1291, 1292, 1293, 1294, 1295, 39};
  const std::vector<int32_t> seqs = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const int64_t n = int64_t(positions.size());
  const std::vector<float> q = random_floats(rng, n * n_head * head_dim);
  const AttentionShape shape{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim)), v_dim};
  const int64_t out_row = n_head * shape.value_dim();
  std::vector<float> out(size_t(n * out_row)), expected(out.size()), serial(out.size()), waves(out.size());
  AttentionScratch scratch, serial_scratch;
  paged_attention(pool, kv, shape, q.data(), n, positions.data(), seqs.data(), tables, out.data(), scratch);
  paged_attention_reference(kv, shape, q.data(), n, positions.data(), seqs.data(), tables, expected.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-4) << i;

  paged_attention(one_thread, kv, shape, q.data(), n, positions.data(), seqs.data(), tables, serial.data(), serial_scratch);
  EXPECT_EQ(0, std::memcmp(serial.data(), out.data(), out.size() * sizeof(float)));
  AttentionScratch small;
  small.partial_floats_limit = 1;  // one query block's ranges at a time
  paged_attention(pool, kv, shape, q.data(), n, positions.data(), seqs.data(), tables, waves.data(), small);
  EXPECT_EQ(0, std::memcmp(waves.data(), out.data(), out.size() * sizeof(float)));
  std::vector<float> alone(static_cast<size_t>(out_row));
  for (int64_t t = 0; t < n; ++t) {
    paged_attention(pool, kv, shape, q.data() + t * n_head * head_dim, 1, positions.data() + t, seqs.data() + t, tables,
                    alone.data(), scratch);
    EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + t * out_row, alone.size() * sizeof(float))) << t;
  }
}

TEST(KvWrite, StoresEachHeadInItsPageAtTheDocumentedPlace) {
  std::mt19937 rng(6);
  for (DType dtype : {DType::f32, DType::f16, DType::q8_0}) {
    const int64_t page_tokens = 3, head_dim = 32, n_kv_heads = 3, n_pages = 5, kv_dim = n_kv_heads * head_dim;
    const int64_t head_bytes = row_bytes(dtype, head_dim);
    std::vector<uint8_t> k(size_t(n_pages * page_tokens * row_bytes(dtype, kv_dim))), v(k.size());
    const KvLayerView kv{dtype, k.data(), v.data(), page_tokens, kv_dim, n_kv_heads};
    const std::vector<int32_t> table = {4, 1, 3};
    const BlockTableView tables[] = {{table.data(), 3}};
    const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5, 6, 7, 8}, seqs(positions.size(), 0);
    const int64_t n = int64_t(positions.size());
    const std::vector<float> keys = random_floats(rng, n * kv_dim), values = random_floats(rng, n * kv_dim);
    kv_write(kv, keys.data(), values.data(), n, positions.data(), seqs.data(), tables);
    std::vector<uint8_t> expected(static_cast<size_t>(head_bytes));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < n_kv_heads; ++h) {
        // [page][kv head][slot][head_dim]
        const int64_t at = ((table[size_t(t / page_tokens)] * n_kv_heads + h) * page_tokens + t % page_tokens) * head_bytes;
        quantize_row(dtype, keys.data() + t * kv_dim + h * head_dim, expected.data(), head_dim);
        EXPECT_EQ(0, std::memcmp(expected.data(), k.data() + at, size_t(head_bytes))) << dtype_name(dtype) << " " << t << " " << h;
        quantize_row(dtype, values.data() + t * kv_dim + h * head_dim, expected.data(), head_dim);
        EXPECT_EQ(0, std::memcmp(expected.data(), v.data() + at, size_t(head_bytes))) << dtype_name(dtype) << " " << t << " " << h;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, PagedAttentionTest,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::q8_0), ::testing::Values(1, 2),
                                            ::testing::Bool()));

}  // namespace
}  // namespace ds

namespace ds {
namespace {

std::vector<AttentionTileKernels> attention_tile_isas() {
  std::vector<AttentionTileKernels> isas = {attention_tile_kernels_portable()};
  if (use_avx2_kernels()) isas.push_back(attention_tile_kernels_avx2());
  if (use_vnni_kernels()) isas.push_back(attention_tile_kernels_avx512());
  return isas;
}

// The AVX-512 scores, weighted sums and softmax give the AVX2 ones' bits at
// every tile shape: queries 1-3 (pairs of queries, an odd one beside a zero
// one) and 4-35 (keys transposed: tiles of three queries and each remainder),
// keys 1-33 (tiles of four and of 16 keys, every remainder), dims on and off
// the 8- and 16-element chunks; softmax rows on and off 8 and 16 elements.
TEST(AttentionTiles, Avx512TilesGiveTheAvx2TilesBits) {
  if (!use_vnni_kernels()) GTEST_SKIP() << "the CPU lacks AVX-512 VNNI (or DSINFER_ISA turns it off)";
  const AttentionTileKernels wide = attention_tile_kernels_avx512(), narrow = attention_tile_kernels_avx2();
  std::mt19937 rng(15);
  for (int64_t dim : {7, 8, 24, 64, 72, 128, 192, 576}) {
    for (int64_t n_q : {1, 2, 3, 4, 5, 7, 8, 9, 11, 32, 35}) {
      for (int64_t n_k : {1, 3, 4, 5, 11, 16, 17, 33}) {
        const std::vector<float> q = random_floats(rng, n_q * dim), k = random_floats(rng, n_k * dim);
        const int64_t stride = n_k + 2;
        std::vector<float> s_wide(size_t(n_q * stride), k_guard), s_narrow = s_wide;
        wide.scores(dim, q.data(), n_q, k.data(), n_k, 0.125f, s_wide.data(), stride);
        narrow.scores(dim, q.data(), n_q, k.data(), n_k, 0.125f, s_narrow.data(), stride);
        for (size_t i = 0; i < s_wide.size(); ++i) {
          ASSERT_EQ(fp32_to_bits(s_wide[i]), fp32_to_bits(s_narrow[i])) << "scores dim " << dim << " " << n_q << "x" << n_k << " at " << i;
        }
        const std::vector<float> p = random_floats(rng, n_q * stride), out0 = random_floats(rng, n_q * dim);
        std::vector<float> o_wide = out0, o_narrow = out0;
        wide.weighted_sum(dim, p.data(), stride, n_q, k.data(), n_k, o_wide.data());
        narrow.weighted_sum(dim, p.data(), stride, n_q, k.data(), n_k, o_narrow.data());
        for (size_t i = 0; i < o_wide.size(); ++i) {
          ASSERT_EQ(fp32_to_bits(o_wide[i]), fp32_to_bits(o_narrow[i])) << "weighted sum dim " << dim << " " << n_q << "x" << n_k << " at " << i;
        }
      }
    }
  }
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 100, 512}) {
    for (float spread : {0.5f, 200.0f}) {
      std::vector<float> x_wide = random_floats(rng, n, spread), x_narrow = x_wide;
      // A running state (as from an earlier tile) and a fresh one.
      for (float start_max : {-INFINITY, 0.25f}) {
        float max_wide = start_max, sum_wide = 3.0f, max_narrow = start_max, sum_narrow = 3.0f;
        const float c_wide = wide.online_softmax(x_wide.data(), n, &max_wide, &sum_wide);
        const float c_narrow = narrow.online_softmax(x_narrow.data(), n, &max_narrow, &sum_narrow);
        ASSERT_EQ(fp32_to_bits(c_wide), fp32_to_bits(c_narrow)) << "softmax correction " << n;
        ASSERT_EQ(fp32_to_bits(max_wide), fp32_to_bits(max_narrow)) << "softmax max " << n;
        ASSERT_EQ(fp32_to_bits(sum_wide), fp32_to_bits(sum_narrow)) << "softmax sum " << n << " spread " << spread;
        ASSERT_EQ(0, std::memcmp(x_wide.data(), x_narrow.data(), size_t(n) * sizeof(float))) << "softmax weights " << n;
      }
    }
  }
}

TEST(AttentionTiles, ScoresMatchFormulaAndDoNotDependOnTheTile) {
  std::mt19937 rng(11);
  for (const AttentionTileKernels& isa : attention_tile_isas()) {
    for (int64_t dim : {1, 7, 8, 24, 100, 576}) {
      const int64_t n_q = 9, n_k = 5, stride = n_k + 3;
      const std::vector<float> q = random_floats(rng, n_q * dim), k = random_floats(rng, n_k * dim);
      std::vector<float> scores(size_t(n_q * stride), k_guard);
      isa.scores(dim, q.data(), n_q, k.data(), n_k, 0.5f, scores.data(), stride);
      for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t j = 0; j < stride; ++j) {
          const float got = scores[size_t(i * stride + j)];
          if (j >= n_k) {
            EXPECT_EQ(got, k_guard);
            continue;
          }
          double expected = 0.0;
          for (int64_t d = 0; d < dim; ++d) expected += double(q[size_t(i * dim + d)]) * k[size_t(j * dim + d)];
          EXPECT_NEAR(got, 0.5 * expected, 1e-5 * std::sqrt(double(dim))) << dim << " " << i << " " << j;
          float single = 0.0f;
          isa.scores(dim, q.data() + i * dim, 1, k.data() + j * dim, 1, 0.5f, &single, 1);
          EXPECT_EQ(single, got) << "pair (" << i << ", " << j << ") differs when computed alone";
          if (isa.scores != attention_tile_kernels_portable().scores && dim % 8 == 0) {
            // The AVX2 order, exactly: eight lanes of fused multiply-adds over
            // the chunks, then ((0+4) + (2+6)) + ((1+5) + (3+7)).
            float lane[8] = {};
            for (int64_t d = 0; d < dim; ++d) lane[d % 8] = std::fma(q[size_t(i * dim + d)], k[size_t(j * dim + d)], lane[d % 8]);
            const float sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
            EXPECT_EQ(got, sum * 0.5f) << dim << " " << i << " " << j;
          }
        }
      }
    }
  }
}

TEST(AttentionTiles, WeightedSumMatchesFormulaAndSplitsByPosition) {
  std::mt19937 rng(12);
  for (const AttentionTileKernels& isa : attention_tile_isas()) {
    for (int64_t dim : {1, 7, 8, 16, 24, 100, 512}) {
      const int64_t n_q = 6, n_v = 7, p_stride = 9;
      const std::vector<float> p = random_floats(rng, n_q * p_stride), v = random_floats(rng, n_v * dim);
      const std::vector<float> out0 = random_floats(rng, n_q * dim);
      std::vector<float> out = out0;
      isa.weighted_sum(dim, p.data(), p_stride, n_q, v.data(), n_v, out.data());
      // The same positions in two calls, and each row alone.
      std::vector<float> split = out0;
      isa.weighted_sum(dim, p.data(), p_stride, n_q, v.data(), 3, split.data());
      isa.weighted_sum(dim, p.data() + 3, p_stride, n_q, v.data() + 3 * dim, n_v - 3, split.data());
      for (int64_t i = 0; i < n_q; ++i) {
        std::vector<float> row(out0.begin() + i * dim, out0.begin() + (i + 1) * dim);
        isa.weighted_sum(dim, p.data() + i * p_stride, p_stride, 1, v.data(), n_v, row.data());
        for (int64_t d = 0; d < dim; ++d) {
          double expected = out0[size_t(i * dim + d)];
          for (int64_t j = 0; j < n_v; ++j) expected += double(p[size_t(i * p_stride + j)]) * v[size_t(j * dim + d)];
          const size_t at = size_t(i * dim + d);
          EXPECT_NEAR(out[at], expected, 1e-5) << dim << " " << i << " " << d;
          EXPECT_EQ(split[at], out[at]);
          EXPECT_EQ(row[size_t(d)], out[at]);
        }
      }
    }
  }
}

TEST(AttentionTiles, OnlineSoftmaxOfAWholeKeyRangeMatchesFormula) {
  std::mt19937 rng(14);
  for (const AttentionTileKernels& isa : attention_tile_isas()) {
    for (int64_t n : {1, 7, 8, 9, 100, 512}) {
      // Spreads up to 200 put some weights far below FLT_MIN (they must come
      // out as 0, not garbage).
      for (float spread : {0.5f, 10.0f, 200.0f}) {
        std::vector<float> x = random_floats(rng, n, spread);
        const std::vector<float> in = x;
        float max = -INFINITY, sum = 0.0f;
        EXPECT_EQ(isa.online_softmax(x.data(), n, &max, &sum), 0.0f);
        // Exponents of the f32 differences x - max, as both kernels take them
        // (at x - max = -35 the difference's own rounding is 2e-6 relative).
        EXPECT_EQ(max, *std::max_element(in.begin(), in.end()));
        double expected_sum = 0.0;
        for (float v : in) expected_sum += std::exp(double(v - max));
        // Each term's 1e-6, plus the f32 running sum's n roundings.
        EXPECT_NEAR(sum, expected_sum, (1e-6 + double(n) * 0x1p-24) * expected_sum) << n << " " << spread;
        for (int64_t i = 0; i < n; ++i) {
          const double expected = std::exp(double(in[size_t(i)] - max));
          EXPECT_NEAR(x[size_t(i)], expected, 1e-6 * expected + 1e-37) << n << " " << spread << " " << i;
        }
      }
    }
  }
}

// Cached rows to f32 against dequantize_row, and the queries' round trip
// through the cache's type against quantize_row then dequantize_row, bit for
// bit: random values, and for F16 the edges F16C and the portable
// conversions must agree on (subnormal halves, ties to even, past the
// largest half, infinities).
TEST(AttentionTiles, CacheConversionsEqualQuantizeRow) {
  std::mt19937 rng(13);
  const std::vector<float> f16_edges = {0.0f, -0.0f, 6e-8f, -3e-8f, 2.98e-8f, 1e-5f, 65504.0f, 65520.0f, -70000.0f,
                                        INFINITY, -INFINITY, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 2049.0f, 2051.0f};
  for (const AttentionTileKernels& isa : attention_tile_isas()) {
    for (DType type : {DType::f32, DType::f16, DType::q8_0}) {
      for (int64_t n : {1, 7, 8, 32, 64, 100, 128}) {
        if (n % dtype_traits(type).block_elements != 0) continue;
        std::vector<float> x = random_floats(rng, n, 100.0f);
        if (type == DType::f16) std::copy_n(f16_edges.begin(), std::min<int64_t>(n, int64_t(f16_edges.size())), x.begin());
        std::vector<uint8_t> typed(size_t(n) * 4);
        quantize_row(type, x.data(), typed.data(), n);
        std::vector<float> expected(static_cast<size_t>(n));
        dequantize_row(type, typed.data(), expected.data(), n);
        for (bool round_trip : {false, true}) {
          std::vector<float> got(size_t(n) + 1, k_guard);
          if (round_trip) isa.round_to_cache(type, x.data(), got.data(), n);
          else isa.to_f32(type, typed.data(), got.data(), n);
          EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), size_t(n) * sizeof(float)))
              << dtype_name(type) << " " << n << (round_trip ? " round trip" : " to f32");
          EXPECT_EQ(got[size_t(n)], k_guard);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(Rope, DynamicNtkGrowsTheBaseOnlyPastTheTrainedContext) {
  RopeParams ntk;
  ntk.layout = RopeLayout::neox;
  ntk.n_rot = 16;
  ntk.scaling = RopeScaling::dynamic_ntk;
  ntk.scaling_factor = 2.0f;
  ntk.n_ctx_orig = 100;
  RopeParams plain = ntk;
  plain.scaling = RopeScaling::none;
  std::mt19937 rng(12);
  const int32_t pos = 90;
  const std::vector<float> x = random_floats(rng, 16);
  std::vector<float> a = x, b = x;
  rope(ntk, a.data(), 1, 1, 16, &pos, 100);  // within the trained context: no change
  rope(plain, b.data(), 1, 1, 16, &pos, 100);
  EXPECT_EQ(a, b);
  a = x;
  b = x;
  rope(ntk, a.data(), 1, 1, 16, &pos, 300);  // base * (2 * 300 / 100 - 1)^(16 / 14)
  plain.freq_base = float(10000.0 * std::pow(5.0, 16.0 / 14.0));
  rope(plain, b.data(), 1, 1, 16, &pos, 300);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
}

}  // namespace
}  // namespace ds

#include "kernels/interleaved_rows.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "kernels/cpu_features.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

bool has_layout(DType type) {
  return type == DType::q8_0 || type == DType::q4_0 || type == DType::q5_0 || type == DType::q4_1 || type == DType::q5_1 ||
         type == DType::mxfp4 || type == DType::q4_k || type == DType::q5_k || type == DType::q6_k || type == DType::i8 ||
         type == DType::bf16;
}

bool has_min(DType type) { return type == DType::q4_1 || type == DType::q5_1; }
bool has_fifth_bits(DType type) { return type == DType::q5_0 || type == DType::q5_1; }

// Q5_0's and Q5_1's fifth bits: where the rows' qh words start in a group
// block and in a row's block, and each word's bits as the tiles read them
// (interleaved_rows.h): element e's bit moves to 8(e % 4) + (e / 4) % 4 + 4(e / 16).
int64_t fifth_bits_in_group(DType type) { return has_min(type) ? 4 * k_interleave : 2 * k_interleave; }
int64_t fifth_bits_in_row(DType type) { return has_min(type) ? 4 : 2; }
// Each word is moved a byte at a time through tables (bit by bit, a Q5_0
// model took 0.9 s more per GB to load than Q4_0).
constexpr int fifth_bit_for_tiles(int e) { return 8 * (e % 4) + (e / 4) % 4 + 4 * (e / 16); }
constexpr int fifth_bit_from_tiles(int bit) {
  int e = 0;
  while (fifth_bit_for_tiles(e) != bit) ++e;
  return e;
}

// table[k][v]: byte k of a word being v, the bits it places (bit i to place(8k + i)).
struct BitMoves {
  uint32_t table[4][256];
};
template <int (*Place)(int)>
constexpr BitMoves bit_moves() {
  BitMoves m{};
  for (int k = 0; k < 4; ++k)
    for (int v = 0; v < 256; ++v)
      for (int i = 0; i < 8; ++i) m.table[k][v] |= uint32_t((v >> i) & 1) << Place(8 * k + i);
  return m;
}
constexpr BitMoves k_fifth_bits_for_tiles = bit_moves<fifth_bit_for_tiles>();
constexpr BitMoves k_fifth_bits_from_tiles = bit_moves<fifth_bit_from_tiles>();

uint32_t move_bits(const BitMoves& m, uint32_t word) {
  return m.table[0][word & 0xFF] | m.table[1][(word >> 8) & 0xFF] | m.table[2][(word >> 16) & 0xFF] | m.table[3][word >> 24];
}
uint32_t fifth_bits_for_tiles(uint32_t qh) { return move_bits(k_fifth_bits_for_tiles, qh); }
uint32_t fifth_bits_from_tiles(uint32_t word) { return move_bits(k_fifth_bits_from_tiles, word); }

// Applies f to the 32-bit word at p in place.
template <typename F>
void rewrite_word(uint8_t* p, F f) {
  uint32_t word;
  std::memcpy(&word, p, 4);
  word = f(word);
  std::memcpy(p, &word, 4);
}

// Bytes of one row's part of a group block.
int64_t row_block_bytes(DType type) {
  DS_CHECK(has_layout(type), std::string("no interleaved layout for ") + dtype_name(type));
  return type == DType::i8 ? k_qk : type == DType::bf16 ? 2 * k_qk : dtype_traits(type).block_bytes;
}

// Where the pieces of row r's block go in its group block (of
// interleaved_group_rows(type) rows): calls copy(offset in the group block,
// offset in the row's block, bytes).
template <typename Copy>
void for_each_piece(DType type, int64_t r, Copy copy) {
  const int64_t group_rows = interleaved_group_rows(type);
  if (type == DType::q4_k || type == DType::q5_k) {
    copy(2 * r, 0, 2);                      // d
    copy(2 * k_interleave + 2 * r, 2, 2);   // dmin
    for (int64_t j = 0; j < k_scale_bytes_k; ++j) copy(4 * k_interleave + k_interleave * j + r, 4 + j, 1);  // scales, transposed
    int64_t group_at = (4 + k_scale_bytes_k) * k_interleave, row_at = 4 + k_scale_bytes_k;
    if (type == DType::q5_k) {  // the fifth bits: the row's qh bytes 4c..4c+3 per register c
      for (int64_t c = 0; c < 8; ++c) copy(group_at + 32 * c + 4 * r, row_at + 4 * c, 4);
      group_at += 32 * k_interleave, row_at += 32;
    }
    for (int64_t pair = 0; pair < 4; ++pair) {  // 32 bytes per pair of sub-blocks
      for (int64_t c = 0; c < 8; ++c) copy(group_at + 256 * pair + 32 * c + 4 * r, row_at + 32 * pair + 4 * c, 4);
    }
    return;
  }
  if (type == DType::bf16) {  // a tile row per pair of columns: 16 rows x 2 values
    for (int64_t p = 0; p < k_qk / 2; ++p) copy(64 * p + 4 * r, 4 * p, 4);
    return;
  }
  if (type == DType::i8) {  // Q8_0's quants without the scale
    for (int64_t c = 0; c < 8; ++c) copy(4 * group_rows * c + 4 * r, 4 * c, 4);
    return;
  }
  if (type == DType::mxfp4) {  // the E8M0 scale, then Q4_0's nibble layout
    copy(r, 0, 1);
    for (int64_t c = 0; c < 4; ++c) copy(k_interleave + 32 * c + 4 * r, 1 + 4 * c, 4);
    return;
  }
  // Q8_0 and the nibble types: the f16 scale d, the f16 min m, the qh word, then the quants.
  copy(2 * r, 0, 2);
  int64_t group_at = 2 * group_rows, row_at = 2;
  if (has_min(type)) copy(group_at + 2 * r, row_at, 2), group_at += 2 * k_interleave, row_at += 2;
  if (has_fifth_bits(type)) copy(group_at + 4 * r, row_at, 4), group_at += 4 * k_interleave, row_at += 4;
  const int64_t chunks = type == DType::q8_0 ? 8 : 4;  // 4-byte chunks of quants per row
  for (int64_t c = 0; c < chunks; ++c) copy(group_at + 4 * group_rows * c + 4 * r, row_at + 4 * c, 4);
}

// Q6_K's group block (interleaved_rows.h): where row r's element e keeps its
// low nibble and its top two bits. Registers are stored in the order the
// kernel reads them: step s holds high-bit registers 2s and 2s + 1, then
// low-nibble registers 2s, 2s + 1, 16 + 2s and 17 + 2s.
constexpr int64_t k_q6_scales = 2 * k_interleave, k_q6_steps = k_q6_scales + 16 * k_interleave;
constexpr int64_t q6_low_register(int i) { return 6 * ((i % 16) / 2) + 2 + 2 * (i / 16) + i % 2; }
constexpr int64_t q6_high_register(int i) { return 6 * (i / 2) + i % 2; }
struct Q6Place {
  int64_t low_byte;
  int low_shift;
  int64_t high_byte;
  int high_shift;
};
Q6Place q6_place(int64_t r, int e) {
  const int c = e / 4, k = e % 4;
  return {k_q6_steps + 32 * q6_low_register(c % 32) + 4 * r + k, c < 32 ? 0 : 4,
          k_q6_steps + 32 * q6_high_register(c % 16) + 4 * r + k, 2 * (c / 16)};
}

void interleave_q6_k(const BlockQ6_K& row, int64_t r, uint8_t* group) {
  std::memcpy(group + 2 * r, &row.d, 2);
  for (int s = 0; s < 16; ++s) group[k_q6_scales + k_interleave * s + r] = uint8_t(row.scales[s]);
  uint8_t codes[k_qk_k];
  q6_k_codes(row, codes);
  for (int e = 0; e < k_qk_k; ++e) {
    const Q6Place p = q6_place(r, e);
    group[p.low_byte] |= uint8_t((codes[e] & 0xF) << p.low_shift);
    group[p.high_byte] |= uint8_t((codes[e] >> 4) << p.high_shift);
  }
}

void deinterleave_q6_k(const uint8_t* group, int64_t r, BlockQ6_K& row) {
  std::memcpy(&row.d, group + 2 * r, 2);
  for (int s = 0; s < 16; ++s) row.scales[s] = int8_t(group[k_q6_scales + k_interleave * s + r]);
  uint8_t codes[k_qk_k];
  for (int e = 0; e < k_qk_k; ++e) {
    const Q6Place p = q6_place(r, e);
    codes[e] = uint8_t(((group[p.low_byte] >> p.low_shift) & 0xF) | (((group[p.high_byte] >> p.high_shift) & 3) << 4));
  }
  q6_k_pack_codes(codes, row);
}

}  // namespace

InterleavedGroupFn interleaved_kernel(DType type) {
  if (!use_avx2_kernels()) return nullptr;
  const InterleavedGroupFn vnni = use_vnni_kernels() ? interleaved_kernel_vnni(type) : nullptr;
  return vnni ? vnni : interleaved_kernel_avx2(type);
}

InterleavedPairFn interleaved_pair_kernel(DType type) {
  const CpuFeatures& f = cpu_features();
  const bool eight_rows = interleaved_group_rows(type) == k_interleave;  // not Q8_0's 16 where AMX runs
  return use_vnni_kernels() && f.avx512f && f.avx512bw && eight_rows ? interleaved_pair_kernel_avx512(type) : nullptr;
}

uint8_t* interleaved_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

int64_t amx_min_tokens(DType weight_type) {
  return dtype_traits(weight_type).block_elements == k_qk_k ? 2 * k_amx_tile_tokens : k_amx_tile_tokens;
}

int64_t amx_tile_depth(DType weight_type) { return dtype_traits(weight_type).block_elements == k_qk_k ? 64 : k_qk; }

void pack_tile_activations(DType act_type, int64_t depth, const uint8_t* act, int64_t act_stride, int64_t n_tokens,
                           int64_t n_cols, int8_t* out) {
  DS_CHECK(act_type == DType::q8_0 || act_type == DType::q8_k || act_type == DType::i8,
           std::string("no tile-ready codes for ") + dtype_name(act_type));
  // Where the codes of a block of `block` elements start in its bytes.
  const int64_t block = act_type == DType::q8_k ? k_qk_k : k_qk;
  const int64_t block_bytes = act_type == DType::q8_0 ? int64_t(sizeof(BlockQ8_0)) : act_type == DType::q8_k ? int64_t(sizeof(BlockQ8_K)) : k_qk;
  const int64_t codes_at = act_type == DType::q8_0 ? int64_t(offsetof(BlockQ8_0, qs)) : act_type == DType::q8_k ? int64_t(offsetof(BlockQ8_K, qs)) : 0;
  const int64_t products = n_cols / depth, tile_bytes = k_amx_tile_tokens * depth;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint8_t* row = act + t * act_stride;
    int8_t* tile = out + (t / k_amx_tile_tokens) * products * tile_bytes + (t % k_amx_tile_tokens) * depth;
    for (int64_t p = 0; p < products; ++p) {
      const int64_t e = p * depth;
      std::memcpy(tile + p * tile_bytes, row + e / block * block_bytes + codes_at + e % block, size_t(depth));
    }
  }
}

InterleavedTilesFn interleaved_tiles(DType type) {
  if (!use_amx_kernels()) return nullptr;
  const InterleavedTilesFn blocks = interleaved_tiles_amx(type);
  return blocks ? blocks : interleaved_tiles_amx_k(type);
}

bool interleaved_activations_biased(DType type) {
  return use_avx2_kernels() && use_vnni_kernels() && interleaved_kernel_vnni(type) && interleaved_kernel_vnni_biased(type);
}

void bias_activation_codes(DType act_type, uint8_t* row, int64_t n_cols) {
  DS_CHECK(act_type == DType::q8_0 || act_type == DType::i8, std::string("no biased codes for ") + dtype_name(act_type));
  if (act_type == DType::i8) {
    for (int64_t i = 0; i < n_cols; ++i) row[i] ^= 0x80;  // a + 128 as an unsigned byte, for a in [-128, 127]
    return;
  }
  auto* blocks = reinterpret_cast<BlockQ8_0*>(row);
  for (int64_t b = 0; b < n_cols / k_qk; ++b) {
    for (int8_t& q : blocks[b].qs) q = int8_t(uint8_t(q) ^ 0x80);
  }
}

int64_t interleaved_block_elements(DType type) {
  return type == DType::i8 || type == DType::bf16 ? k_qk : dtype_traits(type).block_elements;
}

int64_t interleaved_group_rows(DType type) {
  const bool tile_rows = type == DType::bf16 || ((type == DType::q8_0 || type == DType::i8) && use_amx_kernels());
  return tile_rows ? k_amx_tile_rows : k_interleave;
}

bool interleavable(DType type, int64_t n_rows, int64_t n_cols) {
  if (type == DType::bf16) return n_rows % k_amx_tile_rows == 0 && n_cols % k_qk == 0 && use_amx_bf16_kernels();
  return n_rows % interleaved_group_rows(type) == 0 && n_cols % interleaved_block_elements(type) == 0 && use_avx2_kernels() &&
         interleaved_kernel_avx2(type) != nullptr;
}

void interleave_rows(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* rows, uint8_t* out) {
  const int64_t group_rows = interleaved_group_rows(type);
  DS_CHECK(n_rows % group_rows == 0 && n_cols % interleaved_block_elements(type) == 0,
           "interleave_rows: rows must come in whole groups, columns in whole group blocks");
  const int64_t block_bytes = row_block_bytes(type), n_blocks = n_cols / interleaved_block_elements(type);
  for (int64_t group = 0; group < n_rows / group_rows; ++group) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* dst = out + (group * n_blocks + b) * group_rows * block_bytes;
      if (type == DType::q6_k) std::memset(dst, 0, size_t(k_interleave * block_bytes));
      for (int64_t r = 0; r < group_rows; ++r) {
        const uint8_t* src = rows + ((group * group_rows + r) * n_blocks + b) * block_bytes;
        if (type == DType::q6_k) {
          interleave_q6_k(*reinterpret_cast<const BlockQ6_K*>(src), r, dst);
          continue;
        }
        for_each_piece(type, r, [&](int64_t at_group, int64_t at_row, size_t n) { std::memcpy(dst + at_group, src + at_row, n); });
        if (has_fifth_bits(type)) rewrite_word(dst + fifth_bits_in_group(type) + 4 * r, fifth_bits_for_tiles);
      }
    }
  }
}

void deinterleaved_row(DType type, int64_t n_cols, const uint8_t* data, int64_t row, uint8_t* out) {
  const int64_t group_rows = interleaved_group_rows(type);
  const int64_t block_bytes = row_block_bytes(type), n_blocks = n_cols / interleaved_block_elements(type);
  const int64_t group = row / group_rows;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* src = data + (group * n_blocks + b) * group_rows * block_bytes;
    uint8_t* dst = out + b * block_bytes;
    if (type == DType::q6_k) {
      deinterleave_q6_k(src, row % k_interleave, *reinterpret_cast<BlockQ6_K*>(dst));
      continue;
    }
    for_each_piece(type, row % group_rows,
                   [&](int64_t at_group, int64_t at_row, size_t n) { std::memcpy(dst + at_row, src + at_group, n); });
    if (has_fifth_bits(type)) rewrite_word(dst + fifth_bits_in_row(type), fifth_bits_from_tiles);
  }
}

}  // namespace ds

#pragma once
// Element types as GGUF files number them (ggml's type ids), with their block
// layout. Every id a file may carry is known here, so that the GGUF reader can
// size any tensor; is_compute_supported() says which ones dsinfer can run.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ds {

enum class DType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

struct DTypeTraits {
  const char* name;
  int64_t block_elements;  // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
};

// Traits for a raw type id from a file; nullopt for an id no GGUF writer uses.
std::optional<DTypeTraits> dtype_traits(uint32_t raw_type);
DTypeTraits dtype_traits(DType type);
const char* dtype_name(DType type);

// Bytes of a row of n_elements; n_elements must be a multiple of the block size.
int64_t row_bytes(DType type, int64_t n_elements);

// True for the weight types dsinfer's kernels implement.
bool is_compute_supported(DType type);

// The activation type a weight type multiplies with, in every backend (as in
// llama.cpp: Q4_0/Q5_0/Q8_0 with Q8_0, Q4_1/Q5_1 with Q8_1, the K types with
// Q8_K, the float types with themselves, I8 with per-token I8 rows).
DType activation_type_for(DType weight_type);

}  // namespace ds

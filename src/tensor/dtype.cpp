#include "tensor/dtype.h"

#include "base/status.h"

namespace ds {

std::optional<DTypeTraits> dtype_traits(uint32_t raw_type) {
  switch (raw_type) {
    case 0: return DTypeTraits{"F32", 1, 4};
    case 1: return DTypeTraits{"F16", 1, 2};
    case 2: return DTypeTraits{"Q4_0", 32, 18};
    case 3: return DTypeTraits{"Q4_1", 32, 20};
    case 6: return DTypeTraits{"Q5_0", 32, 22};
    case 7: return DTypeTraits{"Q5_1", 32, 24};
    case 8: return DTypeTraits{"Q8_0", 32, 34};
    case 9: return DTypeTraits{"Q8_1", 32, 36};
    case 10: return DTypeTraits{"Q2_K", 256, 84};
    case 11: return DTypeTraits{"Q3_K", 256, 110};
    case 12: return DTypeTraits{"Q4_K", 256, 144};
    case 13: return DTypeTraits{"Q5_K", 256, 176};
    case 14: return DTypeTraits{"Q6_K", 256, 210};
    case 15: return DTypeTraits{"Q8_K", 256, 292};
    case 16: return DTypeTraits{"IQ2_XXS", 256, 66};
    case 17: return DTypeTraits{"IQ2_XS", 256, 74};
    case 18: return DTypeTraits{"IQ3_XXS", 256, 98};
    case 19: return DTypeTraits{"IQ1_S", 256, 50};
    case 20: return DTypeTraits{"IQ4_NL", 32, 18};
    case 21: return DTypeTraits{"IQ3_S", 256, 110};
    case 22: return DTypeTraits{"IQ2_S", 256, 82};
    case 23: return DTypeTraits{"IQ4_XS", 256, 136};
    case 24: return DTypeTraits{"I8", 1, 1};
    case 25: return DTypeTraits{"I16", 1, 2};
    case 26: return DTypeTraits{"I32", 1, 4};
    case 27: return DTypeTraits{"I64", 1, 8};
    case 28: return DTypeTraits{"F64", 1, 8};
    case 29: return DTypeTraits{"IQ1_M", 256, 56};
    case 30: return DTypeTraits{"BF16", 1, 2};
    case 34: return DTypeTraits{"TQ1_0", 256, 54};
    case 35: return DTypeTraits{"TQ2_0", 256, 66};
    case 39: return DTypeTraits{"MXFP4", 32, 17};
    default: return std::nullopt;
  }
}

DTypeTraits dtype_traits(DType type) {
  auto traits = dtype_traits(static_cast<uint32_t>(type));
  DS_CHECK(traits.has_value(), "unknown dtype");
  return *traits;
}

const char* dtype_name(DType type) { return dtype_traits(type).name; }

int64_t row_bytes(DType type, int64_t n_elements) {
  const DTypeTraits traits = dtype_traits(type);
  DS_CHECK(n_elements % traits.block_elements == 0, "row not a whole number of blocks");
  return n_elements / traits.block_elements * traits.block_bytes;
}

bool is_compute_supported(DType type) {
  switch (type) {
    case DType::i8:  // W8A8, with its row scales
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q8_0:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::mxfp4:
      return true;
    default:
      return false;
  }
}

DType activation_type_for(DType weight_type) {
  switch (weight_type) {
    case DType::f32: return DType::f32;
    case DType::f16: return DType::f16;
    case DType::bf16: return DType::bf16;
    case DType::q4_0:
    case DType::q5_0:
    case DType::q8_0:
    case DType::mxfp4: return DType::q8_0;
    case DType::q4_1:
    case DType::q5_1: return DType::q8_1;
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k: return DType::q8_k;
    case DType::i8: return DType::i8;  // W8A8: per-token int8 rows with their scales (matmul.cpp)
    default: DS_CHECK(false, std::string("no matmul for weight type ") + dtype_name(weight_type));
  }
  return DType::f32;
}

}  // namespace ds

#pragma once
// Hyper-parameters of a decoder model, read from GGUF metadata. Architectures
// are data: one table row per family says what differs (STYLE.md practice 7).

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "kernels/rope.h"

namespace ds {

enum class Arch { llama, qwen2 };

struct ArchInfo {
  Arch arch;
  const char* name;        // general.architecture
  RopeLayout rope_layout;  // how the converter laid out q/k for RoPE
  bool requires_qkv_bias;  // q/k/v biases must be present
};

// nullptr for an architecture dsinfer does not implement.
const ArchInfo* find_arch(const std::string& name);
std::string supported_arch_names();

struct ModelConfig {
  const ArchInfo* arch = nullptr;
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float norm_eps = 1e-5f;
  RopeParams rope;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }

  static Result<ModelConfig> from_gguf(const GgufFile& file);
};

}  // namespace ds

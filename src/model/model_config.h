#pragma once
// Hyper-parameters of a decoder model, read from GGUF metadata. Architectures
// are data: one table row per family says what differs (STYLE.md practice 7).

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "kernels/moe_route.h"
#include "kernels/rope.h"

namespace ds {

enum class Arch { llama, qwen2, deepseek2 };

struct ArchInfo {
  Arch arch;
  const char* name;        // general.architecture
  RopeLayout rope_layout;  // how the converter laid out q/k for RoPE
  bool requires_qkv_bias;  // q/k/v biases must be present
};

// nullptr for an architecture dsinfer does not implement.
const ArchInfo* find_arch(const std::string& name);
std::string supported_arch_names();

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are rebuilt
// per head from a shared compressed latent; only the latent and one shared
// RoPE key per token are cached.
struct MlaConfig {
  int64_t q_lora_rank = 0;   // 0: queries come straight from attn_q (V2-Lite)
  int64_t kv_lora_rank = 0;  // the latent's width
  int64_t qk_nope_dim = 0;   // per-head key/query part without RoPE
  int64_t qk_rope_dim = 0;   // per-head part with RoPE (shared key across heads)
  int64_t v_head_dim = 0;
  float kq_scale = 1.0f;     // 1/sqrt(nope + rope), times the YaRN mscale squared
  int64_t cache_dim() const { return kv_lora_rank + qk_rope_dim; }
};

// DeepSeekMoE: after the leading dense layers, each token's FFN is the sum of
// its top-k routed experts (weighted; the routing is kernels/moe_route.h's)
// plus the always-on shared experts.
struct MoeConfig : ExpertRouting {
  int64_t n_expert_shared = 0;
  int64_t expert_ff = 0;      // one expert's hidden width
  int64_t leading_dense = 0;  // layers before the first MoE layer
  bool is_moe_layer(int64_t layer) const { return n_expert > 0 && layer >= leading_dense; }
};

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
  bool mla = false;  // deepseek2: attention is MlaConfig's, the FFN MoeConfig's
  MlaConfig mla_config;
  MoeConfig moe;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  // Elements each KV page slot holds per layer: keys, then values (none with MLA).
  int64_t cache_k_dim() const { return mla ? mla_config.cache_dim() : kv_dim(); }
  int64_t cache_v_dim() const { return mla ? 0 : kv_dim(); }

  static Result<ModelConfig> from_gguf(const GgufFile& file);
};

}  // namespace ds

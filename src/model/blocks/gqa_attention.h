#pragma once
// Grouped-query attention (Llama, Qwen2): q, k and v projections (with
// biases where the model has them), RoPE, keys and values written to the
// step's KV slots, paged attention over each sequence's cache, the output
// projection.

#include <cstdint>
#include <string>

#include "model/blocks/forward_context.h"
#include "model/device_array.h"
#include "model/kv_cache.h"

namespace ds {

struct GqaWeights {
  WeightMatrix wq, wk, wv, wo;  // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  WeightVector bq, bk, bv;      // empty when the model has no q/k/v biases
};

// The head shapes (attention.key_length / value_length where given, else
// n_embd / n_head) and the KV row: keys and values of every KV head.
Status read_gqa_config(const ConfigReader& reader, ModelConfig& c);

// Divides the heads among c.ranks: rank r keeps query heads and KV heads
// [r, r + 1) / ranks of each (so each query head keeps its KV head).
Status split_gqa_heads(ModelConfig& c);

// blk.N.attn_{q,k,v,output}.weight and the q/k/v biases, required or optional:
// under tensor parallel this rank's heads (q, k, v rows; output columns).
Status load_gqa(TensorLoader& loader, const ModelConfig& c, const std::string& prefix, bool biases_required, GqaWeights* w);

// rope_freqs.weight, Llama 3's RoPE frequency factors (n_rot / 2, one tensor for every layer),
// where the file has it: empty otherwise.
Status load_rope_freqs(TensorLoader& loader, const ModelConfig& c, WeightVector* out);

class GqaAttention {
 public:
  Status reserve(Backend& backend, const ModelConfig& c, int64_t n);
  // ctx.out [n, n_embd] from ctx.h, through the layer's KV memory; rope_freqs as load_rope_freqs gives them.
  void run(const ForwardContext& ctx, const GqaWeights& w, const WeightVector& rope_freqs, const StepIndex& step, const KvLayerView& kv);

 private:
  DeviceArray q_, attn_;  // [n, q_dim]
  DeviceArray k_, v_;     // [n, kv_dim]
};

}  // namespace ds

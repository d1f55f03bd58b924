#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ds {
namespace {

constexpr ArchInfo k_archs[] = {
    {Arch::llama, "llama", RopeLayout::normal, false},
    {Arch::qwen2, "qwen2", RopeLayout::neox, true},
    {Arch::deepseek2, "deepseek2", RopeLayout::normal, false},
};

constexpr int64_t k_max_dim = int64_t(1) << 20;

Status out_of_range(const std::string& key, uint64_t value) {
  return Status::error("model: metadata '" + key + "' = " + std::to_string(value) + " is out of range");
}

// A float hyperparameter, absent: `fallback`; present: finite and within [low, high].
Result<double> bounded_float(const GgufFile& file, const std::string& key, double fallback, double low, double high) {
  auto v = file.get_float_or(key, fallback);
  if (!v.ok()) return v.status();
  if (!std::isfinite(v.value()) || v.value() < low || v.value() > high) {
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", low, high);
    return Status::error("model: metadata '" + key + "' = " + std::to_string(v.value()) + " is not a finite number in " + range);
  }
  return v.value();
}

// DeepSeek-V2/V3 (deepseek2): the MLA shapes and the MoE routing.
template <typename Dim>
Status read_deepseek2(const GgufFile& file, const std::string& p, Dim& dim, ModelConfig& c) {
  MlaConfig& m = c.mla_config;
  auto optional_dim = [&](const std::string& key, int64_t* out) -> Status {
    return file.find(p + key) ? dim(key, out) : Status();
  };
  // 0 means no query LoRA (as llama.cpp reads it): the query comes from one matrix.
  auto q_lora = file.get_uint_or(p + "attention.q_lora_rank", 0);
  if (!q_lora.ok()) return q_lora.status();
  if (q_lora.value() > uint64_t(k_max_dim)) return out_of_range(p + "attention.q_lora_rank", q_lora.value());
  m.q_lora_rank = int64_t(q_lora.value());
  DS_RETURN_IF_ERROR(dim("attention.kv_lora_rank", &m.kv_lora_rank));
  DS_RETURN_IF_ERROR(dim("rope.dimension_count", &m.qk_rope_dim));
  // Files with the split k_b/v_b tensors give the per-head sizes as *_mla and
  // the cache's as key/value_length; files with kv_b give the per-head ones.
  int64_t key_length = 0;
  const bool split = file.find(p + "attention.key_length_mla") != nullptr;
  DS_RETURN_IF_ERROR(dim(split ? "attention.key_length_mla" : "attention.key_length", &key_length));
  DS_RETURN_IF_ERROR(dim(split ? "attention.value_length_mla" : "attention.value_length", &m.v_head_dim));
  if (key_length <= m.qk_rope_dim || m.qk_rope_dim % 2 != 0) {
    return Status::error("model: " + p + "attention key length " + std::to_string(key_length) +
                         " must exceed an even rope.dimension_count " + std::to_string(m.qk_rope_dim));
  }
  m.qk_nope_dim = key_length - m.qk_rope_dim;
  c.head_dim = key_length;
  c.n_head_kv = c.n_head;

  MoeConfig& moe = c.moe;
  DS_RETURN_IF_ERROR(optional_dim("expert_count", &moe.n_expert));
  if (moe.n_expert == 0) return Status();
  DS_RETURN_IF_ERROR(dim("expert_used_count", &moe.n_expert_used));
  DS_RETURN_IF_ERROR(dim("expert_feed_forward_length", &moe.expert_ff));
  DS_RETURN_IF_ERROR(optional_dim("expert_shared_count", &moe.n_expert_shared));
  auto leading = file.get_uint_or(p + "leading_dense_block_count", 0);
  if (!leading.ok()) return leading.status();
  if (leading.value() > uint64_t(c.n_layer)) return out_of_range(p + "leading_dense_block_count", leading.value());
  moe.leading_dense = int64_t(leading.value());
  auto gating = file.get_uint_or(p + "expert_gating_func", 1);
  if (!gating.ok()) return gating.status();
  if (gating.value() != 1 && gating.value() != 2) {
    return Status::error("model: " + p + "expert_gating_func " + std::to_string(gating.value()) + " is not softmax (1) or sigmoid (2)");
  }
  moe.gating = gating.value() == 2 ? ExpertGating::sigmoid : ExpertGating::softmax;
  if (file.find(p + "expert_weights_norm")) {
    auto norm = file.get_bool(p + "expert_weights_norm");
    if (!norm.ok()) return norm.status();
    moe.normalize_weights = norm.value();
  }
  auto scale = bounded_float(file, p + "expert_weights_scale", 1.0, 0.0, 1e6);
  if (!scale.ok()) return scale.status();
  moe.weights_scale = scale.value() == 0.0 ? 1.0f : float(scale.value());
  // A group count of 0 means no grouping (one group), as llama.cpp reads it.
  auto groups = file.get_uint_or(p + "expert_group_count", 1);
  auto groups_used = file.get_uint_or(p + "expert_group_used_count", 1);
  if (!groups.ok()) return groups.status();
  if (!groups_used.ok()) return groups_used.status();
  moe.n_group = std::max<int64_t>(1, int64_t(std::min<uint64_t>(groups.value(), uint64_t(k_max_dim))));
  moe.n_group_used = std::max<int64_t>(1, int64_t(std::min<uint64_t>(groups_used.value(), uint64_t(k_max_dim))));
  const std::string experts = p + "expert_count " + std::to_string(moe.n_expert);
  const std::string used = p + "expert_used_count " + std::to_string(moe.n_expert_used);
  const std::string n_groups = p + "expert_group_count " + std::to_string(moe.n_group);
  const std::string n_groups_used = p + "expert_group_used_count " + std::to_string(moe.n_group_used);
  if (moe.n_expert_used > moe.n_expert) return Status::error("model: " + used + " exceeds " + experts);
  if (moe.n_expert % moe.n_group != 0) return Status::error("model: " + experts + " is not a multiple of " + n_groups);
  if (moe.n_group_used > moe.n_group) return Status::error("model: " + n_groups_used + " exceeds " + n_groups);
  if (moe.n_expert_used > moe.n_group_used * (moe.n_expert / moe.n_group)) {
    return Status::error("model: " + used + " exceeds the experts of " + n_groups_used + " of " + n_groups + " (" + experts + ")");
  }
  return Status();
}

}  // namespace

const ArchInfo* find_arch(const std::string& name) {
  for (const ArchInfo& info : k_archs) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::string supported_arch_names() {
  std::string names;
  for (const ArchInfo& info : k_archs) names += std::string(names.empty() ? "" : ", ") + info.name;
  return names;
}

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig c;
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  c.arch = find_arch(arch_name.value());
  if (!c.arch) {
    return Status::error("model: general.architecture '" + arch_name.value().substr(0, 64) + "' is not supported (supported: " +
                         supported_arch_names() + ")");
  }
  auto name = file.get_string_or("general.name", arch_name.value());
  if (!name.ok()) return name.status();
  c.name = name.value();
  const std::string p = arch_name.value() + ".";

  // Reads a required positive dimension, bounded so later products cannot overflow.
  auto dim = [&](const std::string& key, int64_t* out) -> Status {
    auto v = file.get_uint(p + key);
    if (!v.ok()) return v.status();
    if (v.value() == 0 || v.value() > uint64_t(k_max_dim)) return out_of_range(p + key, v.value());
    *out = int64_t(v.value());
    return Status();
  };
  DS_RETURN_IF_ERROR(dim("embedding_length", &c.n_embd));
  DS_RETURN_IF_ERROR(dim("block_count", &c.n_layer));
  DS_RETURN_IF_ERROR(dim("feed_forward_length", &c.n_ff));
  DS_RETURN_IF_ERROR(dim("attention.head_count", &c.n_head));
  DS_RETURN_IF_ERROR(dim("context_length", &c.n_ctx_train));
  c.n_head_kv = c.n_head;
  if (file.find(p + "attention.head_count_kv")) DS_RETURN_IF_ERROR(dim("attention.head_count_kv", &c.n_head_kv));
  if (c.n_head % c.n_head_kv != 0) {
    return Status::error("model: " + p + "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of " + p +
                         "attention.head_count_kv " + std::to_string(c.n_head_kv));
  }
  c.head_dim = c.n_embd / c.n_head;
  c.mla = c.arch->arch == Arch::deepseek2;
  if (c.mla) {
    DS_RETURN_IF_ERROR(read_deepseek2(file, p, dim, c));
  } else if (file.find(p + "attention.key_length")) {
    DS_RETURN_IF_ERROR(dim("attention.key_length", &c.head_dim));
  } else if (c.n_embd % c.n_head != 0) {
    return Status::error("model: " + p + "embedding_length " + std::to_string(c.n_embd) + " is not a multiple of " + p +
                         "attention.head_count " + std::to_string(c.n_head) + " (and no attention.key_length is given)");
  }
  if (!c.mla && file.find(p + "attention.value_length")) {
    int64_t value_length = 0;
    DS_RETURN_IF_ERROR(dim("attention.value_length", &value_length));
    if (value_length != c.head_dim) return Status::error("model: key_length and value_length differ, which this architecture does not support");
  }

  auto eps = bounded_float(file, p + "attention.layer_norm_rms_epsilon", 1e-5, 1e-30, 1.0);
  if (!eps.ok()) return eps.status();
  c.norm_eps = float(eps.value());

  RopeParams& rope = c.rope;
  rope.layout = c.arch->rope_layout;
  int64_t n_rot = c.mla ? c.mla_config.qk_rope_dim : c.head_dim;
  if (!c.mla && file.find(p + "rope.dimension_count")) DS_RETURN_IF_ERROR(dim("rope.dimension_count", &n_rot));
  if (n_rot > c.head_dim || n_rot % 2 != 0) return out_of_range(p + "rope.dimension_count", uint64_t(n_rot));
  rope.n_rot = int(n_rot);
  // Released models use 1e4 to 1e7; the bound keeps freq_base^-x away from underflow.
  auto base = bounded_float(file, p + "rope.freq_base", 10000.0, 1.0 + 1e-6, 1e12);
  if (!base.ok()) return base.status();
  rope.freq_base = float(base.value());
  rope.n_ctx_orig = int(c.n_ctx_train);

  std::string scaling = "none";
  if (file.find(p + "rope.scaling.type")) {
    auto s = file.get_string(p + "rope.scaling.type");
    if (!s.ok()) return s.status();
    scaling = s.value();
  }
  auto factor = bounded_float(file, p + "rope.scaling.factor", 0.0, 0.0, 1e6);
  if (!factor.ok()) return factor.status();
  auto linear_scale = bounded_float(file, p + "rope.scale_linear", 0.0, 0.0, 1e6);
  if (!linear_scale.ok()) return linear_scale.status();
  if (scaling == "none" && linear_scale.value() > 0.0 && linear_scale.value() != 1.0) {
    scaling = "linear";
    factor = linear_scale.value();
  }
  if (scaling == "none") {
    rope.scaling = RopeScaling::none;
  } else if (scaling == "linear" || scaling == "yarn" || scaling == "dynamic") {
    if (!(factor.value() >= 1.0)) return Status::error("model: " + p + "rope.scaling.factor must be >= 1 for " + scaling + " scaling");
    rope.scaling_factor = float(factor.value());
    rope.scaling = scaling == "linear" ? RopeScaling::linear : scaling == "yarn" ? RopeScaling::yarn : RopeScaling::dynamic_ntk;
    auto orig = file.get_uint_or(p + "rope.scaling.original_context_length", uint64_t(c.n_ctx_train));
    if (!orig.ok()) return orig.status();
    if (orig.value() == 0 || orig.value() > uint64_t(k_max_dim) * 16) return out_of_range(p + "rope.scaling.original_context_length", orig.value());
    rope.n_ctx_orig = int(orig.value());
    auto beta_fast = bounded_float(file, p + "rope.scaling.yarn_beta_fast", 32.0, 0.0, 1e6);
    auto beta_slow = bounded_float(file, p + "rope.scaling.yarn_beta_slow", 1.0, 0.0, 1e6);
    if (!beta_fast.ok()) return beta_fast.status();
    if (!beta_slow.ok()) return beta_slow.status();
    rope.yarn_beta_fast = float(beta_fast.value());
    rope.yarn_beta_slow = float(beta_slow.value());
  } else {
    return Status::error("model: unknown " + p + "rope.scaling.type '" + scaling.substr(0, 64) + "' (none, linear, yarn, dynamic)");
  }

  if (c.mla) {
    // DeepSeek's YaRN (HF modeling_deepseek): RoPE keeps unit magnitude
    // (its mscale equals mscale_all_dim in every released config) and the
    // softmax scale grows by mscale_all_dim's correction, squared. GGUF stores
    // 0.1 * mscale_all_dim as yarn_log_multiplier.
    MlaConfig& m = c.mla_config;
    m.kq_scale = 1.0f / std::sqrt(float(m.qk_nope_dim + m.qk_rope_dim));
    if (rope.scaling == RopeScaling::yarn) {
      auto log_mul = bounded_float(file, p + "rope.scaling.yarn_log_multiplier", 0.0, -10.0, 10.0);
      if (!log_mul.ok()) return log_mul.status();
      const float log_factor = std::log(rope.scaling_factor);
      rope.yarn_attn_factor = 1.0f / (1.0f + 0.1f * log_factor);  // cancels the rope kernel's own correction
      const float mscale = 1.0f + float(log_mul.value()) * log_factor;
      m.kq_scale *= mscale * mscale;
    }
  }

  // The vocabulary size comes from the embedding matrix (checked at weight load).
  if (const GgufTensorInfo* embd = file.find_tensor("token_embd.weight")) c.n_vocab = embd->ne[1];
  return c;
}

}  // namespace ds

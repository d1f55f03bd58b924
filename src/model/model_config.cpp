#include "model/model_config.h"

namespace ds {
namespace {

constexpr ArchInfo k_archs[] = {
    {Arch::llama, "llama", RopeLayout::normal, false},
    {Arch::qwen2, "qwen2", RopeLayout::neox, true},
};

constexpr int64_t k_max_dim = int64_t(1) << 20;

Status out_of_range(const std::string& key, uint64_t value) {
  return Status::error("model: metadata '" + key + "' = " + std::to_string(value) + " is out of range");
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
    return Status::error("model: architecture '" + arch_name.value() + "' is not supported (supported: " +
                         supported_arch_names() + ")");
  }
  c.name = file.get_string("general.name").ok() ? file.get_string("general.name").value() : arch_name.value();
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
    return Status::error("model: head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                         std::to_string(c.n_head_kv));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (file.find(p + "attention.key_length")) DS_RETURN_IF_ERROR(dim("attention.key_length", &c.head_dim));
  if (file.find(p + "attention.value_length")) {
    int64_t value_length = 0;
    DS_RETURN_IF_ERROR(dim("attention.value_length", &value_length));
    if (value_length != c.head_dim) return Status::error("model: key_length and value_length differ, which this architecture does not support");
  }

  auto eps = file.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5);
  if (!eps.ok()) return eps.status();
  c.norm_eps = float(eps.value());

  RopeParams& rope = c.rope;
  rope.layout = c.arch->rope_layout;
  int64_t n_rot = c.head_dim;
  if (file.find(p + "rope.dimension_count")) DS_RETURN_IF_ERROR(dim("rope.dimension_count", &n_rot));
  if (n_rot > c.head_dim || n_rot % 2 != 0) return out_of_range(p + "rope.dimension_count", uint64_t(n_rot));
  rope.n_rot = int(n_rot);
  auto base = file.get_float_or(p + "rope.freq_base", 10000.0);
  if (!base.ok()) return base.status();
  if (!(base.value() > 1.0)) return Status::error("model: " + p + "rope.freq_base must be > 1");
  rope.freq_base = float(base.value());
  rope.n_ctx_orig = int(c.n_ctx_train);

  std::string scaling = "none";
  if (file.find(p + "rope.scaling.type")) {
    auto s = file.get_string(p + "rope.scaling.type");
    if (!s.ok()) return s.status();
    scaling = s.value();
  }
  auto factor = file.get_float_or(p + "rope.scaling.factor", 0.0);
  if (!factor.ok()) return factor.status();
  auto linear_scale = file.get_float_or(p + "rope.scale_linear", 0.0);
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
    auto beta_fast = file.get_float_or(p + "rope.scaling.yarn_beta_fast", 32.0);
    auto beta_slow = file.get_float_or(p + "rope.scaling.yarn_beta_slow", 1.0);
    if (!beta_fast.ok()) return beta_fast.status();
    if (!beta_slow.ok()) return beta_slow.status();
    rope.yarn_beta_fast = float(beta_fast.value());
    rope.yarn_beta_slow = float(beta_slow.value());
  } else {
    return Status::error("model: unknown " + p + "rope.scaling.type '" + scaling + "' (none, linear, yarn, dynamic)");
  }

  // The vocabulary size comes from the embedding matrix (checked at weight load).
  if (const GgufTensorInfo* embd = file.find_tensor("token_embd.weight")) c.n_vocab = embd->ne[1];
  return c;
}

}  // namespace ds

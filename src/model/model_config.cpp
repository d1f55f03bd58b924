#include "model/model_config.h"

#include <algorithm>

#include "model/family.h"
#include "model/kv_cache.h"

namespace ds {

const char* ModelConfig::arch_name() const { return family ? family->name : "?"; }

Status ModelConfig::cache_nextn_rows() {
  const std::string key = std::string(arch_name()) + ".nextn_predict_layers";
  if (n_nextn_layer == 0) {
    return Status::error("multi-token prediction: the model has no such layer (" + key + " is absent or 0; llama.cpp's "
                         "converter keeps it in deepseek32 files, and drops DeepSeek-V3's and V4's)");
  }
  if (family != &deepseek32_family()) {
    return Status::error(std::string("multi-token prediction: drafting with the layers of a ") + arch_name() + " file is not implemented");
  }
  if (n_nextn_layer != 1) {
    return Status::error("multi-token prediction drafts with one layer, chained; " + key + " is " + std::to_string(n_nextn_layer));
  }
  kv.nextn_layers = n_nextn_layer;
  return Status();
}

Status ModelConfig::split_across(RankLayout layout) {
  if (!layout.split()) return Status();
  if (!family->split) {
    return Status::error(std::string("tensor parallel: splitting a ") + arch_name() +
                         " model across ranks is not implemented (llama, qwen2, deepseek2, deepseek32 and deepseek4 are)");
  }
  ranks = layout;
  const int64_t whole_row = KvCache::page_bytes(*this, DType::f32, 1);
  DS_RETURN_IF_ERROR(family->split(*this));
  kv_split = KvCache::page_bytes(*this, DType::f32, 1) != whole_row;
  if (n_vocab % layout.ranks != 0) {  // the output head's rows are split (weights.cpp)
    return Status::error("tensor parallel: the vocabulary of " + std::to_string(n_vocab) + " tokens must divide by " +
                         std::to_string(layout.ranks) + " ranks");
  }
  return Status();
}

Status read_rope(const ConfigReader& r, int64_t default_n_rot, ModelConfig& c) {
  RopeParams& rope = c.rope;
  rope.layout = c.family->rope_layout;
  int64_t n_rot = default_n_rot;
  DS_RETURN_IF_ERROR(r.optional_dim("rope.dimension_count", &n_rot));
  if (n_rot > c.head_dim || n_rot % 2 != 0) return r.out_of_range("rope.dimension_count", uint64_t(n_rot));
  rope.n_rot = int(n_rot);
  // Released models use 1e4 to 1e7; the bound keeps freq_base^-x away from underflow.
  auto base = r.bounded_float("rope.freq_base", 10000.0, 1.0 + 1e-6, 1e12);
  if (!base.ok()) return base.status();
  rope.freq_base = float(base.value());
  rope.n_ctx_orig = int(c.n_ctx_train);

  std::string scaling = "none";
  if (r.has("rope.scaling.type")) {
    auto s = r.file().get_string(r.prefix() + "rope.scaling.type");
    if (!s.ok()) return s.status();
    scaling = s.value();
  }
  auto factor = r.bounded_float("rope.scaling.factor", 0.0, 0.0, 1e6);
  if (!factor.ok()) return factor.status();
  auto linear_scale = r.bounded_float("rope.scale_linear", 0.0, 0.0, 1e6);
  if (!linear_scale.ok()) return linear_scale.status();
  if (scaling == "none" && linear_scale.value() > 0.0 && linear_scale.value() != 1.0) {
    scaling = "linear";
    factor = linear_scale.value();
  }
  if (scaling == "none") {
    rope.scaling = RopeScaling::none;
    return Status();
  }
  if (scaling != "linear" && scaling != "yarn" && scaling != "dynamic") {
    return Status::error("model: unknown " + r.prefix() + "rope.scaling.type '" + scaling.substr(0, 64) +
                         "' (none, linear, yarn, dynamic)");
  }
  if (!(factor.value() >= 1.0)) {
    return Status::error("model: " + r.prefix() + "rope.scaling.factor must be >= 1 for " + scaling + " scaling");
  }
  rope.scaling_factor = float(factor.value());
  rope.scaling = scaling == "linear" ? RopeScaling::linear : scaling == "yarn" ? RopeScaling::yarn : RopeScaling::dynamic_ntk;
  int64_t orig = 0;
  DS_RETURN_IF_ERROR(r.uint_in("rope.scaling.original_context_length", uint64_t(c.n_ctx_train),
                               uint64_t(ConfigReader::k_max_dim) * 16, &orig));
  if (orig == 0) return r.out_of_range("rope.scaling.original_context_length", 0);
  rope.n_ctx_orig = int(orig);
  auto beta_fast = r.bounded_float("rope.scaling.yarn_beta_fast", 32.0, 0.0, 1e6);
  auto beta_slow = r.bounded_float("rope.scaling.yarn_beta_slow", 1.0, 0.0, 1e6);
  if (!beta_fast.ok()) return beta_fast.status();
  if (!beta_slow.ok()) return beta_slow.status();
  rope.yarn_beta_fast = float(beta_fast.value());
  rope.yarn_beta_slow = float(beta_slow.value());
  return Status();
}

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig c;
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  c.family = find_family(arch_name.value());
  if (!c.family) {
    return Status::error("model: general.architecture '" + arch_name.value().substr(0, 64) + "' is not supported (supported: " +
                         supported_family_names() + ")");
  }
  auto name = file.get_string_or("general.name", arch_name.value());
  if (!name.ok()) return name.status();
  c.name = name.value();
  const ConfigReader r(file, arch_name.value() + ".");
  DS_RETURN_IF_ERROR(r.dim("embedding_length", &c.n_embd));
  DS_RETURN_IF_ERROR(r.dim("block_count", &c.n_layer));
  DS_RETURN_IF_ERROR(r.dim("attention.head_count", &c.n_head));
  DS_RETURN_IF_ERROR(r.dim("context_length", &c.n_ctx_train));
  c.n_head_kv = c.n_head;
  DS_RETURN_IF_ERROR(r.optional_dim("attention.head_count_kv", &c.n_head_kv));
  if (c.n_head % c.n_head_kv != 0) {
    return Status::error("model: " + r.prefix() + "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of " +
                         r.prefix() + "attention.head_count_kv " + std::to_string(c.n_head_kv));
  }
  auto eps = r.bounded_float("attention.layer_norm_rms_epsilon", 1e-5, 1e-30, 1.0);
  if (!eps.ok()) return eps.status();
  c.norm_eps = float(eps.value());
  DS_RETURN_IF_ERROR(c.family->read_config(r, c));
  // The vocabulary size comes from the embedding matrix (checked at weight load).
  if (const GgufTensorInfo* embd = file.find_tensor("token_embd.weight")) c.n_vocab = embd->ne[1];
  return c;
}

}  // namespace ds

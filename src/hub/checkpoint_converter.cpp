#include "hub/checkpoint_converter.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "gguf/gguf_writer.h"
#include "hub/hf_checkpoint.h"
#include "hub/hf_tokenizer.h"
#include "hub/tensor_plan.h"
#include "quant/weight_encoder.h"

namespace ds {
namespace {

using json = nlohmann::json;

struct Architecture {
  const char* hf;
  const char* gguf;
  TensorFamily family;
};

constexpr Architecture k_architectures[] = {
    {"LlamaForCausalLM", "llama", TensorFamily::llama},
    {"Qwen2ForCausalLM", "qwen2", TensorFamily::qwen2},
    {"DeepseekV2ForCausalLM", "deepseek2", TensorFamily::deepseek2},
    {"DeepseekV3ForCausalLM", "deepseek2", TensorFamily::deepseek2},
    {"DeepseekV32ForCausalLM", "deepseek32", TensorFamily::deepseek32},
    {"DeepseekV4ForCausalLM", "deepseek4", TensorFamily::deepseek4},
};

// config.json keys read into the metadata or checked, and those known to leave the weights' math alone.
const std::set<std::string> k_honoured = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_parameters", "rope_scaling", "head_dim", "tie_word_embeddings",
    "hidden_act", "attention_bias", "mlp_bias", "pretraining_tp", "use_sliding_window", "sliding_window", "max_window_layers", "use_mrope",
    "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "quantization_config"};
// DeepSeek V2/V3's: multi-head latent attention and the routed experts (refused on another architecture, which would ignore them).
const std::set<std::string> k_honoured_deepseek2 = {
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "qk_head_dim", "v_head_dim", "n_routed_experts",
    "n_shared_experts", "moe_intermediate_size", "num_experts_per_tok", "n_group", "topk_group", "topk_method", "scoring_func",
    "routed_scaling_factor", "norm_topk_prob", "first_k_dense_replace", "moe_layer_freq", "rope_interleave", "num_nextn_predict_layers"};
// DeepSeek-V3.2's beyond those: the lightning indexer, and transformers' per-layer list of dense and MoE
// layers (checked against first_k_dense_replace).
const std::set<std::string> k_honoured_deepseek32 = {"index_n_heads", "index_head_dim", "index_topk", "mlp_layer_types"};
// DeepSeek-V4's: hyper-connections, compressed attention with its indexer, the grouped output LoRA,
// hash-routed and sqrt-softplus-gated experts (FP4, expert_dtype), the SwiGLU clamp.
const std::set<std::string> k_honoured_deepseek4 = {
    "q_lora_rank", "qk_rope_head_dim", "o_groups", "o_lora_rank", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "moe_intermediate_size", "scoring_func", "norm_topk_prob", "routed_scaling_factor", "swiglu_limit", "compress_rope_theta",
    "compress_ratios", "index_n_heads", "index_head_dim", "index_topk", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "num_hash_layers",
    "num_nextn_predict_layers", "expert_dtype"};
const std::set<std::string> k_inert = {"_name_or_path", "torch_dtype", "dtype", "transformers_version", "initializer_range", "use_cache",
                                       "attention_dropout", "hidden_dropout", "return_dict", "output_hidden_states", "output_attentions",
                                       "is_encoder_decoder", "layer_types", "tokenizer_class", "auto_map", "aux_loss_alpha", "seq_aux",
                                       "ep_size", "output_router_logits", "router_aux_loss_coef"};

// llama.cpp's llama_ftype for the file's type (DeepSeek-V4's is MOSTLY_MXFP4_MOE, 38, whatever --type says).
uint32_t file_type_of(DType type, TensorFamily family) {
  if (family == TensorFamily::deepseek4) return 38;
  switch (type) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q8_0: return 7;
    default: return 32;  // bf16
  }
}

Result<int64_t> integer(const json& config, const char* key) {
  if (!config.contains(key) || !config[key].is_number_integer() || config[key].get<int64_t>() <= 0) {
    return Status::error("config.json: '" + std::string(key) + "' must be a positive integer");
  }
  return config[key].get<int64_t>();
}

Result<float> number(const json& object, const char* key, const char* where) {
  if (!object.contains(key) || !object[key].is_number()) return Status::error(std::string("config.json: '") + where + key + "' must be a number");
  return object[key].get<float>();
}

// gguf-py's model_weight_count_rounded_notation: at least 2 significant digits.
std::string rounded_count(int64_t parameters) {
  double scaled = double(parameters) * 1e-3;
  const char* suffix = "K";
  if (parameters > 1e12) {
    scaled = double(parameters) * 1e-12;
    suffix = "T";
  } else if (parameters > 1e9) {
    scaled = double(parameters) * 1e-9;
    suffix = "B";
  } else if (parameters > 1e6) {
    scaled = double(parameters) * 1e-6;
    suffix = "M";
  }
  const int digits = int(std::to_string(int64_t(std::llround(scaled))).size());
  char text[64];
  std::snprintf(text, sizeof text, "%.*f%s", std::max(2 - digits, 0), scaled, suffix);
  return text;
}

// gguf-py's size label: the parameters, or for experts "N x (shared + one expert's)".
std::string size_label(const std::vector<PlannedTensor>& plan, int64_t n_expert) {
  int64_t total = 0, per_expert = 0;
  bool any_experts = false;
  for (const PlannedTensor& t : plan) {
    if (t.experts) {
      per_expert += t.elements() / n_expert;
      any_experts = true;
    } else {
      total += t.elements();
    }
  }
  return any_experts ? std::to_string(n_expert) + "x" + rounded_count(total + per_expert) : rounded_count(total);
}

// The RoPE settings: rope_parameters (transformers 5) or rope_scaling and rope_theta (before).
struct Rope {
  std::string type = "default";
  json parameters = json::object();
  double theta = 10000.0;
};

Result<Rope> rope_of(const json& config) {
  Rope rope;
  json p = config.value("rope_parameters", json());
  if (p.is_null()) p = config.value("rope_scaling", json());
  if (!p.is_null() && !p.is_object()) return Status::error("config.json: rope_parameters must be an object");
  if (p.is_object()) rope.parameters = p;
  rope.type = rope.parameters.value("rope_type", rope.parameters.value("type", std::string("default")));
  rope.theta = rope.parameters.value("rope_theta", config.value("rope_theta", 10000.0));
  if (rope.type != "default" && rope.type != "yarn" && rope.type != "linear" && rope.type != "llama3") {
    return Status::error("config.json: RoPE scaling '" + rope.type + "' is not converted yet");
  }
  return rope;
}

// Llama 3's RoPE scaling (R1-Distill-Llama's) as its GGUF carries it: rope_freqs.weight, a divisor of
// each pair's angle: 1 for wavelengths under original / high_freq_factor, `factor` over original /
// low_freq_factor, a smooth mix between. Computed in float32 in the order llama.cpp's converter
// computes it with torch (a scalar divided by a tensor is the tensor's reciprocal times the scalar),
// the power in double rounded once: torch's float32 power is not correctly rounded, so a factor
// can differ from llama.cpp's by one float32 ulp on some settings.
Result<PlannedTensor> llama3_rope_freqs(const Rope& rope, int64_t n_rot) {
  const json& p = rope.parameters;
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (p.contains(key) && !p[key].is_number()) return Status::error(std::string("config.json: rope_parameters.") + key + " must be a number");
  }
  const double factor = p.value("factor", 8.0), low = p.value("low_freq_factor", 1.0), high = p.value("high_freq_factor", 4.0);
  const double original = p.value("original_max_position_embeddings", 8192.0);
  if (!(factor > 0) || !(low > 0) || !(high > low) || !(original > 0)) {
    return Status::error("config.json: llama3 RoPE needs factor > 0 and 0 < low_freq_factor < high_freq_factor");
  }
  std::vector<float> factors;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const float exponent = float(i) / float(n_rot);
    const float power = float(std::pow(double(float(rope.theta)), double(exponent)));
    const float freq = 1.0f / power;
    const float wavelength = (1.0f / freq) * float(2 * M_PI);
    if (double(wavelength) < original / high) {
      factors.push_back(1.0f);
    } else if (double(wavelength) > original / low) {
      factors.push_back(float(factor));
    } else {
      const float smooth = ((1.0f / wavelength) * float(original) - float(low)) / float(high - low);
      factors.push_back(1.0f / ((1.0f - smooth) / float(factor) + smooth));
    }
  }
  PlannedTensor t;
  t.name = "rope_freqs.weight";
  t.source = "config.json: rope_parameters (llama3)";
  t.vector = true;
  t.shape = {int64_t(factors.size())};
  t.row = [factors](int64_t, float* out) { std::copy(factors.begin(), factors.end(), out); };
  t.release = [](int64_t) {};
  return t;
}

Status refuse_unknown_settings(const json& config, TensorFamily family) {
  std::vector<const std::set<std::string>*> own = {&k_honoured, &k_inert};
  if (family == TensorFamily::deepseek2 || family == TensorFamily::deepseek32) own.push_back(&k_honoured_deepseek2);
  if (family == TensorFamily::deepseek32) own.push_back(&k_honoured_deepseek32);
  if (family == TensorFamily::deepseek4) own.push_back(&k_honoured_deepseek4);
  for (const auto& [key, value] : config.items()) {
    if (std::none_of(own.begin(), own.end(), [&key = key](const std::set<std::string>* keys) { return keys->count(key) > 0; })) {
      return Status::error("config.json: '" + key + "' is not a setting dsinfer converts (it may change the model's math), so the model is refused");
    }
  }
  const auto refuse_unless = [&](bool ok, const std::string& what) { return ok ? Status() : Status::error("config.json: " + what + " is not converted"); };
  DS_RETURN_IF_ERROR(refuse_unless(config.value("hidden_act", "silu") == "silu", "hidden_act other than silu"));
  DS_RETURN_IF_ERROR(refuse_unless(config.value("pretraining_tp", 1) == 1, "pretraining_tp other than 1"));
  DS_RETURN_IF_ERROR(refuse_unless(!config.value("mlp_bias", false), "mlp_bias"));
  DS_RETURN_IF_ERROR(refuse_unless(!config.value("use_sliding_window", false), "use_sliding_window"));
  DS_RETURN_IF_ERROR(refuse_unless(!config.value("use_mrope", false), "use_mrope (multimodal RoPE)"));
  DS_RETURN_IF_ERROR(refuse_unless(config.value("moe_layer_freq", 1) == 1, "moe_layer_freq other than 1"));
  DS_RETURN_IF_ERROR(refuse_unless(config.value("rope_interleave", true), "rope_interleave false"));
  const std::string topk = config.value("topk_method", std::string("greedy"));
  DS_RETURN_IF_ERROR(refuse_unless(topk == "greedy" || topk == "group_limited_greedy" || topk == "noaux_tc", "topk_method '" + topk + "'"));
  if (config.contains("mlp_layer_types")) {
    // transformers' spelling of first_k_dense_replace: that many "dense" layers, then "sparse" ones.
    const json& types = config["mlp_layer_types"];
    const int64_t dense = config.value("first_k_dense_replace", int64_t(0));
    bool consistent = types.is_array();
    for (size_t i = 0; consistent && i < types.size(); ++i) consistent = types[i] == (int64_t(i) < dense ? "dense" : "sparse");
    DS_RETURN_IF_ERROR(refuse_unless(consistent, "mlp_layer_types other than first_k_dense_replace's dense layers then sparse ones"));
  }
  if (family == TensorFamily::deepseek4) {
    const std::string scoring = config.value("scoring_func", std::string("sqrtsoftplus"));
    DS_RETURN_IF_ERROR(refuse_unless(scoring == "sqrtsoftplus", "scoring_func '" + scoring + "' on DeepSeek-V4 (sqrtsoftplus only)"));
    const std::string experts = config.value("expert_dtype", std::string("fp4"));
    DS_RETURN_IF_ERROR(refuse_unless(experts == "fp4", "expert_dtype '" + experts + "' (FP4 experts, repacked as MXFP4, only)"));
  }
  return Status();
}

// The deepseek2 (and deepseek32) keys beyond the common ones, as llama.cpp's DeepseekV2Model writes them;
// V3.2's indexer and multi-token-prediction layers as its DeepseekV32Model adds them.
Status add_deepseek2_keys(GgufWriter& w, const std::string& a, const json& config, const Rope& rope, int64_t n_layer) {
  const bool moe = config.contains("n_routed_experts") && !config["n_routed_experts"].is_null();
  const int64_t leading_dense = config.contains("first_k_dense_replace") ? config["first_k_dense_replace"].get<int64_t>() : (moe ? 0 : n_layer);
  w.add_uint32(a + ".leading_dense_block_count", uint32_t(leading_dense));
  w.add_uint32(a + ".vocab_size", uint32_t(config["vocab_size"].get<int64_t>()));
  if (config.contains("q_lora_rank") && !config["q_lora_rank"].is_null()) {
    auto q_lora = integer(config, "q_lora_rank");
    if (!q_lora.ok()) return q_lora.status();
    w.add_uint32(a + ".attention.q_lora_rank", uint32_t(q_lora.value()));
  }
  const int64_t kv_lora = config.value("kv_lora_rank", int64_t(512));
  auto rope_dim = integer(config, "qk_rope_head_dim"), nope = integer(config, "qk_nope_head_dim"), v = integer(config, "v_head_dim");
  for (const auto* r : {&rope_dim, &nope, &v}) {
    if (!r->ok()) return r->status();
  }
  w.add_uint32(a + ".attention.kv_lora_rank", uint32_t(kv_lora));
  w.add_uint32(a + ".attention.key_length", uint32_t(kv_lora + rope_dim.value()));
  w.add_uint32(a + ".attention.value_length", uint32_t(kv_lora));
  w.add_uint32(a + ".attention.key_length_mla", uint32_t(nope.value() + rope_dim.value()));
  w.add_uint32(a + ".attention.value_length_mla", uint32_t(v.value()));
  const json ff = config.contains("moe_intermediate_size") ? config["moe_intermediate_size"] : config["intermediate_size"];
  w.add_uint32(a + ".expert_feed_forward_length", uint32_t(ff.get<int64_t>()));
  w.add_uint32(a + ".expert_shared_count", uint32_t(config.value("n_shared_experts", int64_t(0))));
  if (config.contains("routed_scaling_factor")) {
    auto scale = number(config, "routed_scaling_factor", "");
    if (!scale.ok()) return scale.status();
    w.add_float32(a + ".expert_weights_scale", scale.value());
  }
  if (config.value("norm_topk_prob", false)) w.add_bool(a + ".expert_weights_norm", true);
  w.add_uint32(a + ".rope.dimension_count", uint32_t(rope_dim.value()));
  if (rope.parameters.contains("mscale_all_dim")) {
    auto mscale = number(rope.parameters, "mscale_all_dim", "rope_parameters.");
    if (!mscale.ok()) return mscale.status();
    w.add_float32(a + ".rope.scaling.yarn_log_multiplier", 0.1f * mscale.value());  // llama.cpp's legacy form for deepseek2
  }
  if (a != "deepseek32") return Status();
  if (config.contains("num_nextn_predict_layers") && !config["num_nextn_predict_layers"].is_null()) {
    w.add_uint32(a + ".nextn_predict_layers", uint32_t(config.value("num_nextn_predict_layers", int64_t(0))));
  }
  for (const auto& [key, gguf_key] : {std::pair<const char*, const char*>{"index_n_heads", "attention.indexer.head_count"},
                                      {"index_head_dim", "attention.indexer.key_length"}, {"index_topk", "attention.indexer.top_k"}}) {
    auto value = integer(config, key);
    if (!value.ok()) return value.status();
    w.add_uint32(a + "." + gguf_key, uint32_t(value.value()));
  }
  return Status();
}

// The deepseek4 keys beyond the common ones, as llama.cpp's DeepseekV4Model writes them.
Status add_deepseek4_keys(GgufWriter& w, const json& config, int64_t n_embd, int64_t n_layer) {
  const std::string a = "deepseek4";
  const std::pair<const char*, const char*> counts[] = {
      {"qk_rope_head_dim", "rope.dimension_count"},          {"q_lora_rank", "attention.q_lora_rank"},
      {"sliding_window", "attention.sliding_window"},        {"moe_intermediate_size", "expert_feed_forward_length"},
      {"n_shared_experts", "expert_shared_count"},           {"index_n_heads", "attention.indexer.head_count"},
      {"index_head_dim", "attention.indexer.key_length"},    {"index_topk", "attention.indexer.top_k"},
      {"o_groups", "attention.output_group_count"},          {"o_lora_rank", "attention.output_lora_rank"},
      {"hc_mult", "hyper_connection.count"},                 {"hc_sinkhorn_iters", "hyper_connection.sinkhorn_iterations"},
      {"num_hash_layers", "hash_layer_count"}};
  for (const auto& [key, gguf_key] : counts) {
    auto value = integer(config, key);
    if (!value.ok()) return value.status();
    w.add_uint32(a + "." + gguf_key, uint32_t(value.value()));
  }
  auto scale = number(config, "routed_scaling_factor", ""), clamp = number(config, "swiglu_limit", ""),
       compress_theta = number(config, "compress_rope_theta", ""), hc_eps = number(config, "hc_eps", "");
  for (const auto* r : {&scale, &clamp, &compress_theta, &hc_eps}) {
    if (!r->ok()) return r->status();
  }
  w.add_float32(a + ".expert_weights_scale", scale.value());
  w.add_bool(a + ".expert_weights_norm", config.value("norm_topk_prob", false));
  w.add_float32_array(a + ".swiglu_clamp_exp", std::vector<float>(size_t(n_layer), clamp.value()));
  w.add_float32_array(a + ".swiglu_clamp_shexp", std::vector<float>(size_t(n_layer), clamp.value()));
  const json ratios = config.value("compress_ratios", json());
  if (!ratios.is_array() || int64_t(ratios.size()) < n_layer) return Status::error("config.json: 'compress_ratios' must list every layer's ratio");
  std::vector<int32_t> listed;
  for (const json& r : ratios) {
    if (!r.is_number_integer() || (r != 0 && r != 4 && r != 128)) return Status::error("config.json: 'compress_ratios' holds " + r.dump() + " (0, 4 or 128)");
    listed.push_back(r.get<int32_t>());
  }
  w.add_int32_array(a + ".attention.compress_ratios", listed);
  w.add_float32(a + ".attention.compress_rope_freq_base", compress_theta.value());
  w.add_float32(a + ".hyper_connection.epsilon", hc_eps.value());
  w.add_uint32(a + ".embedding_length_out", uint32_t(n_embd * config["hc_mult"].get<int64_t>()));
  return Status();
}

Status convert(const ConvertOptions& options, const ConvertProgress& progress) {
  if (options.type != DType::f32 && options.type != DType::f16 && options.type != DType::bf16 && options.type != DType::q8_0) {
    return Status::error("convert: --type must be F32, F16, BF16 or Q8_0");
  }
  auto opened = HfCheckpoint::open(options.dir);
  if (!opened.ok()) return opened.status();
  const HfCheckpoint& checkpoint = *opened.value();
  const json& config = checkpoint.config();

  const json architectures = config.value("architectures", json());
  if (!architectures.is_array() || architectures.size() != 1 || !architectures[0].is_string()) {
    return Status::error("config.json: 'architectures' must name one architecture");
  }
  const Architecture* arch = nullptr;
  for (const Architecture& a : k_architectures) {
    if (architectures[0] == a.hf) arch = &a;
  }
  if (!arch) {
    return Status::error("config.json: architecture " + architectures[0].get<std::string>() +
                         " is not one dsinfer converts (LlamaForCausalLM, Qwen2ForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, "
                         "DeepseekV32ForCausalLM, DeepseekV4ForCausalLM)");
  }
  const bool deepseek = arch->family == TensorFamily::deepseek2 || arch->family == TensorFamily::deepseek32;
  const bool v4 = arch->family == TensorFamily::deepseek4;
  DS_RETURN_IF_ERROR(refuse_unknown_settings(config, arch->family));

  auto n_embd = integer(config, "hidden_size");
  // V4 has experts in every layer: no dense width, and no feed_forward_length key.
  auto n_ff = v4 ? Result<int64_t>(int64_t(0)) : integer(config, "intermediate_size");
  auto n_layer = integer(config, "num_hidden_layers");
  auto n_head = integer(config, "num_attention_heads");
  auto n_ctx = integer(config, "max_position_embeddings");
  auto n_vocab = integer(config, "vocab_size");
  for (const auto* r : {&n_embd, &n_ff, &n_layer, &n_head, &n_ctx, &n_vocab}) {
    if (!r->ok()) return r->status();
  }
  auto n_head_kv = config.contains("num_key_value_heads") ? integer(config, "num_key_value_heads") : n_head;
  auto head_dim = config.contains("head_dim") ? integer(config, "head_dim") : Result<int64_t>(n_embd.value() / n_head.value());
  if (!n_head_kv.ok()) return n_head_kv.status();
  if (!head_dim.ok()) return head_dim.status();
  auto rope = rope_of(config);
  if (!rope.ok()) return rope.status();

  PlanSettings settings;
  settings.family = arch->family;
  settings.n_layer = n_layer.value();
  settings.n_head = n_head.value();
  settings.n_head_kv = n_head_kv.value();
  settings.tied_output = config.value("tie_word_embeddings", false);
  int64_t n_expert = 0;
  if (v4) {
    auto experts = integer(config, "n_routed_experts");
    if (!experts.ok()) return experts.status();
    n_expert = settings.n_expert = experts.value();
    settings.n_hash_layers = config.value("num_hash_layers", int64_t(0));
  }
  if (deepseek) {
    auto nope = integer(config, "qk_nope_head_dim"), v = integer(config, "v_head_dim");
    if (!nope.ok()) return nope.status();
    if (!v.ok()) return v.status();
    settings.qk_nope = nope.value();
    settings.v_head = v.value();
    if (config.contains("n_routed_experts") && !config["n_routed_experts"].is_null()) {
      auto experts = integer(config, "n_routed_experts");
      if (!experts.ok()) return experts.status();
      n_expert = settings.n_expert = experts.value();
    }
    const json nextn = config.value("num_nextn_predict_layers", json(0));
    if (!nextn.is_null() && (!nextn.is_number_integer() || nextn.get<int64_t>() < 0 || nextn.get<int64_t>() > 16)) {
      return Status::error("config.json: 'num_nextn_predict_layers' must be an integer from 0 to 16");
    }
    settings.n_nextn_layers = nextn.is_null() ? 0 : nextn.get<int64_t>();
  }
  // deepseek32 keeps the multi-token-prediction layers as blocks after the others (deepseek2 drops them).
  const int64_t n_block = n_layer.value() + (arch->family == TensorFamily::deepseek32 ? settings.n_nextn_layers : 0);
  auto planned = plan_tensors(checkpoint, settings);
  if (!planned.ok()) return planned.status();
  std::vector<PlannedTensor> plan = planned.take();
  if (rope.value().type == "llama3") {
    if (arch->family != TensorFamily::llama) return Status::error("config.json: llama3 RoPE scaling on " + architectures[0].get<std::string>() + " is not converted");
    auto freqs = llama3_rope_freqs(rope.value(), head_dim.value());
    if (!freqs.ok()) return freqs.status();
    plan.push_back(freqs.take());
  }

  // The shapes config.json implies, for what every family has (and a dense attention's projections).
  const auto expect = [&](const std::string& name, std::vector<int64_t> shape) -> Status {
    for (const PlannedTensor& t : plan) {
      if (t.name != name) continue;
      if (t.shape != shape) {
        std::string got, want;
        for (const int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
        for (const int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
        return Status::error(t.source + " (GGUF " + name + ") is {" + got + "} in GGUF order, but config.json implies {" + want + "}");
      }
      return Status();
    }
    return Status::error(options.dir + ": the checkpoint has no tensor for '" + name + "'");
  };
  DS_RETURN_IF_ERROR(expect("token_embd.weight", {n_embd.value(), n_vocab.value()}));
  DS_RETURN_IF_ERROR(expect("output_norm.weight", {n_embd.value()}));
  if (!settings.tied_output) DS_RETURN_IF_ERROR(expect("output.weight", {n_embd.value(), n_vocab.value()}));
  for (int64_t l = 0; l < n_layer.value(); ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    DS_RETURN_IF_ERROR(expect(b + "attn_norm.weight", {n_embd.value()}));
    DS_RETURN_IF_ERROR(expect(b + "ffn_norm.weight", {n_embd.value()}));
    if (v4) {
      const int64_t q_lora = config.value("q_lora_rank", int64_t(0)), ff = config.value("moe_intermediate_size", int64_t(0));
      DS_RETURN_IF_ERROR(expect(b + "attn_q_a.weight", {n_embd.value(), q_lora}));
      DS_RETURN_IF_ERROR(expect(b + "attn_q_b.weight", {q_lora, n_head.value() * head_dim.value()}));
      DS_RETURN_IF_ERROR(expect(b + "attn_kv.weight", {n_embd.value(), head_dim.value()}));
      DS_RETURN_IF_ERROR(expect(b + "ffn_gate_exps.weight", {n_embd.value(), ff, n_expert}));
      DS_RETURN_IF_ERROR(expect(b + "ffn_down_exps.weight", {ff, n_embd.value(), n_expert}));
      if (l < settings.n_hash_layers) DS_RETURN_IF_ERROR(expect(b + "ffn_gate_tid2eid.weight", {config.value("num_experts_per_tok", int64_t(0)), n_vocab.value()}));
    }
    if (deepseek || v4) continue;
    DS_RETURN_IF_ERROR(expect(b + "attn_q.weight", {n_embd.value(), n_head.value() * head_dim.value()}));
    DS_RETURN_IF_ERROR(expect(b + "attn_k.weight", {n_embd.value(), n_head_kv.value() * head_dim.value()}));
    DS_RETURN_IF_ERROR(expect(b + "attn_v.weight", {n_embd.value(), n_head_kv.value() * head_dim.value()}));
    DS_RETURN_IF_ERROR(expect(b + "attn_output.weight", {n_head.value() * head_dim.value(), n_embd.value()}));
    DS_RETURN_IF_ERROR(expect(b + "ffn_gate.weight", {n_embd.value(), n_ff.value()}));
    DS_RETURN_IF_ERROR(expect(b + "ffn_up.weight", {n_embd.value(), n_ff.value()}));
    DS_RETURN_IF_ERROR(expect(b + "ffn_down.weight", {n_ff.value(), n_embd.value()}));
  }

  auto tokenizer = read_hf_tokenizer(options.dir, config, n_vocab.value());
  if (!tokenizer.ok()) return tokenizer.status();

  // The metadata, key for key as llama.cpp's converter writes it for the architecture.
  GgufWriter writer;
  const std::string a = arch->gguf;
  writer.add_string("general.architecture", a);
  writer.add_string("general.type", "model");
  writer.add_string("general.name", !options.name.empty() ? options.name : std::filesystem::path(options.dir).lexically_normal().filename().string());
  writer.add_string("general.size_label", size_label(plan, n_expert));
  writer.add_uint32(a + ".block_count", uint32_t(n_block));
  writer.add_uint32(a + ".context_length", uint32_t(n_ctx.value()));
  writer.add_uint32(a + ".embedding_length", uint32_t(n_embd.value()));
  if (!v4) writer.add_uint32(a + ".feed_forward_length", uint32_t(n_ff.value()));
  writer.add_uint32(a + ".attention.head_count", uint32_t(n_head.value()));
  // MLA is written as one shared key-value head (llama.cpp's MQA form of it).
  if (deepseek) {
    writer.add_uint32(a + ".attention.head_count_kv", 1);
  } else if (config.contains("num_key_value_heads")) {
    writer.add_uint32(a + ".attention.head_count_kv", uint32_t(n_head_kv.value()));
  }
  if (rope.value().type == "linear") {
    auto factor = number(rope.value().parameters, "factor", "rope_parameters.");
    if (!factor.ok()) return factor.status();
    writer.add_string(a + ".rope.scaling.type", "linear");
    writer.add_float32(a + ".rope.scaling.factor", factor.value());
  }
  if (rope.value().type == "yarn") {
    const json& p = rope.value().parameters;
    auto factor = number(p, "factor", "rope_parameters.");
    auto original = integer(p, "original_max_position_embeddings");
    if (!factor.ok()) return factor.status();
    if (!original.ok()) return Status::error("config.json: yarn RoPE needs rope_parameters.original_max_position_embeddings");
    writer.add_string(a + ".rope.scaling.type", "yarn");
    writer.add_float32(a + ".rope.scaling.factor", factor.value());
    writer.add_uint32(a + ".rope.scaling.original_context_length", uint32_t(original.value()));
    const std::pair<const char*, const char*> optional[] = {{"extrapolation_factor", "yarn_ext_factor"}, {"attention_factor", "yarn_attn_factor"},
                                                            {"attn_factor", "yarn_attn_factor"},        {"beta_fast", "yarn_beta_fast"},
                                                            {"beta_slow", "yarn_beta_slow"}};
    for (const auto& [key, gguf_key] : optional) {
      if (!p.contains(key)) continue;
      auto value = number(p, key, "rope_parameters.");
      if (!value.ok()) return value.status();
      writer.add_float32(a + ".rope.scaling." + gguf_key, value.value());
    }
  }
  writer.add_float32(a + ".rope.freq_base", float(rope.value().theta));
  if (config.contains("rms_norm_eps") || deepseek) {
    const json eps = config.value("rms_norm_eps", json(1e-6));
    if (!eps.is_number()) return Status::error("config.json: 'rms_norm_eps' must be a number");
    writer.add_float32(a + ".attention.layer_norm_rms_epsilon", eps.get<float>());
  }
  if (deepseek || v4) {
    if (n_expert > 0) writer.add_uint32(a + ".expert_count", uint32_t(n_expert));
    for (const auto& [key, gguf_key] : {std::pair<const char*, const char*>{"num_experts_per_tok", "expert_used_count"},
                                        {"n_group", "expert_group_count"}, {"topk_group", "expert_group_used_count"}}) {
      if (!config.contains(key) || config[key].is_null()) continue;
      auto value = integer(config, key);
      if (!value.ok()) return value.status();
      writer.add_uint32(a + "." + gguf_key, uint32_t(value.value()));
    }
    if (config.contains("scoring_func")) {
      // llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid, 4 sqrt-softplus (V4's; refused above on any other).
      const std::string scoring = config.value("scoring_func", std::string());
      if (scoring != "softmax" && scoring != "sigmoid" && !(v4 && scoring == "sqrtsoftplus")) {
        return Status::error("config.json: scoring_func '" + scoring + "' is not converted");
      }
      writer.add_uint32(a + ".expert_gating_func", scoring == "softmax" ? 1 : scoring == "sigmoid" ? 2 : 4);
    }
  }
  if (!deepseek && config.contains("head_dim")) {
    writer.add_uint32(a + ".attention.key_length", uint32_t(head_dim.value()));
    writer.add_uint32(a + ".attention.value_length", uint32_t(head_dim.value()));
  }
  writer.add_uint32("general.file_type", file_type_of(options.type, arch->family));
  if (deepseek) {
    DS_RETURN_IF_ERROR(add_deepseek2_keys(writer, a, config, rope.value(), n_layer.value()));
  } else if (v4) {
    DS_RETURN_IF_ERROR(add_deepseek4_keys(writer, config, n_embd.value(), n_layer.value()));
  } else if (arch->family == TensorFamily::llama) {
    writer.add_uint32(a + ".vocab_size", uint32_t(n_vocab.value()));
    writer.add_uint32(a + ".rope.dimension_count", uint32_t(head_dim.value()));
  }
  writer.add_uint32("general.quantization_version", 2);
  const GgufTokenizer& tok = tokenizer.value();
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string("tokenizer.ggml.pre", tok.pre);
  writer.add_string_array("tokenizer.ggml.tokens", tok.tokens);
  writer.add_int32_array("tokenizer.ggml.token_type", tok.types);
  if (!tok.merges.empty()) writer.add_string_array("tokenizer.ggml.merges", tok.merges);
  for (const auto& [type, id] : tok.special_ids) writer.add_uint32("tokenizer.ggml." + type + "_token_id", id);
  for (const auto& [type, on] : tok.add_special) writer.add_bool("tokenizer.ggml.add_" + type + "_token", on);
  if (tok.chat_template) writer.add_string("tokenizer.chat_template", *tok.chat_template);

  // Each tensor's type as llama.cpp's converter picks it: the plan's where it keeps the source's (V4);
  // else vectors, norms, the routers and anything but a weight stay f32; a row Q8_0's 32-element blocks
  // do not divide falls back to f16.
  std::vector<DType> types;
  int64_t total = 0;
  for (const PlannedTensor& t : plan) {
    const bool weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    const bool f32 = t.vector || !weight || t.name.find("_norm.weight") != std::string::npos || t.name.find("ffn_gate_inp.") != std::string::npos ||
                     t.name.find("indexer.proj.") != std::string::npos;
    DType type = t.type ? *t.type : f32 ? DType::f32 : options.type;
    if (type == DType::q8_0 && t.shape[0] % 32 != 0) type = DType::f16;
    types.push_back(type);
    writer.declare_tensor(t.name, type, t.shape);
    total += t.rows() * row_bytes(type, t.shape[0]);
  }
  if (progress.started) progress.started(total);
  int64_t done = 0;
  return writer.write_file(options.out, [&](size_t index, std::vector<uint8_t>& bytes) -> Status {
    const PlannedTensor& t = plan[index];
    const DType type = types[index];
    const int64_t columns = t.shape[0], rows = t.rows();
    const size_t row_size = row_bytes(type, columns);
    bytes.resize(size_t(rows) * row_size);
    std::vector<float> row(static_cast<size_t>(columns));
    // The input's pages go as its rows are done, every 4 MiB of them.
    const int64_t release_every = std::max<int64_t>(1, (int64_t(4) << 20) / std::max<int64_t>(1, columns * 2));
    for (int64_t r = 0; r < rows; ++r) {
      if (r % release_every == 0) t.release(r);
      if (t.raw_row) {
        t.raw_row(r, bytes.data() + size_t(r) * row_size);
        continue;
      }
      t.row(r, row.data());
      if (!quantize_weight_row(type, row.data(), bytes.data() + size_t(r) * row_size, columns)) {
        return Status::error("convert: cannot write " + t.name + " as " + dtype_name(type));
      }
    }
    t.release(rows);
    done += int64_t(bytes.size());
    if (progress.progress) progress.progress(done);
    return Status();
  });
}

}  // namespace

Status convert_checkpoint(const ConvertOptions& options, const ConvertProgress& progress) {
  // A config.json value of the wrong JSON type throws in the JSON library: an error, not a crash.
  return catching_exceptions("convert", [&]() -> Result<bool> {
           DS_RETURN_IF_ERROR(convert(options, progress));
           return true;
         }).status();
}

}  // namespace ds

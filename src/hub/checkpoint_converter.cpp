#include "hub/checkpoint_converter.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "gguf/gguf_writer.h"
#include "hub/hf_checkpoint.h"
#include "hub/hf_tokenizer.h"
#include "quant/weight_encoder.h"

namespace ds {
namespace {

using json = nlohmann::json;

struct Architecture {
  const char* hf;
  const char* gguf;
  bool permute_qk;        // llama: HF's rotary halves to GGML's interleaved pairs
  bool vocab_and_rope_keys;  // llama writes vocab_size and rope.dimension_count
};

constexpr Architecture k_architectures[] = {
    {"LlamaForCausalLM", "llama", true, true},
    {"Qwen2ForCausalLM", "qwen2", false, false},
};

// config.json keys read into the metadata, and those known to leave the weights' math alone.
const std::set<std::string> k_honoured = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                          "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_parameters",
                                          "rope_scaling", "head_dim", "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias",
                                          "pretraining_tp", "use_sliding_window", "use_mrope", "sliding_window", "max_window_layers", "architectures",
                                          "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "quantization_config"};
const std::set<std::string> k_inert = {"_name_or_path", "torch_dtype", "dtype", "transformers_version", "initializer_range", "use_cache",
                                       "attention_dropout", "hidden_dropout", "return_dict", "output_hidden_states", "output_attentions",
                                       "is_encoder_decoder", "layer_types", "tokenizer_class"};

// llama.cpp's llama_ftype for the file's type.
uint32_t file_type_of(DType type) {
  switch (type) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q8_0: return 7;
    default: return 32;  // bf16
  }
}

struct OutputTensor {
  std::string name, source;
  DType type;
  int64_t rows, columns;  // of the source; the GGUF shape is {columns, rows}
  bool vector;            // a 1-D tensor
  int64_t permute_heads = 0;  // q/k rows into GGML's rotary order, over this many heads
};

// Output row r of a permuted q or k: llama.cpp's reshape(heads, 2, d/2, ...).swapaxes(1, 2).
int64_t source_row(const OutputTensor& t, int64_t r) {
  if (t.permute_heads == 0) return r;
  const int64_t head_dim = t.rows / t.permute_heads, half = head_dim / 2;
  const int64_t h = r / head_dim, within = r % head_dim;
  return h * head_dim + (within % 2) * half + within / 2;
}

Result<int64_t> integer(const json& config, const char* key) {
  if (!config.contains(key) || !config[key].is_number_integer() || config[key].get<int64_t>() <= 0) {
    return Status::error("config.json: '" + std::string(key) + "' must be a positive integer");
  }
  return config[key].get<int64_t>();
}

// The rope settings (rope_parameters in transformers 5, rope_scaling and rope_theta before): only unscaled RoPE converts.
Result<double> rope_theta(const json& config) {
  json rope = config.value("rope_parameters", json());
  if (rope.is_null()) rope = config.value("rope_scaling", json());
  double theta = config.value("rope_theta", 10000.0);
  if (rope.is_object()) {
    const std::string type = rope.value("rope_type", rope.value("type", "default"));
    if (type != "default") return Status::error("config.json: RoPE scaling '" + type + "' is not converted yet");
    theta = rope.value("rope_theta", theta);
  } else if (!rope.is_null()) {
    return Status::error("config.json: rope_parameters must be an object");
  }
  return theta;
}

std::string size_label(int64_t parameters) {
  // gguf-py's model_weight_count_rounded_notation: 2 significant digits at least.
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
  const int decimals = std::max(2 - digits, 0);
  char text[64];
  std::snprintf(text, sizeof text, "%.*f%s", decimals, scaled, suffix);
  return text;
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
  if (!arch) return Status::error("config.json: architecture " + architectures[0].get<std::string>() + " is not one dsinfer converts (LlamaForCausalLM, Qwen2ForCausalLM)");
  for (const auto& [key, value] : config.items()) {
    if (!k_honoured.count(key) && !k_inert.count(key)) {
      return Status::error("config.json: '" + key + "' is not a setting dsinfer converts (it may change the model's math), so the model is refused");
    }
  }
  if (config.value("hidden_act", "silu") != "silu") return Status::error("config.json: hidden_act '" + config["hidden_act"].dump() + "' is not converted (silu only)");
  if (config.value("pretraining_tp", 1) != 1) return Status::error("config.json: pretraining_tp other than 1 is not converted");
  if (config.value("mlp_bias", false)) return Status::error("config.json: mlp_bias is not converted");
  if (config.value("use_sliding_window", false)) return Status::error("config.json: use_sliding_window is not converted");
  if (config.value("use_mrope", false)) return Status::error("config.json: use_mrope (multimodal RoPE) is not converted");

  auto n_embd = integer(config, "hidden_size");
  auto n_ff = integer(config, "intermediate_size");
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
  auto theta = rope_theta(config);
  if (!theta.ok()) return theta.status();

  // The tensors, mapped to llama.cpp's names and checked against the architecture.
  std::vector<OutputTensor> outputs;
  std::set<std::string> used;
  const std::regex layer(R"(model\.layers\.(\d+)\.(.*))");
  const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},       {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},       {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},           {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},           {"self_attn.o_proj.bias", "attn_output.bias"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},        {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  const std::map<std::string, std::string> global = {
      {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"}, {"lm_head.weight", "output.weight"}};
  int64_t parameters = 0;
  for (const std::string& name : checkpoint.tensor_names()) {
    if (checkpoint.is_scale(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    std::string gguf_name;
    std::smatch m;
    if (global.count(name)) {
      gguf_name = global.at(name);
    } else if (std::regex_match(name, m, layer) && per_layer.count(m[2].str()) && std::stoll(m[1].str()) < n_layer.value()) {
      gguf_name = "blk." + m[1].str() + "." + per_layer.at(m[2].str());
    } else {
      return Status::error("tensor '" + name + "' is not one of " + std::string(arch->hf) + "'s (" + options.dir + ")");
    }
    auto reader = checkpoint.rows(name);
    if (!reader.ok()) return reader.status();
    OutputTensor t;
    t.name = gguf_name;
    t.source = name;
    t.rows = reader.value().rows();
    t.columns = reader.value().columns();
    t.vector = checkpoint.find(name)->shape.size() == 1;
    // Vectors, norms and anything but a weight stay f32, as llama.cpp's converter keeps them; a row
    // that Q8_0's 32-element blocks do not divide falls back to f16 as there.
    const bool weight = gguf_name.size() > 7 && gguf_name.compare(gguf_name.size() - 7, 7, ".weight") == 0;
    const bool norm = gguf_name.find("_norm.weight") != std::string::npos;
    t.type = t.vector || norm || !weight ? DType::f32 : options.type;
    if (t.type == DType::q8_0 && t.columns % 32 != 0) t.type = DType::f16;
    if (arch->permute_qk) {
      if (m.size() > 2 && (m[2].str().rfind("self_attn.q_proj.", 0) == 0)) t.permute_heads = n_head.value();
      if (m.size() > 2 && (m[2].str().rfind("self_attn.k_proj.", 0) == 0)) t.permute_heads = n_head_kv.value();
      if (t.permute_heads && (t.vector ? t.columns : t.rows) % (2 * t.permute_heads) != 0) {
        return Status::error("tensor '" + name + "': its rows do not divide into " + std::to_string(t.permute_heads) + " heads");
      }
    }
    parameters += t.rows * t.columns;
    outputs.push_back(std::move(t));
    used.insert(gguf_name);
  }
  // What the architecture needs, with the shapes config.json implies.
  const auto expect = [&](const std::string& name, int64_t rows, int64_t columns) -> Status {
    for (const OutputTensor& t : outputs) {
      if (t.name != name) continue;
      if ((t.vector && (rows != 1 || t.columns != columns)) || (!t.vector && (t.rows != rows || t.columns != columns))) {
        return Status::error("tensor '" + t.source + "' is [" + std::to_string(t.rows) + ", " + std::to_string(t.columns) + "], but config.json implies [" +
                             std::to_string(rows) + ", " + std::to_string(columns) + "]");
      }
      return Status();
    }
    return Status::error(options.dir + ": the checkpoint has no tensor for '" + name + "'");
  };
  DS_RETURN_IF_ERROR(expect("token_embd.weight", n_vocab.value(), n_embd.value()));
  DS_RETURN_IF_ERROR(expect("output_norm.weight", 1, n_embd.value()));
  if (!config.value("tie_word_embeddings", false)) DS_RETURN_IF_ERROR(expect("output.weight", n_vocab.value(), n_embd.value()));
  for (int64_t l = 0; l < n_layer.value(); ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    DS_RETURN_IF_ERROR(expect(b + "attn_norm.weight", 1, n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "ffn_norm.weight", 1, n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "attn_q.weight", n_head.value() * head_dim.value(), n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "attn_k.weight", n_head_kv.value() * head_dim.value(), n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "attn_v.weight", n_head_kv.value() * head_dim.value(), n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "attn_output.weight", n_embd.value(), n_head.value() * head_dim.value()));
    DS_RETURN_IF_ERROR(expect(b + "ffn_gate.weight", n_ff.value(), n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "ffn_up.weight", n_ff.value(), n_embd.value()));
    DS_RETURN_IF_ERROR(expect(b + "ffn_down.weight", n_embd.value(), n_ff.value()));
  }

  auto tokenizer = read_hf_tokenizer(options.dir, config, n_vocab.value());
  if (!tokenizer.ok()) return tokenizer.status();

  GgufWriter writer;
  const std::string a = arch->gguf;
  writer.add_string("general.architecture", a);
  writer.add_string("general.type", "model");
  writer.add_string("general.name", std::filesystem::path(options.dir).lexically_normal().filename().string());
  writer.add_string("general.size_label", size_label(parameters));
  writer.add_uint32(a + ".block_count", uint32_t(n_layer.value()));
  writer.add_uint32(a + ".context_length", uint32_t(n_ctx.value()));
  writer.add_uint32(a + ".embedding_length", uint32_t(n_embd.value()));
  writer.add_uint32(a + ".feed_forward_length", uint32_t(n_ff.value()));
  writer.add_uint32(a + ".attention.head_count", uint32_t(n_head.value()));
  if (config.contains("num_key_value_heads")) writer.add_uint32(a + ".attention.head_count_kv", uint32_t(n_head_kv.value()));
  writer.add_float32(a + ".rope.freq_base", float(theta.value()));
  if (config.contains("rms_norm_eps")) {
    if (!config["rms_norm_eps"].is_number()) return Status::error("config.json: 'rms_norm_eps' must be a number");
    writer.add_float32(a + ".attention.layer_norm_rms_epsilon", config["rms_norm_eps"].get<float>());
  }
  if (config.contains("head_dim")) {
    writer.add_uint32(a + ".attention.key_length", uint32_t(head_dim.value()));
    writer.add_uint32(a + ".attention.value_length", uint32_t(head_dim.value()));
  }
  writer.add_uint32("general.file_type", file_type_of(options.type));
  if (arch->vocab_and_rope_keys) {
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

  int64_t total = 0;
  for (const OutputTensor& t : outputs) {
    writer.declare_tensor(t.name, t.type, t.vector ? std::vector<int64_t>{t.columns} : std::vector<int64_t>{t.columns, t.rows});
    total += t.rows * int64_t(row_bytes(t.type, t.columns));
  }
  if (progress.started) progress.started(total);
  int64_t done = 0;
  return writer.write_file(options.out, [&](size_t index, std::vector<uint8_t>& bytes) -> Status {
    const OutputTensor& t = outputs[index];
    auto reader = checkpoint.rows(t.source);
    if (!reader.ok()) return reader.status();
    const size_t row_size = row_bytes(t.type, t.columns);
    bytes.resize(size_t(t.rows) * row_size);
    std::vector<float> row(size_t(t.columns));
    // The input's pages go as its rows are done (every 4 MiB of them): a permuted q or k reads within one head at a time.
    const int64_t release_every = std::max<int64_t>(1, (int64_t(4) << 20) / std::max<int64_t>(1, t.columns * 2));
    const int64_t head_rows = t.permute_heads && !t.vector ? t.rows / t.permute_heads : 1;
    for (int64_t r = 0; r < t.rows; ++r) {
      if (r % release_every == 0) reader.value().release_rows(r / head_rows * head_rows);
      reader.value().row(t.vector ? r : source_row(t, r), row.data());
      if (t.vector && t.permute_heads) {  // a q or k bias: its elements are the rows
        std::vector<float> permuted(row.size());
        OutputTensor as_rows = t;
        as_rows.rows = t.columns;
        for (int64_t e = 0; e < t.columns; ++e) permuted[size_t(e)] = row[size_t(source_row(as_rows, e))];
        row.swap(permuted);
      }
      if (!quantize_weight_row(t.type, row.data(), bytes.data() + size_t(r) * row_size, t.columns)) {
        return Status::error("convert: cannot write " + t.name + " as " + dtype_name(t.type));
      }
    }
    reader.value().release_rows(t.rows);
    done += int64_t(bytes.size());
    if (progress.progress) progress.progress(done);
    return Status();
  });
}

}  // namespace

Status convert_checkpoint(const ConvertOptions& options, const ConvertProgress& progress) {
  // A config.json value of the wrong JSON type throws in the JSON library: an error naming it, not a crash.
  return catching_exceptions("convert", [&]() -> Result<bool> {
           DS_RETURN_IF_ERROR(convert(options, progress));
           return true;
         }).status();
}

}  // namespace ds

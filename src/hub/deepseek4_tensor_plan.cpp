// DeepSeek-V4's checkpoint (DeepseekV4ForCausalLM) as llama.cpp's converter
// writes it: DeepSeek's own names (layers.N.attn.wq_a, layers.N.ffn.experts.E.w1)
// to GGUF's, each tensor in the type its source implies rather than --type's:
// FP8 matrices Q8_0, BF16 matrices BF16, F32 kept, vectors and norms F32, the
// FP4 routed experts stacked as MXFP4 (bits moved, nothing rounded), the
// hash-routed layers' token-to-expert tables as I32. The multi-token-prediction
// layer (mtp.*) is left out: deepseek4 GGUF has no place for it in a model file.

#include <algorithm>
#include <cstring>
#include <memory>
#include <regex>

#include "hub/tensor_plan.h"

namespace ds {
namespace {

using Reader = HfCheckpoint::RowReader;
using Stored = HfCheckpoint::Stored;

const std::map<std::string, std::string> k_global = {
    {"embed.weight", "token_embd.weight"}, {"norm.weight", "output_norm.weight"},         {"head.weight", "output.weight"},
    {"hc_head_fn", "output_hc_fn.weight"}, {"hc_head_base", "output_hc_base.weight"}, {"hc_head_scale", "output_hc_scale.weight"},
};
const std::map<std::string, std::string> k_layer = {
    {"attn_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"hc_attn_fn", "hc_attn_fn.weight"},
    {"hc_attn_base", "hc_attn_base.weight"},
    {"hc_attn_scale", "hc_attn_scale.weight"},
    {"hc_ffn_fn", "hc_ffn_fn.weight"},
    {"hc_ffn_base", "hc_ffn_base.weight"},
    {"hc_ffn_scale", "hc_ffn_scale.weight"},
    {"attn.attn_sink", "attn_sinks.weight"},
    {"attn.wq_a.weight", "attn_q_a.weight"},
    {"attn.q_norm.weight", "attn_q_a_norm.weight"},
    {"attn.wq_b.weight", "attn_q_b.weight"},
    {"attn.wkv.weight", "attn_kv.weight"},
    {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.wo_a.weight", "attn_output_a.weight"},
    {"attn.wo_b.weight", "attn_output_b.weight"},
    {"attn.compressor.ape", "attn_compressor_ape.weight"},
    {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
    {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
    {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
    {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
    {"attn.indexer.compressor.ape", "indexer_compressor_ape.weight"},
    {"attn.indexer.compressor.wkv.weight", "indexer_compressor_kv.weight"},
    {"attn.indexer.compressor.wgate.weight", "indexer_compressor_gate.weight"},
    {"attn.indexer.compressor.norm.weight", "indexer_compressor_norm.weight"},
    {"ffn.gate.weight", "ffn_gate_inp.weight"},
    {"ffn.gate.bias", "exp_probs_b.bias"},
    {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
    {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
    {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
};
const std::map<std::string, std::string> k_experts = {
    {"w1", "ffn_gate_exps.weight"}, {"w2", "ffn_down_exps.weight"}, {"w3", "ffn_up_exps.weight"}};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The type llama.cpp's converter writes a V4 tensor in: the source's, FP8 requantized to Q8_0
// (the converter falls back to F16 where a row is not in blocks of 32), and F32 for every vector and norm.
std::optional<DType> kept_type(const Reader& reader, const std::string& gguf_name, bool vector) {
  if (vector || ends_with(gguf_name, "_norm.weight")) return DType::f32;
  switch (reader.stored()) {
    case Stored::fp8: return DType::q8_0;
    case Stored::f32: return DType::f32;
    case Stored::bf16: return DType::bf16;
    default: return std::nullopt;  // F16: --type's rules
  }
}

// A hash-routed layer's table: for each token (a row), the experts it goes to, as I32.
Result<PlannedTensor> token_to_expert_table(const HfCheckpoint& checkpoint, const std::string& name, int64_t layer, int64_t n_expert) {
  auto reader = checkpoint.rows(name);
  if (!reader.ok()) return reader.status();
  const Reader table = reader.take();
  if (table.stored() != Stored::integer || checkpoint.find(name)->shape.size() != 2) {
    return Status::error(table.where() + ": a token-to-expert table must be an integer matrix [tokens, experts used]");
  }
  // Decoded once (a few MB: tokens x experts used), every id checked to name an expert: one past
  // them would index out of the layer's experts at run time.
  const int64_t columns = table.columns();
  auto ids = std::make_shared<std::vector<int32_t>>(size_t(table.rows() * columns));
  for (int64_t r = 0; r < table.rows(); ++r) {
    int32_t* row = ids->data() + r * columns;
    table.int32_row(r, row);
    for (int64_t c = 0; c < columns; ++c) {
      if (row[c] < 0 || row[c] >= n_expert) {
        return Status::error(table.where() + ": token " + std::to_string(r) + " goes to expert " + std::to_string(row[c]) + " of " +
                             std::to_string(n_expert));
      }
    }
  }
  table.release_rows(table.rows());
  PlannedTensor t;
  t.name = "blk." + std::to_string(layer) + ".ffn_gate_tid2eid.weight";
  t.source = table.where();
  t.shape = {table.columns(), table.rows()};
  t.type = DType::i32;
  t.raw_row = [ids, columns](int64_t r, uint8_t* out) { std::memcpy(out, ids->data() + r * columns, size_t(columns) * sizeof(int32_t)); };
  t.release = [](int64_t) {};
  return t;
}

}  // namespace

Result<std::vector<PlannedTensor>> plan_deepseek4_tensors(const HfCheckpoint& checkpoint, const PlanSettings& s) {
  std::vector<PlannedTensor> plan;
  const std::regex layer_name(R"(layers\.(\d+)\.(.*))");
  const std::regex expert_name(R"(ffn\.experts\.(\d+)\.(w1|w2|w3)\.weight)");
  ExpertTensors experts;
  std::vector<bool> has_table(size_t(s.n_layer), false);

  for (const std::string& name : checkpoint.tensor_names()) {
    if (checkpoint.is_scale(name) || name.rfind("mtp.", 0) == 0) continue;
    std::smatch m;
    std::string gguf_name;
    if (k_global.count(name)) {
      gguf_name = k_global.at(name);
    } else if (std::regex_match(name, m, layer_name)) {
      const int64_t layer = std::stoll(m[1].str());
      const std::string within = m[2].str();
      if (layer >= s.n_layer) return Status::error("tensor '" + name + "' is past num_hidden_layers " + std::to_string(s.n_layer));
      std::smatch e;
      if (std::regex_match(within, e, expert_name)) {
        experts[{layer, e[2].str()}][std::stoll(e[1].str())] = name;
        continue;
      }
      if (within == "ffn.gate.tid2eid") {
        if (layer >= s.n_hash_layers) return Status::error("tensor '" + name + "': a token-to-expert table past num_hash_layers " + std::to_string(s.n_hash_layers));
        auto t = token_to_expert_table(checkpoint, name, layer, s.n_expert);
        if (!t.ok()) return t.status();
        plan.push_back(t.take());
        has_table[size_t(layer)] = true;
        continue;
      }
      if (within == "ffn.gate.bias" && layer < s.n_hash_layers) continue;  // a hash-routed layer's router bias: unused
      if (!k_layer.count(within)) return Status::error("tensor '" + name + "' is not one the architecture has");
      gguf_name = "blk." + std::to_string(layer) + "." + k_layer.at(within);
    } else {
      return Status::error("tensor '" + name + "' is not one the architecture has");
    }
    auto reader = float_rows(checkpoint, name);
    if (!reader.ok()) return reader.status();
    const bool vector = checkpoint.find(name)->shape.size() == 1;
    PlannedTensor t = one_to_one(gguf_name, reader.value(), vector);
    t.type = kept_type(reader.value(), gguf_name, vector);
    plan.push_back(std::move(t));
  }
  for (int64_t layer = 0; layer < std::min(s.n_hash_layers, s.n_layer); ++layer) {
    if (!has_table[size_t(layer)]) {
      return Status::error("layer " + std::to_string(layer) + " is hash-routed (num_hash_layers " + std::to_string(s.n_hash_layers) +
                           ") but the checkpoint has no 'layers." + std::to_string(layer) + ".ffn.gate.tid2eid'");
    }
  }
  DS_RETURN_IF_ERROR(add_stacked_experts(checkpoint, experts, k_experts, s.n_expert, true, &plan));
  return plan;
}

}  // namespace ds

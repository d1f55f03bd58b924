#include "hub/tensor_plan.h"

#include <algorithm>
#include <map>
#include <memory>
#include <regex>

namespace ds {
namespace {

using Reader = HfCheckpoint::RowReader;

// Per-layer names, HF to GGUF, by family.
const std::map<std::string, std::string> k_dense_layer = {
    {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},       {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},       {"self_attn.o_proj.bias", "attn_output.bias"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
const std::map<std::string, std::string> k_deepseek2_layer = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};
// DeepSeek-V3.2's additions: the lightning indexer in every layer, and a multi-token-prediction
// layer's own tensors beside its decoder block.
const std::map<std::string, std::string> k_deepseek32_layer = {
    {"self_attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"self_attn.indexer.wk.weight", "indexer.attn_k.weight"},
    {"self_attn.indexer.k_norm.weight", "indexer.k_norm.weight"},
    {"self_attn.indexer.k_norm.bias", "indexer.k_norm.bias"},
    {"self_attn.indexer.weights_proj.weight", "indexer.proj.weight"},
};
const std::map<std::string, std::string> k_nextn_layer = {
    {"embed_tokens.weight", "nextn.embed_tokens.weight"},     {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},                   {"eh_proj.weight", "nextn.eh_proj.weight"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight"}, {"shared_head.head.weight", "nextn.shared_head_head.weight"},
};
const std::map<std::string, std::string> k_global = {
    {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"}, {"lm_head.weight", "output.weight"}};

// Output row r of a permuted q or k: llama.cpp's reshape(heads, 2, d/2, ...).swapaxes(1, 2).
int64_t rotary_row(int64_t r, int64_t rows, int64_t heads) {
  const int64_t head_dim = rows / heads, half = head_dim / 2;
  const int64_t h = r / head_dim, within = r % head_dim;
  return h * head_dim + (within % 2) * half + within / 2;
}

// q or k (weight rows, or a bias's elements) into GGML's rotary order over `heads` heads.
Result<PlannedTensor> permuted(const std::string& name, const std::string& source, const Reader& reader, bool vector, int64_t heads) {
  PlannedTensor t = one_to_one(name, reader, vector);
  const int64_t n = vector ? reader.columns() : reader.rows();
  if (heads <= 0 || n % (2 * heads) != 0) return Status::error("tensor '" + source + "': its rows do not divide into " + std::to_string(heads) + " heads");
  if (vector) {
    t.row = [reader, heads](int64_t, float* out) {
      std::vector<float> in(size_t(reader.columns()));
      reader.row(0, in.data());
      for (int64_t e = 0; e < reader.columns(); ++e) out[e] = in[size_t(rotary_row(e, reader.columns(), heads))];
    };
  } else {
    t.row = [reader, heads](int64_t r, float* out) { reader.row(rotary_row(r, reader.rows(), heads), out); };
    // Rows are read within one head at a time: pages before the head go.
    t.release = [reader, heads](int64_t done) {
      const int64_t head_rows = reader.rows() / heads;
      reader.release_rows(done / head_rows * head_rows);
    };
  }
  return t;
}

}  // namespace

PlannedTensor one_to_one(const std::string& name, const Reader& reader, bool vector) {
  PlannedTensor t;
  t.name = name;
  t.source = reader.where();
  t.vector = vector;
  t.shape = vector ? std::vector<int64_t>{reader.columns()} : std::vector<int64_t>{reader.columns(), reader.rows()};
  t.row = [reader](int64_t r, float* out) { reader.row(r, out); };
  t.release = [reader](int64_t done) { reader.release_rows(done); };
  return t;
}

Result<Reader> float_rows(const HfCheckpoint& checkpoint, const std::string& name) {
  auto reader = checkpoint.rows(name);
  if (!reader.ok()) return reader.status();
  const auto stored = reader.value().stored();
  if (stored == HfCheckpoint::Stored::fp4 || stored == HfCheckpoint::Stored::integer) {
    return Status::error(reader.value().where() + " is " + (stored == HfCheckpoint::Stored::fp4 ? "FP4" : "an integer tensor") +
                         ", where the architecture has a float one");
  }
  return reader;
}

namespace {

Result<PlannedTensor> stacked_experts(const HfCheckpoint& checkpoint, const std::string& name, int64_t layer, const std::string& projection,
                                     const std::map<int64_t, std::string>& by_index, int64_t n_expert, bool mxfp4) {
  std::vector<Reader> readers;
  for (int64_t e = 0; e < n_expert; ++e) {
    const auto it = by_index.find(e);
    if (it == by_index.end()) {
      return Status::error("layer " + std::to_string(layer) + " has no expert " + std::to_string(e) + " " + projection + " of n_routed_experts " +
                           std::to_string(n_expert));
    }
    auto reader = mxfp4 ? checkpoint.rows(it->second) : float_rows(checkpoint, it->second);
    if (!reader.ok()) return reader.status();
    if (mxfp4 && reader.value().stored() != HfCheckpoint::Stored::fp4) {
      return Status::error(reader.value().where() + ": a routed expert must be FP4 with its e8m0 scales (DeepSeek-V4's own format)");
    }
    if (!readers.empty() && (reader.value().rows() != readers[0].rows() || reader.value().columns() != readers[0].columns())) {
      return Status::error("tensor '" + it->second + "' is not the shape of its layer's other experts");
    }
    readers.push_back(reader.take());
  }
  if (int64_t(by_index.size()) != n_expert) {
    return Status::error("layer " + std::to_string(layer) + " has " + std::to_string(by_index.size()) + " experts' " + projection +
                         ", n_routed_experts says " + std::to_string(n_expert));
  }
  PlannedTensor t;
  t.name = name;
  t.experts = true;
  t.source = readers[0].where();
  const int64_t rows = readers[0].rows();
  t.shape = {readers[0].columns(), rows, n_expert};
  if (mxfp4) {
    t.type = DType::mxfp4;
    t.raw_row = [readers, rows](int64_t r, uint8_t* out) { readers[size_t(r / rows)].mxfp4_row(r % rows, out); };
  } else {
    t.row = [readers, rows](int64_t r, float* out) { readers[size_t(r / rows)].row(r % rows, out); };
  }
  t.release = [readers, rows](int64_t done) {
    for (int64_t e = 0; e < int64_t(readers.size()); ++e) readers[size_t(e)].release_rows(std::clamp<int64_t>(done - e * rows, 0, rows));
  };
  return t;
}

}  // namespace

Status add_stacked_experts(const HfCheckpoint& checkpoint, const ExpertTensors& experts, const std::map<std::string, std::string>& names,
                           int64_t n_expert, bool mxfp4, std::vector<PlannedTensor>* plan) {
  for (const auto& [key, by_index] : experts) {
    const auto& [layer, projection] = key;
    auto t = stacked_experts(checkpoint, "blk." + std::to_string(layer) + "." + names.at(projection), layer, projection, by_index, n_expert, mxfp4);
    if (!t.ok()) return t.status();
    plan->push_back(t.take());
  }
  return Status();
}

int64_t PlannedTensor::rows() const {
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  return rows;
}

Result<std::vector<PlannedTensor>> plan_tensors(const HfCheckpoint& checkpoint, const PlanSettings& s) {
  if (s.family == TensorFamily::deepseek4) return plan_deepseek4_tensors(checkpoint, s);
  std::vector<PlannedTensor> plan;
  const std::regex layer_name(R"(model\.layers\.(\d+)\.(.*))");
  const std::regex expert_name(R"(mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
  const bool mla = s.family == TensorFamily::deepseek2 || s.family == TensorFamily::deepseek32;
  std::map<std::string, std::string> per_layer = mla ? k_deepseek2_layer : k_dense_layer;
  if (s.family == TensorFamily::deepseek32) per_layer.insert(k_deepseek32_layer.begin(), k_deepseek32_layer.end());
  // Experts gathered by layer and projection, then stacked.
  ExpertTensors experts;

  for (const std::string& name : checkpoint.tensor_names()) {
    if (checkpoint.is_scale(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    std::smatch m;
    std::string gguf_name;
    std::string within;  // the per-layer part of the name
    int64_t layer = -1;
    if (k_global.count(name)) {
      if (name == "lm_head.weight" && s.tied_output) continue;
      gguf_name = k_global.at(name);
    } else if (std::regex_match(name, m, layer_name)) {
      layer = std::stoll(m[1].str());
      within = m[2].str();
      if (layer >= s.n_layer + s.n_nextn_layers) {
        return Status::error("tensor '" + name + "' is past num_hidden_layers " + std::to_string(s.n_layer) + " and num_nextn_predict_layers " +
                             std::to_string(s.n_nextn_layers));
      }
      if (layer >= s.n_layer && s.family == TensorFamily::deepseek2) continue;  // a multi-token-prediction layer: deepseek2 has no place for it
      std::smatch e;
      if (mla && std::regex_match(within, e, expert_name)) {
        experts[{layer, e[2].str()}][std::stoll(e[1].str())] = name;
        continue;
      }
      if (mla && within == "self_attn.kv_b_proj.weight") {
        auto reader = float_rows(checkpoint, name);
        if (!reader.ok()) return reader.status();
        const Reader kv_b = reader.take();
        const int64_t per_head = s.qk_nope + s.v_head, kv_lora = kv_b.columns(), nope = s.qk_nope, heads = s.n_head;
        if (kv_b.rows() != heads * per_head) {
          return Status::error("tensor '" + name + "' has " + std::to_string(kv_b.rows()) + " rows, but config.json implies " +
                               std::to_string(heads) + " heads of " + std::to_string(per_head));
        }
        const std::string prefix = "blk." + std::to_string(layer) + ".";
        // k_b: per head, [kv_lora rows][nope]: the head's nope rows transposed (read whole, a few hundred KB).
        PlannedTensor k_b;
        k_b.name = prefix + "attn_k_b.weight";
        k_b.source = kv_b.where();
        k_b.shape = {nope, kv_lora, heads};
        auto block = std::make_shared<std::pair<int64_t, std::vector<float>>>(-1, std::vector<float>());
        k_b.row = [kv_b, block, per_head, nope, kv_lora](int64_t r, float* out) {
          const int64_t h = r / kv_lora, c = r % kv_lora;
          if (block->first != h) {
            block->second.resize(size_t(nope * kv_lora));
            for (int64_t j = 0; j < nope; ++j) kv_b.row(h * per_head + j, block->second.data() + j * kv_lora);
            block->first = h;
          }
          for (int64_t j = 0; j < nope; ++j) out[j] = block->second[size_t(j * kv_lora + c)];
        };
        k_b.release = [](int64_t) {};  // v_b, written after, reads the same pages
        PlannedTensor v_b;
        v_b.name = prefix + "attn_v_b.weight";
        v_b.source = kv_b.where();
        v_b.shape = {kv_lora, s.v_head, heads};
        v_b.row = [kv_b, per_head, nope, v = s.v_head](int64_t r, float* out) { kv_b.row((r / v) * per_head + nope + r % v, out); };
        v_b.release = [kv_b, total = heads * s.v_head](int64_t done) {
          if (done >= total) kv_b.release_rows(kv_b.rows());
        };
        plan.push_back(std::move(k_b));
        plan.push_back(std::move(v_b));
        continue;
      }
      const bool nextn = layer >= s.n_layer && k_nextn_layer.count(within);
      if (!per_layer.count(within) && !nextn) return Status::error("tensor '" + name + "' is not one the architecture has");
      gguf_name = "blk." + std::to_string(layer) + "." + (nextn ? k_nextn_layer.at(within) : per_layer.at(within));
    } else {
      return Status::error("tensor '" + name + "' is not one the architecture has");
    }
    auto reader = float_rows(checkpoint, name);
    if (!reader.ok()) return reader.status();
    const bool vector = checkpoint.find(name)->shape.size() == 1;
    const bool q = within.rfind("self_attn.q_proj.", 0) == 0, k = within.rfind("self_attn.k_proj.", 0) == 0;
    if (s.family == TensorFamily::llama && (q || k)) {
      auto t = permuted(gguf_name, name, reader.value(), vector, q ? s.n_head : s.n_head_kv);
      if (!t.ok()) return t.status();
      plan.push_back(t.take());
    } else {
      plan.push_back(one_to_one(gguf_name, reader.value(), vector));
    }
  }

  // Each layer's experts stacked: [n_expert][rows][columns], expert by expert.
  static const std::map<std::string, std::string> k_stacked = {
      {"gate_proj", "ffn_gate_exps.weight"}, {"up_proj", "ffn_up_exps.weight"}, {"down_proj", "ffn_down_exps.weight"}};
  DS_RETURN_IF_ERROR(add_stacked_experts(checkpoint, experts, k_stacked, s.n_expert, false, &plan));
  return plan;
}

}  // namespace ds

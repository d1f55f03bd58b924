#include "random_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <unistd.h>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// The files this test process wrote, removed when it exits (a mapped file
// stays readable after its removal; nothing else opens them).
struct WrittenFiles {
  std::vector<std::string> paths;
  ~WrittenFiles() {
    for (const std::string& path : paths) std::remove(path.c_str());
  }
};

// ctest runs tests as parallel processes: each writes its own file, so none
// truncates a file another has mapped.
std::string write_file(const GgufWriter& w, const std::string& file_name) {
  static WrittenFiles written;
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + file_name;
  EXPECT_TRUE(w.write_file(path).ok());
  written.paths.push_back(path);
  return path;
}

// DeepSeek-V4's keys and layers (../shared/DEEPSEEK-V32-V4.md sections 1.3 and 1.5).
template <typename Matrix, typename Experts, typename Vector>
void write_deepseek4_layers(const RandomModelShape& s, GgufWriter& w, const std::string& p, Matrix& matrix, Experts& experts,
                            Vector& vector, std::mt19937& rng) {
  constexpr int64_t head_dim = 64, n_rot = 16, q_lora = 32, o_groups = 2, o_rank = 16, n_expert = 4, n_used = 2, expert_ff = 32;
  constexpr int64_t index_heads = 8, index_dim = 64, hc = 4, n_mix = hc * (2 + hc);
  const int64_t ratio_cycle[] = {0, 4, 128, 4};
  std::vector<int64_t> ratios;
  for (int64_t i = 0; i < s.n_layer; ++i) ratios.push_back(ratio_cycle[i % 4]);
  w.add_uint32(p + "attention.key_length", head_dim);
  w.add_uint32(p + "attention.value_length", head_dim);
  w.add_uint32(p + "rope.dimension_count", n_rot);
  w.add_string(p + "rope.scaling.type", "yarn");
  w.add_float32(p + "rope.scaling.factor", 16.0f);
  w.add_uint32(p + "rope.scaling.original_context_length", 256);
  w.add_uint32(p + "attention.q_lora_rank", q_lora);
  w.add_uint32(p + "attention.sliding_window", 16);
  w.add_uint32(p + "attention.output_group_count", o_groups);
  w.add_uint32(p + "attention.output_lora_rank", o_rank);
  w.add_float32(p + "attention.compress_rope_freq_base", 160000.0f);
  w.add_int32_array(p + "attention.compress_ratios", std::vector<int32_t>(ratios.begin(), ratios.end()));
  w.add_uint32(p + "attention.indexer.head_count", index_heads);
  w.add_uint32(p + "attention.indexer.key_length", index_dim);
  w.add_uint32(p + "attention.indexer.top_k", 8);
  w.add_uint32(p + "hyper_connection.count", hc);
  w.add_uint32(p + "hyper_connection.sinkhorn_iterations", 20);
  w.add_float32(p + "hyper_connection.epsilon", 1e-6f);
  w.add_uint32(p + "hash_layer_count", 1);
  w.add_uint32(p + "expert_count", n_expert);
  w.add_uint32(p + "expert_used_count", n_used);
  w.add_uint32(p + "expert_shared_count", 1);
  w.add_uint32(p + "expert_feed_forward_length", expert_ff);
  w.add_uint32(p + "expert_gating_func", 4);
  w.add_bool(p + "expert_weights_norm", true);
  w.add_float32(p + "expert_weights_scale", 1.5f);
  w.add_float32(p + "swiglu_clamp_exp", 10.0f);
  // The streams' mix: wide bases, so that Sinkhorn does not make every mix uniform.
  const auto hyper_connection = [&](const std::string& prefix, int64_t n_out, int64_t n_scale) {
    matrix(prefix + "_fn.weight", n_out, hc * s.n_embd, DType::f32);
    vector(prefix + "_base.weight", n_out, 0.0f, 3.0f);
    vector(prefix + "_scale.weight", n_scale, 1.0f, 0.5f);
  };
  hyper_connection("output_hc", hc, 1);
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    vector(b + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
    vector(b + "attn_sinks.weight", s.n_head, 0.0f, 1.0f);
    matrix(b + "attn_q_a.weight", q_lora, s.n_embd, s.weight_type);
    vector(b + "attn_q_a_norm.weight", q_lora, 1.0f, 0.1f);
    matrix(b + "attn_q_b.weight", s.n_head * head_dim, q_lora, s.weight_type);
    matrix(b + "attn_kv.weight", head_dim, s.n_embd, s.weight_type);
    vector(b + "attn_kv_a_norm.weight", head_dim, 1.0f, 0.1f);
    matrix(b + "attn_output_a.weight", o_groups * o_rank, s.n_head * head_dim / o_groups, s.weight_type);
    matrix(b + "attn_output_b.weight", s.n_embd, o_groups * o_rank, s.weight_type);
    hyper_connection(b + "hc_attn", n_mix, 3);
    hyper_connection(b + "hc_ffn", n_mix, 3);
    const int64_t ratio = ratios[size_t(i)];
    const auto compressor = [&](const std::string& prefix, int64_t dim) {
      const int64_t width = ratio == 4 ? 2 * dim : dim;
      matrix(prefix + "_kv.weight", width, s.n_embd, s.weight_type);
      matrix(prefix + "_gate.weight", width, s.n_embd, s.weight_type);
      matrix(prefix + "_ape.weight", ratio, width, DType::f32);
      vector(prefix + "_norm.weight", dim, 1.0f, 0.1f);
    };
    if (ratio > 0) compressor(b + "attn_compressor", head_dim);
    if (ratio == 4) {
      compressor(b + "indexer_compressor", index_dim);
      matrix(b + "indexer.attn_q_b.weight", index_heads * index_dim, q_lora, s.weight_type);
      matrix(b + "indexer.proj.weight", index_heads, s.n_embd, s.weight_type);
    }
    vector(b + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
    matrix(b + "ffn_gate_inp.weight", n_expert, s.n_embd, DType::f32);
    if (i == 0) {
      std::vector<int32_t> ids(size_t(s.n_vocab * n_used));
      for (int64_t t = 0; t < s.n_vocab; ++t) {
        ids[size_t(t * n_used)] = int32_t(rng() % n_expert);
        ids[size_t(t * n_used + 1)] = int32_t((ids[size_t(t * n_used)] + 1 + rng() % (n_expert - 1)) % n_expert);
      }
      w.add_tensor(b + "ffn_gate_tid2eid.weight", DType::i32, {n_used, s.n_vocab}, ids.data(), ids.size() * sizeof(int32_t));
    } else {
      vector(b + "exp_probs_b.bias", n_expert, 0.0f, 0.05f);
    }
    experts(b + "ffn_gate_exps.weight", n_expert, expert_ff, s.n_embd);
    experts(b + "ffn_up_exps.weight", n_expert, expert_ff, s.n_embd);
    experts(b + "ffn_down_exps.weight", n_expert, s.n_embd, expert_ff);
    matrix(b + "ffn_gate_shexp.weight", expert_ff, s.n_embd, s.weight_type);
    matrix(b + "ffn_up_shexp.weight", expert_ff, s.n_embd, s.weight_type);
    matrix(b + "ffn_down_shexp.weight", s.n_embd, expert_ff, s.weight_type);
  }
}

}  // namespace

std::string write_random_model(const RandomModelShape& s, const std::string& file_name) {
  std::mt19937 rng(s.seed);
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_uint32(p + "embedding_length", uint32_t(s.n_embd));
  EXPECT_TRUE(!s.nextn || s.arch == "deepseek32") << "the NextN layer is written for deepseek32 files";
  w.add_uint32(p + "block_count", uint32_t(s.n_layer + (s.nextn ? 1 : 0)));
  if (s.nextn) w.add_uint32(p + "nextn_predict_layers", 1);
  if (s.arch != "deepseek4") w.add_uint32(p + "feed_forward_length", uint32_t(s.n_ff));  // V4 has no dense layers
  w.add_uint32(p + "attention.head_count", uint32_t(s.n_head));
  const bool sparse = s.arch == "deepseek32";  // V3.2: MLA's latent rows are one key head
  w.add_uint32(p + "attention.head_count_kv", sparse || s.arch == "deepseek4" ? 1u : uint32_t(s.n_head_kv));
  w.add_uint32(p + "context_length", uint32_t(s.n_ctx));
  w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-5f);

  // A matrix of `rows` rows of `cols`, entries uniform with variance 1/cols.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType type) {
    const float bound = std::sqrt(3.0f / float(cols));
    std::uniform_real_distribution<float> dist(-bound, bound);
    std::vector<float> values(size_t(rows * cols));
    for (float& v : values) v = dist(rng);
    std::vector<uint8_t> bytes(size_t(rows * row_bytes(type, cols)));
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(quantize_row(type, values.data() + r * cols, bytes.data() + r * row_bytes(type, cols), cols));
    }
    w.add_tensor(name, type, {cols, rows}, bytes.data(), bytes.size());
  };
  // n matrices of rows x cols stacked in one 3-D tensor (the expert layout).
  auto experts = [&](const std::string& name, int64_t n, int64_t rows, int64_t cols) {
    const float bound = std::sqrt(3.0f / float(cols));
    std::uniform_real_distribution<float> dist(-bound, bound);
    std::vector<float> values(static_cast<size_t>(cols));
    std::vector<uint8_t> bytes(size_t(n * rows * row_bytes(s.weight_type, cols)));
    for (int64_t r = 0; r < n * rows; ++r) {
      for (float& v : values) v = dist(rng);
      EXPECT_TRUE(quantize_row(s.weight_type, values.data(), bytes.data() + r * row_bytes(s.weight_type, cols), cols));
    }
    w.add_tensor(name, s.weight_type, {cols, rows, n}, bytes.data(), bytes.size());
  };
  auto vector = [&](const std::string& name, int64_t n, float center, float spread) {
    std::uniform_real_distribution<float> dist(center - spread, center + spread);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = dist(rng);
    w.add_tensor(name, DType::f32, {n}, values.data(), values.size() * 4);
  };
  const int64_t head_dim = s.n_embd / s.n_head, kv_dim = head_dim * s.n_head_kv;
  // Embeddings are looked up, not multiplied: unit-scale rows.
  matrix("token_embd.weight", s.n_vocab, s.n_embd, DType::f32);
  vector("output_norm.weight", s.n_embd, 1.0f, 0.1f);
  matrix("output.weight", s.n_vocab, s.n_embd, s.weight_type);
  if (s.arch == "deepseek4") {
    write_deepseek4_layers(s, w, p, matrix, experts, vector, rng);
    return write_file(w, file_name);
  }
  if (s.arch == "deepseek2" || sparse) {
    constexpr int64_t q_lora = 64, kv_lora = 64, nope = 32, rope = 32, v_head = 32, n_expert = 8, expert_ff = 64;
    constexpr int64_t index_heads = 8, index_dim = 64, top_k = 8;
    w.add_uint32(p + "attention.q_lora_rank", q_lora);
    w.add_uint32(p + "attention.kv_lora_rank", kv_lora);
    if (sparse) {  // the split attn_k_b/attn_v_b layout: the cache's lengths, and the heads' as *_mla
      w.add_uint32(p + "attention.key_length", kv_lora + rope);
      w.add_uint32(p + "attention.value_length", kv_lora);
      w.add_uint32(p + "attention.key_length_mla", nope + rope);
      w.add_uint32(p + "attention.value_length_mla", v_head);
      w.add_uint32(p + "attention.indexer.head_count", index_heads);
      w.add_uint32(p + "attention.indexer.key_length", index_dim);
      w.add_uint32(p + "attention.indexer.top_k", top_k);
    } else {
      w.add_uint32(p + "attention.key_length", nope + rope);
      w.add_uint32(p + "attention.value_length", v_head);
    }
    w.add_uint32(p + "rope.dimension_count", rope);
    w.add_uint32(p + "leading_dense_block_count", 1);
    w.add_uint32(p + "expert_count", n_expert);
    w.add_uint32(p + "expert_used_count", 2);
    w.add_uint32(p + "expert_shared_count", 1);
    w.add_uint32(p + "expert_feed_forward_length", expert_ff);
    w.add_uint32(p + "expert_gating_func", 2);
    w.add_bool(p + "expert_weights_norm", true);
    w.add_float32(p + "expert_weights_scale", 2.0f);
    w.add_uint32(p + "expert_group_count", 4);
    w.add_uint32(p + "expert_group_used_count", 2);
    for (int64_t i = 0; i < s.n_layer + (s.nextn ? 1 : 0); ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      if (i == s.n_layer) {
        matrix(b + "nextn.eh_proj.weight", s.n_embd, 2 * s.n_embd, s.weight_type);
        vector(b + "nextn.enorm.weight", s.n_embd, 1.0f, 0.1f);
        vector(b + "nextn.hnorm.weight", s.n_embd, 1.0f, 0.1f);
        vector(b + "nextn.shared_head_norm.weight", s.n_embd, 1.0f, 0.1f);
      }
      vector(b + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
      matrix(b + "attn_q_a.weight", q_lora, s.n_embd, s.weight_type);
      vector(b + "attn_q_a_norm.weight", q_lora, 1.0f, 0.1f);
      matrix(b + "attn_q_b.weight", s.n_head * (nope + rope), q_lora, s.weight_type);
      matrix(b + "attn_kv_a_mqa.weight", kv_lora + rope, s.n_embd, s.weight_type);
      vector(b + "attn_kv_a_norm.weight", kv_lora, 1.0f, 0.1f);
      if (sparse) {
        experts(b + "attn_k_b.weight", s.n_head, kv_lora, nope);
        experts(b + "attn_v_b.weight", s.n_head, v_head, kv_lora);
      } else {
        matrix(b + "attn_kv_b.weight", s.n_head * (nope + v_head), kv_lora, s.weight_type);
      }
      matrix(b + "attn_output.weight", s.n_embd, s.n_head * v_head, s.weight_type);
      vector(b + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
      if (sparse) {
        vector(b + "indexer.k_norm.weight", index_dim, 1.0f, 0.1f);
        vector(b + "indexer.k_norm.bias", index_dim, 0.0f, 0.1f);
        matrix(b + "indexer.proj.weight", index_heads, s.n_embd, s.weight_type);
        matrix(b + "indexer.attn_k.weight", index_dim, s.n_embd, s.weight_type);
        matrix(b + "indexer.attn_q_b.weight", index_heads * index_dim, q_lora, s.weight_type);
      }
      if (i == 0) {
        matrix(b + "ffn_gate.weight", s.n_ff, s.n_embd, s.weight_type);
        matrix(b + "ffn_up.weight", s.n_ff, s.n_embd, s.weight_type);
        matrix(b + "ffn_down.weight", s.n_embd, s.n_ff, s.weight_type);
        continue;
      }
      matrix(b + "ffn_gate_inp.weight", n_expert, s.n_embd, DType::f32);
      vector(b + "exp_probs_b.bias", n_expert, 0.0f, 0.05f);
      experts(b + "ffn_gate_exps.weight", n_expert, expert_ff, s.n_embd);
      experts(b + "ffn_up_exps.weight", n_expert, expert_ff, s.n_embd);
      experts(b + "ffn_down_exps.weight", n_expert, s.n_embd, expert_ff);
      matrix(b + "ffn_gate_shexp.weight", expert_ff, s.n_embd, s.weight_type);
      matrix(b + "ffn_up_shexp.weight", expert_ff, s.n_embd, s.weight_type);
      matrix(b + "ffn_down_shexp.weight", s.n_embd, expert_ff, s.weight_type);
    }
    return write_file(w, file_name);
  }
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    vector(b + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
    matrix(b + "attn_q.weight", s.n_embd, s.n_embd, s.weight_type);
    matrix(b + "attn_k.weight", kv_dim, s.n_embd, s.weight_type);
    matrix(b + "attn_v.weight", kv_dim, s.n_embd, s.weight_type);
    matrix(b + "attn_output.weight", s.n_embd, s.n_embd, s.weight_type);
    if (s.arch == "qwen2") {
      vector(b + "attn_q.bias", s.n_embd, 0.0f, 0.2f);
      vector(b + "attn_k.bias", kv_dim, 0.0f, 0.2f);
      vector(b + "attn_v.bias", kv_dim, 0.0f, 0.2f);
    }
    vector(b + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
    matrix(b + "ffn_gate.weight", s.n_ff, s.n_embd, s.weight_type);
    matrix(b + "ffn_up.weight", s.n_ff, s.n_embd, s.weight_type);
    matrix(b + "ffn_down.weight", s.n_embd, s.n_ff, s.weight_type);
  }
  return write_file(w, file_name);
}

}  // namespace ds

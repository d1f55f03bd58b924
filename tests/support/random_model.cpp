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

}  // namespace

std::string write_random_model(const RandomModelShape& s, const std::string& file_name) {
  std::mt19937 rng(s.seed);
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_uint32(p + "embedding_length", uint32_t(s.n_embd));
  w.add_uint32(p + "block_count", uint32_t(s.n_layer));
  w.add_uint32(p + "feed_forward_length", uint32_t(s.n_ff));
  w.add_uint32(p + "attention.head_count", uint32_t(s.n_head));
  const bool sparse = s.arch == "deepseek32";  // V3.2: MLA's latent rows are one key head
  w.add_uint32(p + "attention.head_count_kv", sparse ? 1u : uint32_t(s.n_head_kv));
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
    for (int64_t i = 0; i < s.n_layer; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
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

#include "random_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tensor/quantize.h"

namespace ds {

std::string write_random_model(const RandomModelShape& s, const std::string& file_name) {
  std::mt19937 rng(s.seed);
  GgufWriter w;
  const std::string p = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_uint32(p + "embedding_length", uint32_t(s.n_embd));
  w.add_uint32(p + "block_count", uint32_t(s.n_layer));
  w.add_uint32(p + "feed_forward_length", uint32_t(s.n_ff));
  w.add_uint32(p + "attention.head_count", uint32_t(s.n_head));
  w.add_uint32(p + "attention.head_count_kv", uint32_t(s.n_head_kv));
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
  const std::string path = ::testing::TempDir() + "/" + file_name;
  EXPECT_TRUE(w.write_file(path).ok());
  return path;
}

}  // namespace ds

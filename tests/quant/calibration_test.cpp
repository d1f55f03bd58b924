// Activation clipping and SmoothQuant's folding, on data whose answer is known.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "gguf/gguf_writer.h"
#include "quant/activation_clipping.h"
#include "quant/smoothing.h"
#include "support/random_tensors.h"

namespace ds {
namespace {

TEST(ActivationClipping, MinMaxPercentileAndKl) {
  std::mt19937 rng(1);
  std::vector<float> uniform(20000);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : uniform) v = u(rng);
  EXPECT_EQ(choose_clip(uniform, 1.0f, {ClipMethod::minmax}), 1.0f);
  // The 90th percentile of |U(-1, 1)| is 0.9, within the sample's spread (sd of a quantile ~ 0.002 here).
  EXPECT_NEAR(choose_clip(uniform, 1.0f, {ClipMethod::percentile, 90.0}), 0.9f, 0.01f);
  // Uniform values lose only by clipping: KL keeps (nearly) the whole range.
  EXPECT_GT(choose_clip(uniform, 1.0f, {ClipMethod::kl}), 0.9f);
  // A Gaussian with one far outlier: the outlier's range would waste most of the 127 levels.
  std::vector<float> gaussian = random_floats(rng, 20000);
  gaussian[7] = 100.0f;
  const float kl = choose_clip(gaussian, 100.0f, {ClipMethod::kl});
  EXPECT_GT(kl, 2.0f);
  EXPECT_LT(kl, 10.0f);
}

// A norm, two matrices reading it, and up -> down, written as a GGUF file.
struct SmoothingModel {
  std::string path;
  std::vector<float> norm, gate, up, down;
  int64_t n_embd = 8, n_ff = 6;
};

SmoothingModel write_model(std::mt19937& rng) {
  SmoothingModel m;
  m.path = ::testing::TempDir() + "smoothing.gguf";
  m.norm = random_floats(rng, m.n_embd);
  m.gate = random_floats(rng, m.n_ff * m.n_embd);
  m.up = random_floats(rng, m.n_ff * m.n_embd);
  m.down = random_floats(rng, m.n_embd * m.n_ff);
  GgufWriter w;
  w.add_tensor("blk.0.attn_norm.weight", DType::f32, {m.n_embd}, m.norm.data(), m.norm.size() * 4);
  w.add_tensor("blk.0.ffn_norm.weight", DType::f32, {m.n_embd}, m.norm.data(), m.norm.size() * 4);
  w.add_tensor("blk.0.ffn_gate.weight", DType::f32, {m.n_embd, m.n_ff}, m.gate.data(), m.gate.size() * 4);
  w.add_tensor("blk.0.ffn_up.weight", DType::f32, {m.n_embd, m.n_ff}, m.up.data(), m.up.size() * 4);
  w.add_tensor("blk.0.ffn_down.weight", DType::f32, {m.n_ff, m.n_embd}, m.down.data(), m.down.size() * 4);
  EXPECT_TRUE(w.write_file(m.path).ok());
  return m;
}

std::vector<float> transformed(const std::vector<float>& x, int64_t n_cols, const TensorTransform& t) {
  std::vector<float> y = x;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!t.columns.empty()) y[i] *= t.columns[i % size_t(n_cols)];
    if (!t.rows.empty()) y[i] *= t.rows[i / size_t(n_cols)];
  }
  return y;
}

// The FFN of the test model on one token: down(silu(gate(x * norm)) * up(x * norm)).
std::vector<double> ffn(const SmoothingModel& m, const std::vector<float>& norm, const std::vector<float>& gate,
                        const std::vector<float>& up, const std::vector<float>& down, const std::vector<float>& x) {
  std::vector<double> h(size_t(m.n_ff)), out(size_t(m.n_embd));
  for (int64_t r = 0; r < m.n_ff; ++r) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < m.n_embd; ++k) {
      g += double(gate[size_t(r * m.n_embd + k)]) * x[size_t(k)] * norm[size_t(k)];
      u += double(up[size_t(r * m.n_embd + k)]) * x[size_t(k)] * norm[size_t(k)];
    }
    h[size_t(r)] = g / (1 + std::exp(-g)) * u;
  }
  for (int64_t r = 0; r < m.n_embd; ++r)
    for (int64_t k = 0; k < m.n_ff; ++k) out[size_t(r)] += double(down[size_t(r * m.n_ff + k)]) * h[size_t(k)];
  return out;
}

// Smoothing changes the tensors, not the function: folded into the norm and
// into up's rows, the factors cancel against the readers' columns.
TEST(Smoothing, FoldedFactorsLeaveTheFloatModelUnchanged) {
  std::mt19937 rng(2);
  const SmoothingModel m = write_model(rng);
  auto file = GgufFile::open(m.path);
  ASSERT_TRUE(file.ok()) << file.message();
  Calibration c;
  for (const char* name : {"blk.0.ffn_gate.weight", "blk.0.ffn_down.weight"}) {
    InputStatistics& s = c.inputs[name];
    s.n_cols = std::string(name).find("down") != std::string::npos ? m.n_ff : m.n_embd;
    s.tokens = 1;
    for (int64_t j = 0; j < s.n_cols; ++j) s.channel_absmax.push_back(j == 2 ? 50.0f : 0.5f + 0.1f * float(j));  // an outlier channel
  }
  const auto transforms = smoothing_transforms(*file.value(), c, 0.5f, [](const std::string& n) { return n.find("ffn_") != std::string::npos; });
  ASSERT_EQ(transforms.count("blk.0.ffn_norm.weight"), 1u);
  ASSERT_EQ(transforms.count("blk.0.attn_norm.weight"), 0u);  // no W8A8 reader, no statistics
  const TensorTransform& up = transforms.at("blk.0.ffn_up.weight");
  ASSERT_FALSE(up.columns.empty());
  ASSERT_FALSE(up.rows.empty());
  EXPECT_GT(transforms.at("blk.0.ffn_gate.weight").columns[2], 4.0f);  // the outlier channel moves into the weights
  const auto norm = transformed(m.norm, m.n_embd, transforms.at("blk.0.ffn_norm.weight"));
  const auto gate = transformed(m.gate, m.n_embd, transforms.at("blk.0.ffn_gate.weight"));
  const auto up_rows = transformed(m.up, m.n_embd, up);
  const auto down = transformed(m.down, m.n_ff, transforms.at("blk.0.ffn_down.weight"));
  for (int trial = 0; trial < 5; ++trial) {
    const std::vector<float> x = random_floats(rng, m.n_embd);
    const auto want = ffn(m, m.norm, m.gate, m.up, m.down, x), got = ffn(m, norm, gate, up_rows, down, x);
    // Each weight picked up one float rounding (2^-24 relative) from a factor and its inverse.
    for (int64_t r = 0; r < m.n_embd; ++r) EXPECT_NEAR(got[size_t(r)], want[size_t(r)], 1e-5 * (1 + std::fabs(want[size_t(r)])));
  }
  std::remove(m.path.c_str());
}

}  // namespace
}  // namespace ds

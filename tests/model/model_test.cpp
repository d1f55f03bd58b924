// The decoder on the real stories260K model: batching, chunking and page size
// do not change the numbers; malformed models and batches fail cleanly.

#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "device/forwarding_backend.h"
#include "gguf/gguf_writer.h"
#include "kernels/cpu_features.h"
#include "support/random_model.h"

namespace ds {
namespace {

const std::string k_stories = std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf";
const std::vector<int32_t> k_tokens = {1, 403, 407, 261, 378, 30, 85, 90, 272, 336, 13, 52, 100, 7, 402};

struct Run {
  std::vector<float> logits;  // [n_tokens, n_vocab]
};

// Teacher-forced logits at every position, fed in chunks of `chunk` tokens.
std::vector<float> run(Model& model, const std::vector<int32_t>& tokens, int64_t chunk, int64_t page_tokens,
                       const std::vector<int32_t>& page_order = {}) {
  KvCacheOptions options;
  options.dtype = DType::f32;
  options.page_tokens = page_tokens;
  options.n_pages = 64;
  auto cache = KvCache::create(model.backend(), model.config(), options);
  EXPECT_TRUE(cache.ok());
  std::vector<int32_t> pages = page_order;
  if (pages.empty()) {
    pages.resize(64);
    std::iota(pages.begin(), pages.end(), 0);
  }
  const int64_t n_vocab = model.config().n_vocab;
  std::vector<float> logits(tokens.size() * size_t(n_vocab));
  for (size_t begin = 0; begin < tokens.size(); begin += size_t(chunk)) {
    const size_t end = std::min(tokens.size(), begin + size_t(chunk));
    Batch batch;
    batch.tokens.assign(tokens.begin() + int64_t(begin), tokens.begin() + int64_t(end));
    for (size_t i = begin; i < end; ++i) {
      batch.positions.push_back(int32_t(i));
      batch.seq_of_token.push_back(0);
      batch.logit_tokens.push_back(int32_t(i - begin));
    }
    batch.block_tables = {BlockTableView{pages.data(), int32_t(pages.size())}};
    const Status status = model.forward(batch, *cache.value(), logits.data() + begin * size_t(n_vocab));
    EXPECT_TRUE(status.ok()) << status.message();
  }
  return logits;
}

std::unique_ptr<Model> load_stories(int n_threads = 2, LoadMode mode = LoadMode::mmap) {
  auto model = Model::load(k_stories, ModelOptions{n_threads, mode});
  EXPECT_TRUE(model.ok()) << model.message();
  return model.ok() ? model.take() : nullptr;
}

TEST(Model, ReadsTheConfigOfStories260K) {
  auto model = load_stories();
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.family, &llama_family());
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.rope.layout, RopeLayout::normal);
}

TEST(Model, ChunkingPageSizeAndPagePlacementDoNotChangeLogits) {
  auto model = load_stories();
  ASSERT_NE(model, nullptr);
  const std::vector<float> reference = run(*model, k_tokens, 64, 16);
  std::vector<int32_t> scattered(64);
  std::iota(scattered.rbegin(), scattered.rend(), 0);
  for (auto [chunk, page] : {std::pair{1, 16}, std::pair{4, 16}, std::pair{7, 1}, std::pair{64, 3}}) {
    const std::vector<float> other = run(*model, k_tokens, chunk, page, page == 3 ? scattered : std::vector<int32_t>{});
    ASSERT_EQ(other.size(), reference.size());
    for (size_t i = 0; i < other.size(); ++i) ASSERT_NEAR(other[i], reference[i], 1e-4) << "chunk " << chunk << " page " << page;
  }
}

TEST(Model, ThreadCountAndLoadModeDoNotChangeLogits) {
  auto one = load_stories(1, LoadMode::copy);
  auto two = load_stories(2, LoadMode::mmap);
  ASSERT_TRUE(one && two);
  const std::vector<float> a = run(*one, k_tokens, 64, 16), b = run(*two, k_tokens, 64, 16);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5);
}

// Q8_0 matrices are copied into the interleaved layout where the CPU has its
// kernels; the embedding, looked up by row, keeps the file's layout. Logits
// stay within Q8_0's rounding of the row-layout run (the two add each block's
// products in a different order).
TEST(Model, QuantizedMatricesAreInterleavedAtLoad) {
  for (const char* arch : {"llama", "deepseek2"}) {
    RandomModelShape shape;
    shape.arch = arch;
    shape.weight_type = DType::q8_0;
    shape.n_embd = 128;
    shape.n_layer = 2;
    shape.n_vocab = 320;  // whole groups of eight output rows
    const std::string path = write_random_model(shape, std::string("interleaved_") + arch + ".gguf");
    auto interleaved = Model::load(path, ModelOptions{2, LoadMode::mmap, true});
    auto rows = Model::load(path, ModelOptions{2, LoadMode::mmap, false});
    ASSERT_TRUE(interleaved.ok() && rows.ok()) << interleaved.message() << rows.message();
    const ModelWeights& w = interleaved.value()->weights();
    EXPECT_FALSE(w.token_embd.repacked);
    EXPECT_EQ(w.output.repacked, use_avx2_kernels()) << arch;
    const bool llama = std::string(arch) == "llama";
    const WeightMatrix* attention = w.find_matrix(llama ? "blk.0.attn_k.weight" : "blk.0.attn_kv_a_mqa.weight");
    ASSERT_NE(attention, nullptr) << arch;
    EXPECT_EQ(attention->repacked, use_avx2_kernels()) << arch;
    if (!llama) {
      const WeightMatrix* expert = w.find_matrix("blk.1.ffn_up_exps.weight", 3 * interleaved.value()->config().moe.expert_ff);
      ASSERT_NE(expert, nullptr);
      EXPECT_EQ(expert->repacked, use_avx2_kernels());
    }
    EXPECT_FALSE(rows.value()->weights().output.repacked);
    const std::vector<int32_t> tokens = {1, 5, 17, 200, 42, 99, 7, 250, 31};
    const std::vector<float> a = run(*interleaved.value(), tokens, 64, 16), b = run(*rows.value(), tokens, 64, 16);
    float max_abs = 0.0f, max_diff = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(b[i]));
      max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
    }
    EXPECT_LE(max_diff, 2e-2f * max_abs) << arch;
  }
}

// Multi-head latent attention's expanded form (model/blocks/mla_attention.cpp): a token's
// logits depend on its position and the cache alone, not on how its prompt
// was chunked (key blocks and tiles sit at fixed positions; scattered pages
// too), and stay within f32 rounding (1e-3, the llama.cpp comparison's f32
// bound) of the absorbed form's. --mla-prefill auto takes the expanded form
// for a 300-token chunk and the absorbed one for short chunks.
TEST(Model, ExpandedMlaIsChunkInvariantAndAgreesWithTheAbsorbedForm) {
  RandomModelShape shape;
  shape.arch = "deepseek2";
  shape.n_embd = 128;
  shape.n_vocab = 320;
  const std::string path = write_random_model(shape, "mla_forms.gguf");
  const auto load = [&](MlaPrefill form) {
    ModelOptions options{2, LoadMode::mmap};
    options.mla_prefill = form;
    auto model = Model::load(path, options);
    EXPECT_TRUE(model.ok()) << model.message();
    return model.take();
  };
  auto expanded = load(MlaPrefill::expanded), absorbed = load(MlaPrefill::absorbed), automatic = load(MlaPrefill::automatic);
  std::mt19937 rng(6);
  std::vector<int32_t> tokens(300), scattered(64);
  for (int32_t& t : tokens) t = int32_t(3 + rng() % 317);
  std::iota(scattered.begin(), scattered.end(), 0);
  std::shuffle(scattered.begin(), scattered.end(), rng);
  const std::vector<float> whole = run(*expanded, tokens, 300, 16);
  EXPECT_EQ(whole, run(*expanded, tokens, 97, 16, scattered));
  EXPECT_EQ(whole, run(*automatic, tokens, 300, 16));
  const std::vector<float> plain = run(*absorbed, tokens, 300, 16);
  EXPECT_EQ(plain, run(*automatic, tokens, 16, 16));
  float max_abs = 0.0f, max_diff = 0.0f;
  for (size_t i = 0; i < whole.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(plain[i]));
    max_diff = std::max(max_diff, std::fabs(whole[i] - plain[i]));
  }
  EXPECT_GT(max_diff, 0.0f);  // two forms, not one run twice
  EXPECT_LE(max_diff, 1e-3f * max_abs);
  // Refused where it would mean nothing: a model without latent attention.
  ModelOptions dense{1, LoadMode::mmap};
  dense.mla_prefill = MlaPrefill::expanded;
  RandomModelShape llama;
  llama.arch = "llama";
  const auto refused = Model::load(write_random_model(llama, "mla_forms_llama.gguf"), dense);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("no multi-head latent attention"), std::string::npos) << refused.message();
}

TEST(Model, TwoSequencesInOneBatchEqualEachAlone) {
  auto model = load_stories();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> a(k_tokens.begin(), k_tokens.begin() + 9), b(k_tokens.begin() + 4, k_tokens.end());
  const std::vector<float> alone_a = run(*model, a, 64, 4), alone_b = run(*model, b, 64, 4);
  KvCacheOptions options{DType::f32, 4, 16};
  auto cache = KvCache::create(model->backend(), model->config(), options);
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> pages_a = {5, 1, 9}, pages_b = {0, 12, 3};
  Batch batch;
  for (size_t i = 0; i < a.size(); ++i) { batch.tokens.push_back(a[i]); batch.positions.push_back(int32_t(i)); batch.seq_of_token.push_back(0); }
  for (size_t i = 0; i < b.size(); ++i) { batch.tokens.push_back(b[i]); batch.positions.push_back(int32_t(i)); batch.seq_of_token.push_back(1); }
  batch.block_tables = {{pages_a.data(), 3}, {pages_b.data(), 3}};
  batch.logit_tokens = {int32_t(a.size() - 1), int32_t(a.size() + b.size() - 1)};
  const int64_t n_vocab = model->config().n_vocab;
  std::vector<float> logits(2 * size_t(n_vocab));
  ASSERT_TRUE(model->forward(batch, *cache.value(), logits.data()).ok());
  for (int64_t v = 0; v < n_vocab; ++v) {
    EXPECT_NEAR(logits[size_t(v)], alone_a[(a.size() - 1) * size_t(n_vocab) + size_t(v)], 1e-4);
    EXPECT_NEAR(logits[size_t(n_vocab + v)], alone_b[(b.size() - 1) * size_t(n_vocab) + size_t(v)], 1e-4);
  }
}

TEST(Model, MalformedBatchesAreErrors) {
  auto model = load_stories();
  ASSERT_NE(model, nullptr);
  auto cache = KvCache::create(model->backend(), model->config(), KvCacheOptions{DType::f16, 4, 2});
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> pages = {0, 1};
  Batch batch;
  batch.tokens = {9999};
  batch.positions = {0};
  batch.seq_of_token = {0};
  batch.block_tables = {{pages.data(), 2}};
  std::vector<float> logits(512);
  EXPECT_NE(model->forward(batch, *cache.value(), logits.data()).message().find("vocabulary"), std::string::npos);
  batch.tokens = {1};
  batch.positions = {8};  // past the two pages of 4 tokens
  EXPECT_NE(model->forward(batch, *cache.value(), logits.data()).message().find("KV page"), std::string::npos);
}

std::string load_error(GgufWriter& writer) {
  const std::string path = ::testing::TempDir() + "/crafted_model.gguf";
  EXPECT_TRUE(writer.write_file(path).ok());
  auto model = Model::load(path, ModelOptions{1, LoadMode::copy});
  return model.ok() ? std::string() : model.message();
}

TEST(Model, UnknownArchitectureAndMissingTensorsFailAtLoad) {
  GgufWriter unknown;
  unknown.add_string("general.architecture", "gptj");
  const std::string arch_error = load_error(unknown);
  EXPECT_NE(arch_error.find("gptj"), std::string::npos);
  EXPECT_NE(arch_error.find("qwen2"), std::string::npos);

  GgufWriter missing;
  missing.add_string("general.architecture", "llama");
  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.feed_forward_length", "llama.context_length"}) {
    missing.add_uint32(key, 32);
  }
  missing.add_uint32("llama.attention.head_count", 4);
  const std::vector<float> embd(32 * 10, 0.5f);
  missing.add_tensor("token_embd.weight", DType::f32, {32, 10}, embd.data(), embd.size() * 4);
  EXPECT_NE(load_error(missing).find("output_norm.weight"), std::string::npos);

  GgufWriter no_dims;
  no_dims.add_string("general.architecture", "qwen2");
  EXPECT_NE(load_error(no_dims).find("qwen2.embedding_length"), std::string::npos);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// MLA caches one latent plus one shared RoPE key per token and layer, not
// per-head keys and values: (kv_lora_rank + rope) x layers x element size.
TEST(Model, MlaCachesOnlyTheLatentAndTheRopeKey) {
  RandomModelShape shape;
  shape.arch = "deepseek2";
  shape.n_embd = 128;
  shape.n_layer = 3;
  auto model = Model::load(write_random_model(shape, "mla_kv_bytes.gguf"), ModelOptions{1, LoadMode::mmap});
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model.value()->config();
  EXPECT_EQ(c.family, &deepseek2_family());
  EXPECT_EQ(c.mla.kv_lora_rank, 64);
  EXPECT_EQ(c.mla.qk_rope_dim, 32);
  EXPECT_EQ(KvCache::bytes_per_token(c, DType::f16), (64 + 32) * 3 * 2);
  EXPECT_EQ(KvCache::bytes_per_token(c, DType::f32), (64 + 32) * 3 * 4);
  auto cache = KvCache::create(model.value()->backend(), c, KvCacheOptions{DType::f16, 16, 4});
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache.value()->page_bytes(), 16 * (64 + 32) * 3 * 2);
  EXPECT_EQ(cache.value()->layer(0).v, nullptr);
  EXPECT_FALSE(KvCache::create(model.value()->backend(), c, KvCacheOptions{DType::q8_0, 16, 4}).ok());
}

// A backend without an op the model's forward calls refuses the model at
// load, naming every op it lacks, rather than failing mid-forward.
TEST(Model, ABackendWithoutTheFamilysOpsRefusesItNamingThem) {
  struct WithoutSparseAttention : ForwardingBackend {
    using ForwardingBackend::ForwardingBackend;
    bool has_sparse_attention() const override { return false; }
  };
  RandomModelShape shape;
  shape.arch = "deepseek32";
  shape.n_embd = 128;
  shape.n_layer = 2;
  const std::string path = write_random_model(shape, "deepseek32_ops.gguf");
  const BackendDecorator without = [](std::unique_ptr<Backend> b) -> std::unique_ptr<Backend> {
    return std::make_unique<WithoutSparseAttention>(std::move(b));
  };
  auto refused = Model::load(path, ModelOptions{1, LoadMode::mmap}, without);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("does not implement ops deepseek32's forward calls: layer_norm, indexer_select, sparse_attention"),
            std::string::npos)
      << refused.message();
  auto loaded = Model::load(path, ModelOptions{1, LoadMode::mmap});
  EXPECT_TRUE(loaded.ok()) << loaded.message();
}

}  // namespace
}  // namespace ds

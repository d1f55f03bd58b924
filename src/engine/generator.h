#pragma once
// One sequence from prompt to finish on a model: chunked prefill, then one
// decode step per token. Pages are taken in order from a private KV cache
// sized for the context; the serving engine's shared page pool replaces this
// for concurrent requests.

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ds {

struct GenerateOptions {
  int32_t max_tokens = 128;
  int64_t prefill_chunk = 512;  // tokens per prefill forward
  SamplingParams sampling;
  bool stop_at_end_of_generation = true;
};

struct GenerateStats {
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  int64_t n_decode_steps = 0;  // forwards after prefill (the first token comes from prefill)
  double prompt_seconds = 0.0;
  double generate_seconds = 0.0;
};

class Generator {
 public:
  // on_token returns false to stop early.
  using TokenCallback = std::function<bool(int32_t token)>;

  static Result<std::unique_ptr<Generator>> create(Model& model, int64_t n_ctx, const KvCacheOptions& kv_options);

  Result<GenerateStats> generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                 const Tokenizer* tokenizer, const TokenCallback& on_token);

 private:
  Generator(Model& model, std::unique_ptr<KvCache> cache, int64_t n_ctx);
  Status run(const std::vector<int32_t>& tokens, int32_t first_position, bool want_logits);

  Model& model_;
  std::unique_ptr<KvCache> cache_;
  int64_t n_ctx_;
  std::vector<int32_t> block_table_;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace ds

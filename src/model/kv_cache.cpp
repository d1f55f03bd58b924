#include "model/kv_cache.h"

#include <sys/mman.h>

namespace ds {

int64_t KvCache::bytes_per_token(const ModelConfig& config, DType dtype) {
  return row_bytes(dtype, config.kv_dim()) * 2 * config.n_layer;
}

Result<std::unique_ptr<KvCache>> KvCache::create(const ModelConfig& config, const KvCacheOptions& options) {
  if (options.dtype != DType::f16 && options.dtype != DType::f32 && options.dtype != DType::q8_0) {
    return Status::error("kv cache: dtype must be f16, f32 or q8_0");
  }
  if (options.dtype == DType::q8_0 && config.head_dim % dtype_traits(DType::q8_0).block_elements != 0) {
    return Status::error("kv cache: q8_0 needs a head size that is a multiple of 32, the model's is " +
                         std::to_string(config.head_dim));
  }
  if (options.page_tokens <= 0 || options.page_tokens > 4096) return Status::error("kv cache: page size must be 1..4096 tokens");
  if (options.n_pages <= 0) return Status::error("kv cache: the pool needs at least one page");
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->options_ = options;
  cache->n_layer_ = config.n_layer;
  cache->kv_dim_ = config.kv_dim();
  cache->page_bytes_per_layer_ = options.page_tokens * row_bytes(options.dtype, config.kv_dim());
  cache->memory_bytes_ = size_t(cache->page_bytes_per_layer_ * options.n_pages * 2 * config.n_layer);
  void* mem = mmap(nullptr, cache->memory_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Status::error("kv cache: cannot allocate " + std::to_string(cache->memory_bytes_) + " bytes");
  madvise(mem, cache->memory_bytes_, MADV_HUGEPAGE);
  cache->memory_ = static_cast<uint8_t*>(mem);
  return cache;
}

KvCache::~KvCache() {
  if (memory_) munmap(memory_, memory_bytes_);
}

KvLayerView KvCache::layer(int64_t index) const {
  const size_t layer_bytes = size_t(page_bytes_per_layer_ * options_.n_pages);
  uint8_t* k = memory_ + size_t(index) * 2 * layer_bytes;
  return KvLayerView{options_.dtype, k, k + layer_bytes, options_.page_tokens, kv_dim_};
}

}  // namespace ds

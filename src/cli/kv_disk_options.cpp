#include "cli/kv_disk_options.h"

#include <chrono>

#include "base/log.h"
#include "base/memory_size.h"
#include "engine/step_broadcast.h"
#include "kernels/cpu_features.h"

namespace ds {

OptionTable kv_disk_option_table() {
  return {
      {{"--kv-disk-dir"}, "DIR", "", "keep full KV pages in DIR too, for prefix reuse beyond the pool and across restarts"},
      {{"--kv-disk-bytes"}, "SIZE", "10GiB", "with --kv-disk-dir: the directory's size at most; past it the least recently used pages go"},
  };
}

Result<std::optional<KvDiskSettings>> parse_kv_disk_options(const Args& args, const ModelConfig& config, const KvCacheOptions& kv,
                                                            bool prefix_cache) {
  if (!args.has("--kv-disk-dir")) {
    if (args.has("--kv-disk-bytes")) return Status::error("--kv-disk-bytes bounds --kv-disk-dir: give --kv-disk-dir DIR");
    return std::optional<KvDiskSettings>();
  }
  const int64_t page_bytes = (KvCache::page_bytes(config, kv.dtype, kv.page_tokens) + KvCache::window_page_bytes(config, kv)) * tier_parts(config);
  auto bytes = parse_memory_size(args.get("--kv-disk-bytes"));
  if (!bytes.ok() || bytes.value() < page_bytes) {
    return Status::error("--kv-disk-bytes must be a size of at least one page (" + std::to_string(page_bytes) + " bytes)");
  }
  if (!prefix_cache) return Status::error("--kv-disk-dir extends the prefix cache: it cannot go with --no-prefix-cache");
  return std::optional<KvDiskSettings>(KvDiskSettings{args.get("--kv-disk-dir"), bytes.value()});
}

Result<std::unique_ptr<KvDiskTier>> open_kv_disk_tier(const KvDiskSettings& settings, const CommonModelOptions& options,
                                                      const ModelConfig& config, const KvCache& memory, const std::string& backend) {
  const std::string numerics = std::string(config.family->name) + " kv " + dtype_name(memory.dtype()) + " page " +
                               std::to_string(memory.page_tokens()) + " mla-prefill " + std::to_string(int(options.model.mla_prefill)) +
                               " interleave " + std::to_string(options.model.interleave) + " backend " + backend + " isa " + kernel_isa_name() +
                               // a window page's rings are sized by the draft tokens (KvCacheOptions::draft_tokens)
                               " window " + std::to_string(memory.window_bytes()) +
                               // a split model's pages on disk are every rank's parts of them (tier_parts)
                               " ranks " + std::to_string(config.ranks.ranks) + " parts " + std::to_string(tier_parts(config));
  auto fingerprint = kv_fingerprint(options.path, numerics);
  if (!fingerprint.ok()) return fingerprint.status();
  KvDiskTierOptions tier;
  tier.dir = settings.dir;
  tier.max_bytes = settings.max_bytes;
  tier.fingerprint = fingerprint.value();
  tier.page_bytes = (memory.page_bytes() + memory.window_bytes()) * tier_parts(config);  // a page, then its window page
  tier.page_tokens = int32_t(memory.page_tokens());
  const auto started = std::chrono::steady_clock::now();
  auto opened = KvDiskTier::open(tier);
  if (!opened.ok()) return opened.status();
  const KvDiskTierStats stats = opened.value()->stats();
  DS_LOG_INFO("kv disk tier %s: %lld page files (%s; %lld of another model or setting) found in %.0f ms, budget %s, fingerprint %016llx",
              tier.dir.c_str(), (long long)stats.files, format_memory_size(stats.bytes).c_str(), (long long)stats.foreign_files,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
              format_memory_size(tier.max_bytes).c_str(), (unsigned long long)tier.fingerprint);
  return opened;
}

}  // namespace ds

#pragma once
// --kv-disk-dir and --kv-disk-bytes, for serve's model versions and `bench
// --concurrency`: the prefix cache's disk tier (engine/kv_disk_tier.h), its
// fingerprint made from the weights file and every setting a KV page's bytes
// depend on.

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/model_options.h"
#include "engine/kv_disk_tier.h"
#include "model/kv_cache.h"

namespace ds {

OptionTable kv_disk_option_table();

struct KvDiskSettings {
  std::string dir;
  int64_t max_bytes = 0;
};

// The settings, or nullopt without --kv-disk-dir; refused by name with what
// they cannot go with (no prefix cache). `config`: this rank's part under
// tensor parallel, whose pages go to disk with the other ranks' parts (tier_parts).
Result<std::optional<KvDiskSettings>> parse_kv_disk_options(const Args& args, const ModelConfig& config, const KvCacheOptions& kv,
                                                            bool prefix_cache);

// Opens the tier for pages of `memory` of this model and settings (under
// tensor parallel: every rank's parts of each, as tier_link moves them);
// logs what the directory held.
Result<std::unique_ptr<KvDiskTier>> open_kv_disk_tier(const KvDiskSettings& settings, const CommonModelOptions& options,
                                                      const ModelConfig& config, const KvCache& memory, const std::string& backend);

}  // namespace ds

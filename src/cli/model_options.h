#pragma once
// Options every model-loading command shares, and their parsing.

#include <optional>
#include <set>
#include <string>

#include "base/status.h"
#include "cli/args.h"
#include "device/device.h"
#include "engine/draft_model.h"
#include "engine/mtp_drafter.h"
#include "engine/ngram_drafter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ds {

// The options every model-loading command takes: the file, threads, context,
// the KV pool's pages and type, --mla-prefill (multi-head latent attention's
// form for a chunk of prompt, model/blocks/mla_attention.cpp), --no-mmap, --no-repack.
OptionTable model_option_table();
// --device and --run-dir: what claim_device reads. --device cuda:N is not a
// version's option (a swap stays on its device).
OptionTable device_option_table();
// --tensor-parallel and --expert-parallel (cli/tensor_parallel_ranks.h).
OptionTable tensor_parallel_option_table();

struct CommonModelOptions {
  std::string path;
  ModelOptions model;
  KvCacheOptions kv;  // page_tokens: --kv-page-tokens, else the model's once settle_page_tokens has seen it
  bool page_tokens_given = false;
  int64_t n_ctx = 0;  // 0: the model's training context, capped at 4096
  int64_t kv_memory_bytes = 0;  // --kv-cache-memory; 0: the command sizes the pool for its own needs
};

// The KV pool: as many pages as kv_memory_bytes holds when it was given (an
// error if that is not even one page), else `needed_pages`; and, for a family
// with windowed streams, the window pages of max_seqs sequences in steps of
// max_step_tokens (KvCache::default_window_pages), beside them. Reports the
// choice on stderr, with the pages' sizes in bytes.
Result<KvCacheOptions> size_kv_pool(const CommonModelOptions& options, const ModelConfig& config, int64_t needed_pages, int64_t max_seqs,
                                    int64_t max_step_tokens);

// `ranks`: the tensor-parallel ranks this process is one of (null: one
// process), which the model is split across and --device names one device each.
Result<CommonModelOptions> parse_model_options(const Args& args, Collective* ranks = nullptr);

// The KV page size: --kv-page-tokens where given, else the one the model's
// rows fit (KvRowShape::page_tokens).
void settle_page_tokens(CommonModelOptions& options, const ModelConfig& config);
// The model at options.path, with settle_page_tokens applied.
Result<std::unique_ptr<Model>> load_model(CommonModelOptions& options);

// The device --device names for this process: under tensor parallel
// (`ranks`) the list's entry for this rank; nullopt without --device.
Result<std::optional<DeviceSpec>> rank_device(const Args& args, const Collective* ranks);
// Claims rank_device when given (device/device.h: pins this process to its
// cores, binds its memory to a NUMA node, locks the cores or the GPU under
// --run-dir), to be called before any thread starts and before
// parse_model_options (whose default thread count is the cores it may run
// on); nullopt without --device (--run-dir alone is refused).
Result<std::optional<DeviceClaim>> claim_device(const Args& args, const Collective* ranks = nullptr);

// --speculative-ngram N: up to N draft tokens per decode step by prompt
// lookup (engine/ngram_drafter.h), 0..16; absent or 0: off. Or --draft-model
// FILE with --draft-tokens N (1..16, default 4) and --draft-p-min P (0..1,
// default 0.75): drafts from that model (engine/draft_model.h), which must
// have the target's vocabulary. Or --speculative-mtp N (1..16), with
// --draft-p-min as above: drafts from the model file's multi-token-prediction
// layer (engine/mtp_drafter.h; parse_model_options then has the KV pages keep its rows).
Result<SpeculationConfig> parse_speculation(const Args& args);
// The options parse_speculation reads.
OptionTable speculation_option_table();

// The draft model of `speculation` (nullptr when it names none), loaded on
// the target's backend with its options (placement, KV type), its vocabulary checked
// against the target's token by token, with a KV pool of `n_positions`
// positions for all the sequences it drafts for.
Result<std::unique_ptr<DraftModel>> load_draft_model(const SpeculationConfig& speculation, const CommonModelOptions& options,
                                                     Model& target, const Vocab& target_vocab, int64_t n_positions);
// The multi-token-prediction drafter of `speculation` (nullptr when it asks
// for none) over target's file and its KV pages `memory`.
Result<std::unique_ptr<MtpDrafter>> load_mtp_drafter(const SpeculationConfig& speculation, const CommonModelOptions& options,
                                                     Model& target, KvCache& memory);

}  // namespace ds

#include "cli/model_options.h"
#include "cli/model_source.h"

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "base/memory_size.h"
#include "device/device.h"

namespace ds {
namespace {

constexpr int64_t k_max_context = int64_t(1) << 24;
constexpr int64_t k_max_page_tokens = 4096;
// Until the model says what its rows fit (settle_page_tokens).
constexpr int64_t k_default_page_tokens = 16;

}  // namespace

OptionTable model_option_table() {
  return {
      {{"-m", "--model"}, "FILE", "", "the model, a GGUF file or hf://OWNER/NAME[@REVISION]/FILE (pulled into the hub cache)"},
      {{"-t", "--threads"}, "N", "", "threads the model runs on, 1..1024 (default: every CPU this process may run on)"},
      {{"-c", "--ctx-size"}, "N", "0", "the longest sequence in tokens; 0: the model's training context, capped at 4096"},
      {{"--kv-page-tokens"}, "N", "", "tokens a KV page holds, 1..4096 (default: what the model's rows fit)"},
      {{"--kv-cache-dtype"}, "f16|f32|q8_0", "f16", "the type the KV cache stores"},
      {{"--kv-cache-memory"}, "SIZE", "", "the KV pool's size, e.g. 8GiB (default: what the command needs)"},
      {{"--mla-prefill"}, "auto|expanded|absorbed", "auto", "multi-head latent attention's form for a chunk of prompt"},
      {{"--no-mmap"}, "", "", "read the weights into memory instead of mapping the file"},
      {{"--no-repack"}, "", "", "keep the weights in the file's layout, not interleaved for the kernels"},
  };
}

OptionTable device_option_table() {
  return {
      {{"--device"}, "cpu:CORES|cpu:numaN|cuda:N[,...]", "",
       "cpu:0-7 pins this process to those cores, cpu:numa0 to a NUMA node's cores and memory; cuda:N runs the model on that GPU; "
       "each is locked under --run-dir. With --tensor-parallel N, N devices, one per rank in rank order (cpu:numa0,cpu:numa1)"},
      {{"--run-dir"}, "DIR", "", "where device locks live (default: $DSINFER_RUN_DIR, else /run/dsinfer, else /tmp/dsinfer)"},
  };
}

OptionTable tensor_parallel_option_table() {
  return {
      {{"--tensor-parallel"}, "N", "1", "split the model across N processes started by mpirun, 1..1024"},
      {{"--expert-parallel"}, "N", "", "divide the routed experts whole among the ranks, not by width (N: --tensor-parallel's)"},
  };
}

Result<std::optional<DeviceSpec>> rank_device(const Args& args, const Collective* ranks) {
  if (!args.has("--device")) return std::optional<DeviceSpec>();
  auto devices = parse_devices(args.get("--device"));
  if (!devices.ok()) return devices.status();
  const int n_ranks = ranks ? ranks->size() : 1;
  if (int(devices.value().size()) != n_ranks) {
    return Status::error("--device names " + std::to_string(devices.value().size()) + " devices for " + std::to_string(n_ranks) +
                         (n_ranks == 1 ? " process" : " ranks") + ": give one per rank of --tensor-parallel");
  }
  return std::optional<DeviceSpec>(std::move(devices.value()[size_t(ranks ? ranks->rank() : 0)]));
}

Result<std::optional<DeviceClaim>> claim_device(const Args& args, const Collective* ranks) {
  auto spec = rank_device(args, ranks);
  if (!spec.ok()) return spec.status();
  if (!spec.value()) {
    if (args.has("--run-dir")) return Status::error("--run-dir holds device locks: give --device too");
    return std::optional<DeviceClaim>();
  }
  const DeviceSpec& device = *spec.value();
  const std::string run_dir = args.has("--run-dir") ? args.get("--run-dir") : default_run_dir();
  auto claim = DeviceClaim::claim(device, run_dir);
  if (!claim.ok()) return claim.status();
  const std::string who = ranks ? "rank " + std::to_string(ranks->rank()) + ": " : "";
  if (device.gpu >= 0) {
    DS_LOG_INFO("%sdevice %s: locked under %s; the model runs on its CUDA backend", who.c_str(), device.text.c_str(), run_dir.c_str());
  } else {
    DS_LOG_INFO("%sdevice %s: %zu cores pinned and locked under %s", who.c_str(), device.text.c_str(), device.cores.size(), run_dir.c_str());
  }
  return std::optional<DeviceClaim>(claim.take());
}

OptionTable speculation_option_table() {
  return {
      {{"--speculative-ngram"}, "N", "0", "draft up to N tokens a decode step by prompt lookup, 0..16; 0: off"},
      {{"--speculative-mtp"}, "N", "", "draft N tokens a step, 1..16, with the model file's multi-token-prediction layer"},
      {{"--draft-model"}, "FILE", "", "draft with this smaller GGUF model, which shares the vocabulary"},
      {{"--draft-tokens"}, "N", "4", "tokens --draft-model drafts a step, 1..16"},
      {{"--draft-p-min"}, "P", "0.75", "drafts (--draft-model, --speculative-mtp) stop before a token the drafter gives less probability"},
  };
}

namespace {

Status read_draft_p_min(const Args& args, SpeculationConfig& config) {
  auto p_min = args.get_float("--draft-p-min");
  if (!p_min.ok()) return p_min.status();
  if (!(p_min.value() >= 0 && p_min.value() <= 1)) return Status::error("--draft-p-min must be in [0, 1]");
  config.draft_p_min = float(p_min.value());
  return Status();
}

}  // namespace

Result<SpeculationConfig> parse_speculation(const Args& args) {
  SpeculationConfig config;
  const int drafters = int(args.has("--draft-model")) + int(args.has("--speculative-ngram")) + int(args.has("--speculative-mtp"));
  if (drafters > 1) return Status::error("--draft-model, --speculative-ngram and --speculative-mtp are three drafters: give one");
  if (args.has("--draft-model")) {
    if (args.get("--draft-model").empty()) return Status::error("--draft-model needs a GGUF file");
    auto draft = model_source_path(args.get("--draft-model"));
    if (!draft.ok()) return Status::error("--draft-model: " + draft.message());
    config.draft_model = draft.take();
    auto n = args.get_int("--draft-tokens");
    if (!n.ok()) return n.status();
    if (n.value() < 1 || n.value() > 16) return Status::error("--draft-tokens must be 1..16");
    config.n_draft = int32_t(n.value());
    DS_RETURN_IF_ERROR(read_draft_p_min(args, config));
    return config;
  }
  if (args.has("--draft-tokens")) return Status::error("--draft-tokens applies to --draft-model: give --draft-model");
  if (args.has("--speculative-mtp")) {
    auto n = args.get_int("--speculative-mtp");
    if (!n.ok()) return n.status();
    if (n.value() < 1 || n.value() > 16) return Status::error("--speculative-mtp must be 1..16 draft tokens");
    config.n_draft = int32_t(n.value());
    config.mtp = true;
    DS_RETURN_IF_ERROR(read_draft_p_min(args, config));
    return config;
  }
  if (args.has("--draft-p-min")) return Status::error("--draft-p-min applies to --draft-model and --speculative-mtp: give one");
  if (!args.has("--speculative-ngram")) return config;  // off, or a command that does not speculate
  auto n = args.get_int("--speculative-ngram");
  if (!n.ok()) return n.status();
  if (n.value() < 0 || n.value() > 16) return Status::error("--speculative-ngram must be 0..16 draft tokens");
  config.n_draft = int32_t(n.value());
  return config;
}

Result<std::unique_ptr<DraftModel>> load_draft_model(const SpeculationConfig& speculation, const CommonModelOptions& options,
                                                     Model& target, const Vocab& target_vocab, int64_t n_positions) {
  if (speculation.draft_model.empty()) return std::unique_ptr<DraftModel>();
  // On the target's backend: one set of threads, where two would spin against each other on the same cores
  // (measured: a stories260K draft on a backend of its own cut the trained Llama's decode to a tenth at 2 threads).
  // Whole, on rank 0 alone, under tensor parallel: only the engine there drafts.
  ModelOptions draft_options = options.model;
  draft_options.collective = nullptr;
  auto model = Model::load_beside(speculation.draft_model, draft_options, target);
  if (!model.ok()) return Status::error("--draft-model: " + model.message());
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  if (!tokenizer.ok()) return Status::error("--draft-model: " + tokenizer.message());
  const std::vector<std::string>& tokens = tokenizer.value()->vocab().tokens;
  if (tokens.size() != target_vocab.tokens.size() || model.value()->config().n_vocab != target.config().n_vocab) {
    return Status::error("--draft-model: its vocabulary has " + std::to_string(tokens.size()) + " tokens and " +
                         std::to_string(model.value()->config().n_vocab) + " logits, the model's " +
                         std::to_string(target_vocab.tokens.size()) + " and " + std::to_string(target.config().n_vocab) +
                         ": a draft model must share the vocabulary");
  }
  const auto differ = std::mismatch(tokens.begin(), tokens.end(), target_vocab.tokens.begin()).first;
  if (differ != tokens.end()) {
    return Status::error("--draft-model: its token " + std::to_string(differ - tokens.begin()) +
                         " differs from the model's: a draft model must share the vocabulary");
  }
  KvCacheOptions kv = options.kv;
  kv.n_pages = (n_positions + kv.page_tokens - 1) / kv.page_tokens;
  return DraftModel::create(model.take(), kv, speculation.draft_p_min);
}

Result<std::unique_ptr<MtpDrafter>> load_mtp_drafter(const SpeculationConfig& speculation, const CommonModelOptions& options,
                                                     Model& target, KvCache& memory) {
  if (!speculation.mtp) return std::unique_ptr<MtpDrafter>();
  if (options.model.collective) return Status::error("--speculative-mtp with --tensor-parallel is not implemented");
  auto drafter = MtpDrafter::create(target, memory, options.model, speculation.draft_p_min);
  if (!drafter.ok()) return Status::error("--speculative-mtp: " + drafter.message());
  return drafter;
}

Result<CommonModelOptions> parse_model_options(const Args& args, Collective* ranks) {
  CommonModelOptions o;
  // The KV pages keep the multi-token-prediction layer's rows beside the model's.
  o.model.nextn_rows = args.has("--speculative-mtp");
  // Rings in the pages keep the rows a rejected draft may overwrite (KvCacheOptions::draft_tokens).
  auto speculation = parse_speculation(args);
  if (!speculation.ok()) return speculation.status();
  o.kv.draft_tokens = speculation.value().n_draft;
  if (args.has("--expert-parallel")) {
    // The routed experts divided whole among the tensor-parallel ranks, not by width.
    auto tensor = args.get_int("--tensor-parallel"), experts = args.get_int("--expert-parallel");
    if (!tensor.ok()) return tensor.status();
    if (!experts.ok()) return experts.status();
    if (tensor.value() < 2) return Status::error("--expert-parallel divides the experts among --tensor-parallel's ranks: give --tensor-parallel N");
    if (experts.value() != tensor.value()) {
      return Status::error("--expert-parallel " + std::to_string(experts.value()) + ": experts divided among other ranks than --tensor-parallel's " +
                           std::to_string(tensor.value()) + " is not implemented (give the same N)");
    }
    o.model.expert_parallel = true;
  }
  if (args.get("--model").empty()) return Status::error("missing -m MODEL.gguf");
  auto path = model_source_path(args.get("--model"));
  if (!path.ok()) return path.status();
  o.path = path.take();
  // Default: every CPU this process may run on (its --device, taskset or cpuset).
  auto threads = args.get_int("--threads", int64_t(usable_cpu_count()));
  if (!threads.ok()) return threads.status();
  if (threads.value() < 1 || threads.value() > 1024) return Status::error("--threads must be between 1 and 1024");
  o.model.n_threads = int(threads.value());
  o.model.collective = ranks;
  // cuda:N runs the model on that GPU; cpu:CORES only pins (claim_device)
  auto device = rank_device(args, ranks);
  if (!device.ok()) return device.status();
  if (device.value()) o.model.backend = device.value()->backend();
  o.model.load_mode = args.has("--no-mmap") ? LoadMode::copy : LoadMode::mmap;
  o.model.interleave = !args.has("--no-repack");
  const std::string mla = args.get("--mla-prefill");
  if (mla == "auto") {
    o.model.mla_prefill = MlaPrefill::automatic;
  } else if (mla == "expanded") {
    o.model.mla_prefill = MlaPrefill::expanded;
  } else if (mla == "absorbed") {
    o.model.mla_prefill = MlaPrefill::absorbed;
  } else {
    return Status::error("--mla-prefill must be auto, expanded or absorbed, got '" + mla.substr(0, 64) + "'");
  }
  auto ctx = args.get_int("--ctx-size");
  if (!ctx.ok()) return ctx.status();
  if (ctx.value() < 0 || ctx.value() > k_max_context) {
    return Status::error("--ctx-size must be between 1 and " + std::to_string(k_max_context) + " (0 or absent: the model's)");
  }
  o.n_ctx = ctx.value();
  auto page = args.get_int("--kv-page-tokens", k_default_page_tokens);
  if (!page.ok()) return page.status();
  if (page.value() < 1 || page.value() > k_max_page_tokens) {
    return Status::error("--kv-page-tokens must be between 1 and " + std::to_string(k_max_page_tokens));
  }
  o.kv.page_tokens = page.value();
  o.page_tokens_given = args.has("--kv-page-tokens");
  const std::string dtype = args.get("--kv-cache-dtype");
  if (dtype == "f16") {
    o.kv.dtype = DType::f16;
  } else if (dtype == "f32") {
    o.kv.dtype = DType::f32;
  } else if (dtype == "q8_0") {
    o.kv.dtype = DType::q8_0;
  } else {
    return Status::error("--kv-cache-dtype must be f16, f32 or q8_0, got '" + dtype + "'");
  }
  if (args.has("--kv-cache-memory")) {
    auto bytes = parse_memory_size(args.get("--kv-cache-memory"));
    if (!bytes.ok()) return Status::error("--kv-cache-memory: " + bytes.message());
    o.kv_memory_bytes = bytes.value();
  }
  return o;
}

void settle_page_tokens(CommonModelOptions& options, const ModelConfig& config) {
  if (!options.page_tokens_given) options.kv.page_tokens = config.kv.page_tokens;
}

Result<std::unique_ptr<Model>> load_model(CommonModelOptions& options) {
  auto model = Model::load(options.path, options.model);
  if (model.ok()) settle_page_tokens(options, model.value()->config());
  return model;
}

Result<KvCacheOptions> size_kv_pool(const CommonModelOptions& options, const ModelConfig& config, int64_t needed_pages, int64_t max_seqs,
                                    int64_t max_step_tokens) {
  KvCacheOptions kv = options.kv;
  const int64_t page_bytes = KvCache::page_bytes(config, kv.dtype, kv.page_tokens);
  int64_t pages = needed_pages;
  if (options.kv_memory_bytes > 0) {
    pages = options.kv_memory_bytes / page_bytes;
    if (pages < 1) {
      return Status::error("--kv-cache-memory of " + std::to_string(options.kv_memory_bytes) +
                           " bytes holds no page; one page of " + std::to_string(options.kv.page_tokens) +
                           " tokens takes " + std::to_string(page_bytes) + " bytes");
    }
  }
  kv.n_pages = pages;
  kv.n_window_pages = KvCache::default_window_pages(config, kv.page_tokens, max_seqs, max_step_tokens);
  std::fprintf(stderr, "KV pool: %lld pages of %lld tokens, %s, %.1f KiB per page, %.1f MiB in all\n", (long long)pages,
               (long long)kv.page_tokens, dtype_name(kv.dtype), double(page_bytes) / 1024.0, double(pages * page_bytes) / 1048576.0);
  if (kv.n_window_pages > 0) {
    const int64_t window_bytes = KvCache::window_page_bytes(config, kv);
    std::fprintf(stderr, "KV window pages (the last %lld positions of each sequence): %lld, %.1f KiB each, %.1f MiB in all\n",
                 (long long)config.kv.horizon + 1, (long long)kv.n_window_pages, double(window_bytes) / 1024.0,
                 double(kv.n_window_pages * window_bytes) / 1048576.0);
  }
  return kv;
}

}  // namespace ds

// dsinfer info: what a model file holds and what serving it costs in memory.

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/model_source.h"
#include "model/family.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "quant/quant_policy.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

// Runs every loader that reads metadata (model config, tokenizer, chat
// template) and prints each key they looked up, one per line, present or
// not; what a crafted-file test must cover. Exit 1 if a loader refused.
int print_keys_read(const GgufFile& file) {
  Status first_error;
  auto config = ModelConfig::from_gguf(file);
  if (!config.ok()) first_error = config.status();
  auto tokenizer = Tokenizer::from_gguf(file);
  if (!tokenizer.ok() && first_error.ok()) first_error = tokenizer.status();
  auto chat_template = ChatTemplate::choose(&file, "");
  if (!chat_template.ok() && first_error.ok()) first_error = chat_template.status();
  for (const std::string& key : file.keys_looked_up()) std::printf("%s\n", key.c_str());
  if (!first_error.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", first_error.message().c_str());
    return 1;
  }
  return 0;
}

// Every op the model's forward calls and, for each backend this machine
// has, whether it implements it: what moving the model to other hardware
// needs first. Exit 1 when the config does not load.
int print_forward_ops(const GgufFile& file) {
  auto config = ModelConfig::from_gguf(file);
  if (!config.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", config.message().c_str());
    return 1;
  }
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> backends;
  for (const char* device : {"cpu", "cuda:0"}) {
    auto backend = create_backend(device, 1);
    if (backend.ok()) {
      std::printf("%s: %s\n", device, backend.value()->name().c_str());
      backends.emplace_back(device, backend.take());
    } else {
      std::printf("%s: not on this machine (%s)\n", device, backend.message().c_str());
    }
  }
  std::printf("%-24s", "op");
  for (const auto& b : backends) std::printf(" %-8s", b.first.c_str());
  std::printf("\n");
  for (BackendOp op : forward_ops(config.value())) {
    std::printf("%-24s", backend_op_name(op));
    for (const auto& b : backends) std::printf(" %-8s", b.second->implements(op) ? "yes" : "MISSING");
    std::printf("\n");
  }
  return 0;
}

// DeepSeek-V4's layers and what its cache holds per token and per sequence,
// beside the compact layout of ../shared/DEEPSEEK-V32-V4.md section 3, which
// keeps the raw window and the compressors' projections in per-sequence
// rings (f32) where dsinfer keeps them in window pages (the KV type).
void print_deepseek4(const ModelConfig& c) {
  const Deepseek4Config& v = c.v4;
  const int64_t hd = c.head_dim, ik = c.indexer.key_dim;
  int64_t n_window_only = 0, n_csa = 0, n_hca = 0;
  for (int64_t r : v.compress_ratios) (r == 0 ? n_window_only : r == 4 ? n_csa : n_hca) += 1;
  // Elements per token of each stream kind, over the layers.
  const int64_t raw = c.n_layer * hd;
  const int64_t projections = n_csa * (2 * 2 * hd + 2 * 2 * ik) + n_hca * 2 * hd;
  const int64_t compressed_x4 = n_csa * (hd + ik), compressed_x128 = n_hca * hd;  // per 4 and per 128 tokens
  const double compressed = double(compressed_x4) / 4.0 + double(compressed_x128) / 128.0;
  // The compact layout's fixed state: the window's raw rows and the projections' rings (f32).
  const int64_t window_state = c.n_layer * v.window * hd;
  const int64_t ring_state = n_csa * (2 * 2 * hd * 8 + 2 * 2 * ik * 8) + n_hca * 2 * hd * 128;
  // dsinfer's ring of ratio-4 projections in a window page of the family's size (no draft tokens).
  int64_t ring_rows = 0;
  for (const auto& layer : c.kv.layer_streams) {
    for (const KvStream& s : layer) {
      const int64_t rows = s.rows_per_page(c.kv.page_tokens, 0);
      if (s.ring_horizon > 0 && rows < c.kv.page_tokens) ring_rows = rows;
    }
  }
  std::printf("deepseek4: %lld hyper-connection streams (Sinkhorn %lld), window %lld, layers: %lld window-only, %lld compressing "
              "by 4 (an indexer of %lld heads of %lld picks %lld rows), %lld by 128; output in %lld groups of rank %lld; the compressing "
              "layers' rope base %.1f, yarn x%.2f over %d (the context line's rope is the window-only layers')\n",
              (long long)v.hc_streams, (long long)v.sinkhorn_iterations, (long long)v.window, (long long)n_window_only,
              (long long)n_csa, (long long)c.indexer.n_head, (long long)ik, (long long)c.indexer.top_k, (long long)n_hca,
              (long long)v.o_groups, (long long)v.o_lora_rank, v.compressed_rope.freq_base,
              v.compressed_rope.scaling == RopeScaling::yarn ? v.compressed_rope.scaling_factor : 1.0f, v.compressed_rope.n_ctx_orig);
  std::printf("deepseek4 kv, elements: compressed rows %.1f per token (%.0f bytes f16), kept; raw rows %lld + compressor projections "
              "%lld per position, in window pages for the last %lld positions of a sequence only (ratio 4's: a ring of the last %lld a page); "
              "the notes' compact layout: the same "
              "%.1f per token, plus per sequence %lld raw window elements (f16) and %lld projection floats (f32) in rings: %.1f MiB\n",
              compressed, compressed * 2.0, (long long)raw, (long long)projections, (long long)c.kv.horizon + 1, (long long)ring_rows, compressed,
              (long long)window_state,
              (long long)ring_state, double(window_state * 2 + ring_state * 4) / 1048576.0);
}

}  // namespace

int cmd_info(int argc, char** argv) {
  const OptionTable table = {
      {{"-m", "--model"}, "FILE", "", "the model, a GGUF file or hf://OWNER/NAME[@REVISION]/FILE (pulled into the hub cache)"},
      {{"--metadata"}, "", "", "also every metadata key and its value"},
      {{"--keys-read"}, "", "", "only the metadata keys the loaders look up, present or not"},
      {{"--ops"}, "", "", "only the ops the model's forward calls and which backends here implement each"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", args.message().c_str());
    return 1;
  }
  if (args.value().wants_help()) {
    return print_help("dsinfer info -m MODEL.gguf [options]", "What a model file holds and what serving it costs in memory.", table);
  }
  auto source = model_source_path(args.value().get("--model"));
  if (!source.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", source.message().c_str());
    return 1;
  }
  const std::string path = source.take();
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", file.message().c_str());
    return 1;
  }
  const GgufFile& f = *file.value();
  if (args.value().has("--keys-read")) return print_keys_read(f);
  if (args.value().has("--ops")) return print_forward_ops(f);
  std::printf("file: %s (GGUF v%u, %zu bytes, %zu tensors, %zu metadata keys)\n", path.c_str(), f.version(),
              f.file_bytes(), f.tensors().size(), f.metadata().size());
  if (args.value().has("--metadata")) {
    for (const auto& [key, value] : f.metadata()) std::printf("  %s = %s\n", key.c_str(), gguf_value_to_string(value).c_str());
  }
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // type -> (count, bytes)
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    auto& entry = by_type[dtype_name(t.type)];
    ++entry.first;
    entry.second += t.n_bytes;
    total += t.n_bytes;
  }
  std::printf("tensor types:");
  for (const auto& [name, entry] : by_type) std::printf(" %s x%lld (%.1f MiB)", name.c_str(), (long long)entry.first, entry.second / 1048576.0);
  std::printf("\nweights: %.1f MiB\n", total / 1048576.0);
  // The types per tensor group: what a quantization policy chose (W8A8 shows as I8 with its F32 _scale rows).
  std::map<std::string, std::map<std::string, int64_t>> groups;
  for (const GgufTensorInfo& t : f.tensors()) ++groups[tensor_group(t.name)][dtype_name(t.type)];
  std::printf("tensor groups:\n");
  for (const auto& [group, types] : groups) {
    std::printf("  %-36s", group.c_str());
    for (const auto& [type, count] : types) std::printf(" %s x%lld", type.c_str(), (long long)count);
    std::printf("\n");
  }
  if (const GgufValue* target = f.find("dsinfer.quantize.target"); target && target->type == GgufType::string)
    std::printf("quantized by dsinfer to %s\n", std::get<std::string>(target->data).c_str());

  auto config = ModelConfig::from_gguf(f);
  if (!config.ok()) {
    std::printf("model: %s\n", config.message().c_str());
    return f.tensors().empty() ? 0 : 1;
  }
  const ModelConfig& c = config.value();
  int64_t n_params = 0;
  for (const GgufTensorInfo& t : f.tensors()) n_params += t.n_elements();
  std::printf("architecture: %s (%s)\n", c.arch_name(), c.name.c_str());
  std::printf("parameters: %.3f B\n", n_params / 1e9);
  std::printf("layers %lld, embedding %lld, ffn %lld, heads %lld (kv %lld), head dim %lld, vocab %lld\n",
              (long long)c.n_layer, (long long)c.n_embd, (long long)c.n_ff, (long long)c.n_head, (long long)c.n_head_kv,
              (long long)c.head_dim, (long long)c.n_vocab);
  const char* scaling[] = {"none", "linear", "yarn", "dynamic-ntk"};
  std::printf("context %lld, rope %s base %.1f dims %d scaling %s x%.2f, norm eps %g\n", (long long)c.n_ctx_train,
              c.rope.layout == RopeLayout::neox ? "neox" : "normal", c.rope.freq_base, c.rope.n_rot,
              scaling[int(c.rope.scaling)], c.rope.scaling_factor, c.norm_eps);
  std::printf("kv cache per 1K tokens: %.2f MiB (f16), %.2f MiB (f32)\n",
              KvCache::bytes_per_token(c, DType::f16) * 1024 / 1048576.0,
              KvCache::bytes_per_token(c, DType::f32) * 1024 / 1048576.0);
  if (c.mla.kv_lora_rank > 0) {
    const MlaConfig& m = c.mla;
    // What a standard multi-head cache would hold: every head's key and value.
    const int64_t mha_bytes = c.n_head * (m.qk_nope_dim + m.qk_rope_dim + m.v_head_dim) * c.n_layer * 2;
    const int64_t mla_bytes = KvCache::bytes_per_token(c, DType::f16);
    std::printf("mla: q lora %lld, kv lora %lld, head %lld+%lld (v %lld); kv bytes per token (f16) %lld, a full multi-head "
                "cache %lld: %.1fx smaller\n",
                (long long)m.q_lora_rank, (long long)m.kv_lora_rank, (long long)m.qk_nope_dim, (long long)m.qk_rope_dim,
                (long long)m.v_head_dim, (long long)mla_bytes, (long long)mha_bytes, double(mha_bytes) / double(mla_bytes));
  }
  const int64_t page = c.kv.page_tokens;  // the figures' page size: --kv-page-tokens' default for this model
  if (const int64_t window_pages = KvCache::window_pages_per_sequence(c, page); window_pages > 0) {
    const int64_t bytes = KvCache::fixed_bytes_per_sequence(c, KvCacheOptions{DType::f16, page});
    std::printf("kv bytes per token (f16): %lld; fixed state per sequence: %lld window pages of %lld tokens (the last %lld positions' "
                "windowed rows, a ring of the last ones where fewer are read), %lld bytes (%.1f MiB, f16; speculative decoding's "
                "draft tokens add as many rows to each ring)\n",
                (long long)KvCache::bytes_per_token(c, DType::f16), (long long)window_pages, (long long)page,
                (long long)c.kv.horizon + 1, (long long)bytes, double(bytes) / 1048576.0);
  } else {
    std::printf("kv bytes per token (f16): %lld; fixed state per sequence: none (every cached row is a token's or a block's)\n",
                (long long)KvCache::bytes_per_token(c, DType::f16));
  }
  // A stream whose row covers more tokens than a page still takes a row slot in every page.
  if (const int64_t paged = KvCache::page_bytes(c, DType::f16, page);
      paged != KvCache::bytes_per_token(c, DType::f16) * page) {
    std::printf("in pages of %lld tokens: %.1f bytes per token (f16): a row of more tokens than a page takes a slot in each "
                "of its pages\n",
                (long long)page, double(paged) / double(page));
  }
  if (c.v4.hc_streams > 0) {
    print_deepseek4(c);
  } else if (c.indexer.n_head > 0) {
    const IndexerConfig& x = c.indexer;
    std::printf("sparse attention: an indexer of %lld heads of %lld picks %lld positions per query; its keys cached beside "
                "the latent rows\n",
                (long long)x.n_head, (long long)x.key_dim, (long long)x.top_k);
  }
  if (c.n_nextn_layer > 0) {
    ModelConfig drafting = c;
    const Status usable = drafting.cache_nextn_rows();
    if (usable.ok()) {
      std::printf("multi-token prediction: %lld layer after the %lld, drafting with --speculative-mtp N; its rows in the "
                  "same pages make them %lld bytes per token (f16)\n",
                  (long long)c.n_nextn_layer, (long long)c.n_layer, (long long)KvCache::bytes_per_token(drafting, DType::f16));
    } else {
      std::printf("multi-token prediction: %lld layer(s) after the %lld, not run (%s)\n", (long long)c.n_nextn_layer,
                  (long long)c.n_layer, usable.message().c_str());
    }
  }
  if (c.moe.n_expert > 0) {
    const MoeConfig& e = c.moe;
    std::printf("moe: %lld experts (%lld used, %lld shared) of width %lld after %lld dense layers, %s gating, "
                "weights %s x%.2f, %lld groups (%lld used)\n",
                (long long)e.n_expert, (long long)e.n_expert_used, (long long)e.n_expert_shared, (long long)e.expert_ff,
                (long long)e.leading_dense, expert_gating_name(e.gating),
                e.normalize_weights ? "normalised" : "raw", e.weights_scale, (long long)e.n_group, (long long)e.n_group_used);
  }
  return 0;
}

}  // namespace ds

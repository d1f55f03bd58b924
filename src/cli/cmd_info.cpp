// dsinfer info: what a model file holds and what serving it costs in memory.

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/model_options.h"
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

}  // namespace

int cmd_info(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"-m", "--model"}, {"--metadata", "--keys-read", "--ops"});
  if (!args.ok()) {
    std::fprintf(stderr, "dsinfer info: %s\n", args.message().c_str());
    return 1;
  }
  const std::string path = first_value(args.value(), {"-m", "--model"});
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
  if (c.indexer.n_head > 0) {
    const IndexerConfig& x = c.indexer;
    std::printf("sparse attention: an indexer of %lld heads of %lld picks %lld positions per query; its keys cached beside "
                "the latent rows\n",
                (long long)x.n_head, (long long)x.key_dim, (long long)x.top_k);
  }
  if (c.n_nextn_layer > 0) {
    std::printf("multi-token prediction: %lld layer(s) after the %lld run, not run\n", (long long)c.n_nextn_layer,
                (long long)c.n_layer);
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

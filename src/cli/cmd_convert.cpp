// `dsinfer convert HF_DIR -o OUT.gguf [--type F32|F16|BF16|Q8_0]`: a Hugging
// Face checkpoint to GGUF as llama.cpp's converter writes it (README: Getting
// models; src/hub/checkpoint_converter.h).

#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/progress_bar.h"
#include "hub/checkpoint_converter.h"

namespace ds {

int cmd_convert(int argc, char** argv) {
  const OptionTable table = {
      {{"-o", "--out"}, "FILE", "", "the GGUF file to write (under a temporary name until complete)"},
      {{"--type"}, "F32|F16|BF16|Q8_0", "F16", "the weight matrices' type; vectors and norms stay F32 (DeepSeek-V4 keeps its source's types)"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) {
    std::fprintf(stderr, "dsinfer convert: %s\n", args.message().c_str());
    return 1;
  }
  if (args.value().wants_help()) {
    return print_help("dsinfer convert HF_DIR|hf://OWNER/NAME[@REVISION] -o OUT.gguf [--type F32|F16|BF16|Q8_0]",
                      "Converts a Hugging Face checkpoint (config.json, safetensors shards, tokenizer.json) to GGUF with llama.cpp's "
                      "names and keys, FP8 block-scaled weights dequantized exactly. Architectures: LlamaForCausalLM, Qwen2ForCausalLM, "
                      "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, DeepseekV32ForCausalLM, DeepseekV4ForCausalLM (as llama.cpp writes V4: FP8 matrices "
                      "Q8_0, BF16 and F32 kept, the FP4 experts MXFP4 bit for bit; --type applies to F16 sources only).",
                      table);
  }
  const Args& a = args.value();
  if (a.positional().size() != 1 || a.get("--out").empty()) {
    std::fprintf(stderr, "dsinfer convert: give one checkpoint directory and -o OUT.gguf\n");
    return 1;
  }
  ConvertOptions options;
  options.dir = a.positional()[0];
  if (is_hub_url(options.dir)) {  // a repository: its checkpoint's files pulled into the hub cache first
    auto reference = parse_hub_repository_url(options.dir);
    if (!reference.ok()) {
      std::fprintf(stderr, "dsinfer convert: %s\n", reference.message().c_str());
      return 1;
    }
    reference.value().selector = k_checkpoint_selector;
    auto pulled = pull_with_progress(reference.value());
    if (!pulled.ok()) {
      std::fprintf(stderr, "dsinfer convert: %s: %s\n", options.dir.c_str(), pulled.message().c_str());
      return 1;
    }
    options.dir = pulled.value().snapshot;
    options.name = reference.value().repo.substr(reference.value().repo.find('/') + 1);  // not the snapshot's commit
  }
  options.out = a.get("--out");
  std::string type = a.get("--type");
  for (char& c : type) c = char(std::toupper((unsigned char)c));
  const std::pair<const char*, DType> types[] = {{"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"Q8_0", DType::q8_0}};
  bool known = false;
  for (const auto& [name, dtype] : types) {
    if (type == name) {
      options.type = dtype;
      known = true;
    }
  }
  if (!known) {
    std::fprintf(stderr, "dsinfer convert: --type %s: give F32, F16, BF16 or Q8_0\n", a.get("--type").c_str());
    return 1;
  }
  std::unique_ptr<ProgressBar> bar;
  ConvertProgress progress;
  progress.started = [&](int64_t total) { bar = std::make_unique<ProgressBar>("convert", total, "bytes"); };
  progress.progress = [&](int64_t done) { bar->update(done); };
  const Status converted = convert_checkpoint(options, progress);
  if (bar) bar->finish();
  if (!converted.ok()) {
    std::fprintf(stderr, "dsinfer convert: %s\n", converted.message().c_str());
    return 1;
  }
  std::printf("%s\n", options.out.c_str());
  return 0;
}

}  // namespace ds

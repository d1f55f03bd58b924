// `dsinfer pull REPO[:FILE or :QUANT] [--revision R]`: a model's files from
// the hub into the hub cache (README: Getting models); prints their paths.

#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_source.h"

namespace ds {

int cmd_pull(int argc, char** argv) {
  const OptionTable table = {
      {{"--revision"}, "R", "main", "a branch, tag or commit of the repository"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) {
    std::fprintf(stderr, "dsinfer pull: %s\n", args.message().c_str());
    return 1;
  }
  if (args.value().wants_help()) {
    return print_help("dsinfer pull OWNER/NAME[:FILE or :QUANT] [--revision R]",
                      "Downloads a model from the Hugging Face hub ($HF_ENDPOINT, $HF_TOKEN) into its cache ($HF_HUB_CACHE), resuming a cut "
                      "download and checking each file's hash, and prints the local paths. QUANT picks a GGUF by its quantization "
                      "(default Q4_K_M); a split GGUF comes with all its parts. A second pull of the same files downloads nothing.",
                      table);
  }
  if (args.value().positional().size() != 1) {
    std::fprintf(stderr, "dsinfer pull: give one repository, OWNER/NAME[:FILE or :QUANT]\n");
    return 1;
  }
  auto reference = parse_hub_reference(args.value().positional()[0]);
  if (!reference.ok()) {
    std::fprintf(stderr, "dsinfer pull: %s\n", reference.message().c_str());
    return 1;
  }
  reference.value().revision = args.value().get("--revision");
  auto pulled = pull_with_progress(reference.value());
  if (!pulled.ok()) {
    std::fprintf(stderr, "dsinfer pull: %s\n", pulled.message().c_str());
    return 1;
  }
  for (const std::string& path : pulled.value().paths) std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace ds

#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

const Command k_commands[] = {
    {"pull", ds::cmd_pull, "a model from the Hugging Face hub into its cache"},
    {"convert", ds::cmd_convert, "a Hugging Face checkpoint (safetensors) to GGUF"},
    {"run", ds::cmd_run, "generate text from a prompt"},
    {"serve", ds::cmd_serve, "the OpenAI-compatible server"},
    {"bench", ds::cmd_bench, "speed: prompt processing, generation, throughput, memory bandwidth"},
    {"eval", ds::cmd_eval, "perplexity, KL divergence and top-1 agreement against a reference model"},
    {"logits", ds::cmd_logits, "teacher-forced logits (and each layer's output) as .npy"},
    {"quantize", ds::cmd_quantize, "write a model in other types (llama.cpp's, W8A8 with calibration)"},
    {"info", ds::cmd_info, "what a model file holds and what serving it costs in memory"},
    {"tokenize", ds::cmd_tokenize, "text to token ids"},
    {"template", ds::cmd_template, "the prompt a conversation becomes under a chat template"},
    {"router", ds::cmd_router, "many instances behind one endpoint"},
    {"canary", ds::cmd_canary, "the router's canary release: status, promote, rollback"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: dsinfer COMMAND [options]     dsinfer COMMAND --help: its options\n"
                    "       dsinfer --version\n\ncommands:\n");
  for (const Command& c : k_commands) std::fprintf(out, "  %-10s%s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 1;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    print_usage(stdout);
    return 0;
  }
  if (command == "--version" || command == "-V" || command == "version") return ds::cmd_version();
  for (const Command& c : k_commands) {
    if (command == c.name) return c.run(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "dsinfer: unknown command '%s'\n\n", command.c_str());
  print_usage(stderr);
  return 1;
}

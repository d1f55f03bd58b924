#include <cstdio>
#include <cstring>

#include "cli/commands.h"

namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: dsinfer COMMAND [options]\n"
               "\n"
               "commands:\n"
               "  run       generate text:  dsinfer run -m MODEL.gguf -p PROMPT [-n N] [--chat] [--temp T] [--seed S] [-t THREADS]\n"
               "  logits    teacher-forced logits:  dsinfer logits -m MODEL.gguf --tokens ID,ID,... [--out FILE.npy] [--dump-layers DIR]\n"
               "  eval      perplexity, KL and top-1 against a reference:  dsinfer eval -m MODEL.gguf [--ref REF.gguf] --text FILE [--json]\n"
               "  quantize  write a model in other types:  dsinfer quantize -m IN.gguf -o OUT.gguf --type Q8_0|Q4_K_M|W8A8|W8A8_ASYM|... [--policy FILE] [--show-policy]\n"
               "            [--calib TEXT|JSONL [--smooth ALPHA] [--activation-scales per-token|minmax|percentile|kl] [--dump-calibration FILE]]\n"
               "  tokenize  text to token ids:  dsinfer tokenize -m MODEL.gguf [--no-bos] [--pieces] TEXT\n"
               "  info      model summary:  dsinfer info -m MODEL.gguf\n"
               "  bench     speed:  dsinfer bench -m MODEL.gguf [-p 512[,N...]] [-n 128[,N...]] [-d 0[,DEPTH...]] [-r 3] [-t THREADS]\n"
               "                      [-o text|md|json] [--membw | --bandwidth GB/s]\n"
               "            bandwidth:  dsinfer bench --membw [-t THREADS]\n"
               "            throughput:  dsinfer bench -m MODEL.gguf --concurrency C [--requests N] [--prompt-len P] [--gen-len G] [--trace FILE]\n"
               "  serve     OpenAI-compatible server:  dsinfer serve -m MODEL.gguf [--host 127.0.0.1] [--port 8000] [--api-keys FILE]\n"
               "  router    many instances behind one endpoint:  dsinfer router --config FILE.json [--check]\n"
               "  canary    the router's canary release:  dsinfer canary status|promote|rollback [--router URL] [--admin-key-file FILE] [--json]\n"
               "  template  render a chat:  dsinfer template (-m MODEL.gguf | --chat-template FILE|NAME) --messages FILE.json\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage();
    return argc < 2 ? 1 : 0;
  }
  const char* command = argv[1];
  if (std::strcmp(command, "run") == 0) return ds::cmd_run(argc - 2, argv + 2);
  if (std::strcmp(command, "logits") == 0) return ds::cmd_logits(argc - 2, argv + 2);
  if (std::strcmp(command, "eval") == 0) return ds::cmd_eval(argc - 2, argv + 2);
  if (std::strcmp(command, "quantize") == 0) return ds::cmd_quantize(argc - 2, argv + 2);
  if (std::strcmp(command, "tokenize") == 0) return ds::cmd_tokenize(argc - 2, argv + 2);
  if (std::strcmp(command, "info") == 0) return ds::cmd_info(argc - 2, argv + 2);
  if (std::strcmp(command, "bench") == 0) return ds::cmd_bench(argc - 2, argv + 2);
  if (std::strcmp(command, "serve") == 0) return ds::cmd_serve(argc - 2, argv + 2);
  if (std::strcmp(command, "router") == 0) return ds::cmd_router(argc - 2, argv + 2);
  if (std::strcmp(command, "canary") == 0) return ds::cmd_canary(argc - 2, argv + 2);
  if (std::strcmp(command, "template") == 0) return ds::cmd_template(argc - 2, argv + 2);
  std::fprintf(stderr, "dsinfer: unknown command '%s'\n\n", command);
  print_usage();
  return 1;
}

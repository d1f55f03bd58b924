#pragma once
// The `dsinfer` subcommands. Each takes the arguments after its name and
// returns the process exit code.

namespace ds {

int cmd_run(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_router(int argc, char** argv);
int cmd_canary(int argc, char** argv);
int cmd_pull(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_version();

}  // namespace ds

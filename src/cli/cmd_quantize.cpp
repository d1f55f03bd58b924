// dsinfer quantize: writes a model again with its matrices in llama.cpp's
// types or in W8A8, each tensor's type from a policy (quant/quant_policy.h).

#include <chrono>
#include <cstdio>
#include <map>

#include "cli/model_options.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "model/model_config.h"
#include "quant/model_quantizer.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer quantize: %s\n", message.c_str());
  return 1;
}

// Per tensor group, how many tensors went from which type to which.
void print_groups(const QuantizeReport& report) {
  std::map<std::string, std::map<std::string, int>> groups;
  for (const QuantizedTensor& t : report.tensors) {
    std::string change = std::string(dtype_name(t.from)) + " -> " + (t.w8a8 ? "W8A8" : dtype_name(t.to));
    if (t.fell_back) change += " (fallback: rows of this length)";
    ++groups[tensor_group(t.name)][change];
  }
  for (const auto& [group, changes] : groups) {
    for (const auto& [change, count] : changes) std::fprintf(stderr, "  %-32s %3d x %s\n", group.c_str(), count, change.c_str());
  }
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"-m", "--model", "-o", "--out", "--type", "--policy", "-t", "--threads"},
                          {"--show-policy"});
  if (!args.ok()) return fail(args.message());
  const Args& a = args.value();
  if (!a.positional().empty()) return fail("unexpected argument '" + a.positional()[0] + "'");
  const std::string in_path = first_value(a, {"-m", "--model"});
  const std::string out_path = first_value(a, {"-o", "--out"});
  if (in_path.empty() || !a.has("--type")) return fail("usage: dsinfer quantize -m IN.gguf -o OUT.gguf --type TYPE [--policy FILE]");
  auto threads = a.get_int(a.has("-t") ? "-t" : "--threads", 2);
  if (!threads.ok() || threads.value() < 1 || threads.value() > 1024) return fail("--threads must be between 1 and 1024");

  auto file = GgufFile::open(in_path);
  if (!file.ok()) return fail(file.message());
  auto config = ModelConfig::from_gguf(*file.value());
  if (!config.ok()) return fail(config.message());
  auto policy = QuantPolicy::for_target(a.get("--type"), config.value().n_layer);
  if (!policy.ok()) return fail(policy.message());
  if (a.has("--policy")) {
    const Status s = policy.value().prepend_file(a.get("--policy"));
    if (!s.ok()) return fail(s.message());
  }
  if (a.has("--show-policy")) {
    std::printf("%s", policy.value().describe().c_str());
    return 0;
  }
  if (out_path.empty()) return fail("-o OUT.gguf is required");
  if (out_path == in_path) return fail("-o must not be the input file");

  const auto start = std::chrono::steady_clock::now();
  ProgressBar progress("quantize", int64_t(file.value()->tensors().size()), "tensors");
  QuantizeOptions options;
  options.n_threads = int(threads.value());
  options.progress = [&](size_t done, size_t) { progress.update(int64_t(done)); };
  auto report = quantize_model(*file.value(), policy.value(), out_path, options);
  if (!report.ok()) return fail(report.message());
  progress.finish();
  print_groups(report.value());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "wrote %s (%s): %.2f MiB -> %.2f MiB in %.1f s\n", out_path.c_str(), policy.value().target().c_str(),
               double(report.value().bytes_in) / (1 << 20), double(report.value().bytes_out) / (1 << 20), seconds);
  return 0;
}

}  // namespace ds

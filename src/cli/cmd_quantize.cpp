// dsinfer quantize: writes a model again with its matrices in llama.cpp's
// types or in W8A8, each tensor's type from a policy (quant/quant_policy.h).

#include <chrono>
#include <cstdio>
#include <map>

#include "cli/model_options.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "cli/model_source.h"
#include "model/model_config.h"
#include "quant/model_quantizer.h"
#include "quant/text_corpus.h"

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
    std::string change = std::string(dtype_name(t.from)) + " -> " + (t.w8a8 ? (t.zero_points ? "W8A8_ASYM" : "W8A8") : dtype_name(t.to));
    if (t.fell_back) change += " (fallback: rows of this length)";
    if (t.smoothed) change += " (smoothed)";
    if (t.input_clip > 0) change += " (static activation scale)";
    ++groups[tensor_group(t.name)][change];
  }
  for (const auto& [group, changes] : groups) {
    for (const auto& [change, count] : changes) std::fprintf(stderr, "  %-32s %3d x %s\n", group.c_str(), count, change.c_str());
  }
}

// --calib and what goes with it; no calibration (nullopt) without --calib.
Result<std::optional<Calibration>> calibrate(const Args& a, const std::string& model_path, QuantizeOptions& options) {
  if (!a.has("--calib")) {
    for (const char* needs : {"--calib-tokens", "--smooth", "--activation-scales", "--percentile", "--dump-calibration"})
      if (a.has(needs)) return Status::error(std::string(needs) + " needs --calib FILE");
    return std::optional<Calibration>();
  }
  auto smooth = a.get_float("--smooth");
  if (!smooth.ok() || smooth.value() < 0 || smooth.value() >= 1) return Status::error("--smooth must be in [0, 1) (0: no smoothing)");
  options.smooth_alpha = float(smooth.value());
  const std::string scales = a.get("--activation-scales");
  if (scales != "per-token") {
    auto method = parse_clip_method(scales);
    if (!method) return Status::error("--activation-scales must be per-token, minmax, percentile or kl, not '" + scales + "'");
    auto percentile = a.get_float("--percentile");
    if (!percentile.ok() || percentile.value() <= 0 || percentile.value() > 100)
      return Status::error("--percentile must be in (0, 100]");
    options.static_activations = ClipChoice{*method, percentile.value()};
  } else if (a.has("--percentile")) {
    return Status::error("--percentile goes with --activation-scales percentile");
  }
  auto documents = read_text_corpus(a.get("--calib"));
  if (!documents.ok()) return documents.status();
  CalibrationOptions calib;
  auto max_tokens = a.get_int("--calib-tokens");
  if (!max_tokens.ok() || max_tokens.value() < 1) return Status::error("--calib-tokens must be a positive count");
  calib.max_tokens = max_tokens.value();
  ModelOptions model;
  model.n_threads = options.n_threads;
  model.interleave = false;  // the recorder sees the matrices as the file holds them
  std::optional<ProgressBar> progress;
  calib.progress = [&](int64_t done, int64_t total) {
    if (!progress) progress.emplace("calibrate", total, "chunks");
    progress->update(done);
  };
  auto calibration = Calibration::collect(model_path, model, KvCacheOptions{DType::f32}, documents.value(), calib);
  if (!calibration.ok()) return Status::error("--calib: " + calibration.message());
  if (progress) progress->finish();
  std::fprintf(stderr, "calibration: %lld tokens, inputs of %zu matrices\n", (long long)calibration.value().tokens,
               calibration.value().inputs.size());
  return std::optional<Calibration>(calibration.take());
}

// --dump-calibration: the table, one W8A8 matrix per line.
Status dump_calibration(const std::string& path, const QuantizeReport& report, const Calibration& calibration) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return Status::error("cannot write " + path);
  std::fprintf(f, "tensor\tinput_channels\ttokens\tsample_rows\tsmoothed\tinput_absmax\tclip\tstatic_scale\n");
  for (const QuantizedTensor& t : report.tensors) {
    if (!t.calibrated) continue;
    const InputStatistics& s = *calibration.find(t.name);
    std::fprintf(f, "%s\t%lld\t%lld\t%lld\t%s\t%.6g\t%.6g\t%.6g\n", t.name.c_str(), (long long)s.n_cols, (long long)s.tokens,
                 (long long)s.n_samples(), t.smoothed ? "yes" : "no", t.input_absmax, t.input_clip, t.input_clip / 127.0f);
  }
  return std::fclose(f) == 0 ? Status() : Status::error("cannot write " + path);
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  const OptionTable table = {
      {{"-m", "--model"}, "FILE", "", "the model to quantize, a GGUF file or hf://OWNER/NAME/FILE"},
      {{"-o", "--out"}, "FILE", "", "the GGUF file to write"},
      {{"--type"}, "TYPE", "", "the target: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, W8A8, W8A8_ASYM"},
      {{"--policy"}, "FILE", "", "rules, a line each: PATTERN TYPE, checked before the target's own"},
      {{"--show-policy"}, "", "", "print the policy's rules and exit"},
      {{"-t", "--threads"}, "N", "2", "threads, 1..1024"},
      {{"--calib"}, "FILE", "", "W8A8: calibrate on this text (plain, or JSON lines with a \"text\" each)"},
      {{"--calib-tokens"}, "N", "16384", "with --calib: tokens of the text used at most"},
      {{"--smooth"}, "ALPHA", "0.5", "with --calib: SmoothQuant's migration strength, [0, 1); 0: no smoothing"},
      {{"--activation-scales"}, "per-token|minmax|percentile|kl", "per-token", "with --calib: dynamic per-token scales, or static ones by this method"},
      {{"--percentile"}, "P", "99.99", "with --activation-scales percentile: the percentile kept, (0, 100]"},
      {{"--dump-calibration"}, "FILE", "", "with --calib: write what calibration measured"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer quantize -m IN.gguf -o OUT.gguf --type TYPE [options]",
                      "Writes the model again with its matrices in llama.cpp's types or in W8A8, each tensor's type from a policy.", table);
  }
  const Args& a = args.value();
  if (!a.positional().empty()) return fail("unexpected argument '" + a.positional()[0] + "'");
  const std::string out_path = a.get("--out");
  if (a.get("--model").empty() || !a.has("--type")) return fail("usage: dsinfer quantize -m IN.gguf -o OUT.gguf --type TYPE [--policy FILE]");
  auto source = model_source_path(a.get("--model"));
  if (!source.ok()) return fail(source.message());
  const std::string in_path = source.take();
  auto threads = a.get_int("--threads");
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
  QuantizeOptions options;
  options.n_threads = int(threads.value());
  auto calibration = calibrate(a, in_path, options);
  if (!calibration.ok()) return fail(calibration.message());
  if (calibration.value()) options.calibration = &*calibration.value();
  ProgressBar progress("quantize", int64_t(file.value()->tensors().size()), "tensors");
  options.progress = [&](size_t done, size_t) { progress.update(int64_t(done)); };
  auto report = quantize_model(*file.value(), policy.value(), out_path, options);
  if (!report.ok()) return fail(report.message());
  progress.finish();
  print_groups(report.value());
  if (a.has("--dump-calibration")) {
    const Status dumped = dump_calibration(a.get("--dump-calibration"), report.value(), *options.calibration);
    if (!dumped.ok()) return fail(dumped.message());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "wrote %s (%s): %.2f MiB -> %.2f MiB in %.1f s\n", out_path.c_str(), policy.value().target().c_str(),
               double(report.value().bytes_in) / (1 << 20), double(report.value().bytes_out) / (1 << 20), seconds);
  return 0;
}

}  // namespace ds

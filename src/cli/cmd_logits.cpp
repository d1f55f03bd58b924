// dsinfer logits: run a token sequence teacher-forced (every position sees the
// given tokens before it) and write the logits at every position, and on
// request each layer's output, as .npy files for comparison with a reference.
// --mtp-out FILE: also the file's multi-token-prediction layer's logits,
// row p predicting token p + 2 from token p + 1 and the model's hidden state at p.
// --tensor-parallel N: the model split across N ranks (processes): rank 0
// runs the command and writes the files, the others follow its steps.

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/npy_writer.h"
#include "cli/tensor_parallel_ranks.h"
#include "engine/step_broadcast.h"
#include "engine/teacher_forcing.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer logits: %s\n", message.c_str());
  return 1;
}

Result<std::vector<int32_t>> parse_tokens(const std::string& list) {
  std::vector<int32_t> tokens;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 0 || value > INT32_MAX) return Status::error("--tokens: '" + item + "' is not a token id");
    tokens.push_back(int32_t(value));
    start = comma + 1;
  }
  return tokens;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  const OptionTable table = join_options({
      model_option_table(),
      device_option_table(),
      tensor_parallel_option_table(),
      {
          {{"--tokens"}, "ID,ID,...", "", "the token ids to run, teacher-forced"},
          {{"--out"}, "FILE", "logits.npy", "where the logits [tokens, vocabulary] go, as .npy"},
          {{"--dump-layers"}, "DIR", "", "also each layer's output, DIR/layer_NNN.npy"},
          {{"-b", "--batch-size"}, "N", "0", "tokens a forward step takes at most; 0: all in one"},
          {{"--mtp-out"}, "FILE", "", "also the multi-token-prediction layer's logits, row p predicting token p + 2"},
      },
  });
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer logits -m MODEL.gguf --tokens ID,ID,... [options]",
                      "Runs the tokens teacher-forced and writes the logits at every position (and each layer's output) as .npy files.",
                      table);
  }
  if (args.value().has("--mtp-out") && args.value().get("--tensor-parallel") != "1") {
    return fail("--mtp-out with --tensor-parallel is not implemented (the multi-token-prediction layer runs in one process)");
  }
  auto ranks = join_tensor_parallel_ranks(args.value(), "logits", argc, argv);
  if (!ranks.ok()) return fail(ranks.message());
  // The device first: the threads started from here on inherit its cores.
  auto device = claim_device(args.value(), ranks.value().get());
  if (!device.ok()) return fail(device.message());
  auto options = parse_model_options(args.value(), ranks.value().get());
  if (!options.ok()) return fail(options.message());
  const Args& a = args.value();
  auto tokens = parse_tokens(a.get("--tokens"));
  if (!tokens.ok()) return fail(tokens.message());
  auto batch_size = a.get_int("--batch-size");
  if (!batch_size.ok()) return fail(batch_size.message());

  const std::string mtp_out = a.get("--mtp-out");
  options.value().model.nextn_rows = !mtp_out.empty();
  auto model = load_model(options.value());
  if (!model.ok()) return fail(model.message());
  const ModelConfig& config = model.value()->config();
  const int64_t n = int64_t(tokens.value().size());
  const std::unique_ptr<StepSender> leader = lead_steps(ranks.value().get());  // the others end when it goes
  auto run = TeacherForcing::create(*model.value(), options.value().kv, n, RankSteps{leader.get()});
  if (!run.ok()) return fail(run.message());
  if (Collective* others = ranks.value().get(); others && others->rank() != 0) {
    const Status followed = follow_steps(*model.value(), run.value()->cache(), *others);
    return followed.ok() ? 0 : fail(followed.message());
  }

  const std::string dump_dir = a.get("--dump-layers");
  if (!dump_dir.empty() && config.v4.hc_streams > 0) {
    return fail("--dump-layers: a deepseek4 layer's output is its " + std::to_string(config.v4.hc_streams) +
                " hyper-connection streams, not one residual row; dumping them is not implemented");
  }
  if (!dump_dir.empty()) mkdir(dump_dir.c_str(), 0755);
  std::vector<float> logits(size_t(n * config.n_vocab));
  std::vector<std::vector<float>> layer_outputs(dump_dir.empty() ? 0 : size_t(config.n_layer));
  LayerObserver observer;
  if (!dump_dir.empty()) {
    observer = [&](int64_t layer, const float* hidden, int64_t n_tokens) {
      auto& out = layer_outputs[size_t(layer)];
      out.insert(out.end(), hidden, hidden + n_tokens * config.n_embd);
    };
  }
  std::vector<float> hidden(mtp_out.empty() ? 0 : size_t(n * config.n_embd));
  const Status status = run.value()->run(tokens.value().data(), n, batch_size.value(), logits.data(), observer,
                                         hidden.empty() ? nullptr : hidden.data());
  if (!status.ok()) return fail(status.message());
  if (!mtp_out.empty()) {
    auto nextn = Model::load_nextn(options.value().model, *model.value());
    if (!nextn.ok()) return fail("--mtp-out: " + nextn.message());
    std::vector<float> mtp_logits(size_t((n - 1) * config.n_vocab));
    const Status ran = run.value()->run_nextn(*nextn.value(), tokens.value().data(), n, batch_size.value(), hidden.data(),
                                              mtp_logits.data());
    if (!ran.ok()) return fail("--mtp-out: " + ran.message());
    const Status written = write_npy(mtp_out, mtp_logits.data(), n - 1, config.n_vocab);
    if (!written.ok()) return fail(written.message());
  }

  const std::string out = a.get("--out");
  const Status written = write_npy(out, logits.data(), n, config.n_vocab);
  if (!written.ok()) return fail(written.message());
  for (size_t layer = 0; layer < layer_outputs.size(); ++layer) {
    char name[32];
    std::snprintf(name, sizeof(name), "/layer_%03zu.npy", layer);
    const Status s = write_npy(dump_dir + name, layer_outputs[layer].data(), n, config.n_embd);
    if (!s.ok()) return fail(s.message());
  }
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s\n", (long long)n, (long long)config.n_vocab, out.c_str());
  return 0;
}

}  // namespace ds

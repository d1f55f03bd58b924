#include "quant/calibration.h"

#include <cmath>
#include <mutex>
#include <random>
#include <unordered_map>

#include "device/forwarding_backend.h"
#include "engine/teacher_forcing.h"
#include "kernels/elementwise.h"
#include "kernels/moe_route.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

// Watches every matmul of the matrices it was told about and records their inputs.
class InputRecorder : public ForwardingBackend {
 public:
  InputRecorder(std::unique_ptr<Backend> inner, int64_t sample_rows)
      : ForwardingBackend(std::move(inner)), sample_rows_(sample_rows) {}

  void watch(const uint8_t* weights, InputStatistics* stats) { watched_[weights] = stats; }

  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    if (auto it = watched_.find(w.data); it != watched_.end()) record(*it->second, x, n, w.n_cols);
    ForwardingBackend::matmul(w, x, n, y);
  }

  // Calibration runs the absorbed form of multi-head latent attention, whose
  // hidden states every earlier calibration saw (the expanded one rounds differently).
  bool expands_mla() const override { return false; }

  // The experts' down inputs exist only inside the op: computed again here
  // from the same routing and the inner backend's own ops, expert by expert,
  // so the rows recorded are the ones the op multiplies (one per routed pair).
  void moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                   const float* in, int64_t n, float* out, int64_t* expert_tokens) override {
    if (auto it = watched_.find(experts.down[0].data); it != watched_.end()) {
      record_expert_down_inputs(*it->second, routing, router_logits, bias, experts, in, n);
    }
    ForwardingBackend::moe_experts(routing, router_logits, bias, experts, in, n, out, expert_tokens);
  }

 private:
  void record_expert_down_inputs(InputStatistics& s, const ExpertRouting& routing, const float* router_logits, const float* bias,
                                 const ExpertWeights& experts, const float* in, int64_t n) {
    DS_CHECK(inner().reads_host_memory(), "calibration runs on a backend whose activations are host memory");
    const int64_t k = routing.n_expert_used, n_embd = experts.gate[0].n_cols, ff = experts.gate[0].n_rows;
    std::vector<int32_t> chosen(size_t(n * k));
    std::vector<float> weights(size_t(n * k));
    for (int64_t t = 0; t < n; ++t) {
      moe_route(routing, router_logits + t * routing.n_expert, bias, forced_experts_of(routing, t), chosen.data() + t * k, weights.data() + t * k);
    }
    std::vector<float> rows, gate, up;
    for (int64_t e = 0; e < routing.n_expert; ++e) {
      rows.clear();
      for (int64_t i = 0; i < n * k; ++i)
        if (chosen[size_t(i)] == e) rows.insert(rows.end(), in + i / k * n_embd, in + (i / k + 1) * n_embd);
      const int64_t m = int64_t(rows.size()) / n_embd;
      if (m == 0) continue;
      gate.resize(size_t(m * ff));
      up.resize(size_t(m * ff));
      inner().matmul(experts.gate[e], rows.data(), m, gate.data());
      inner().matmul(experts.up[e], rows.data(), m, up.data());
      ds::swiglu(gate.data(), up.data(), m * ff, routing.swiglu_limit);
      record(s, gate.data(), m, ff);
    }
  }

  // Reservoir sampling (Vitter's algorithm R): each row seen is kept with probability sample_rows / tokens.
  void record(InputStatistics& s, const float* x, int64_t n, int64_t n_cols) {
    if (s.n_cols == 0) {
      s.n_cols = n_cols;
      s.channel_absmax.assign(size_t(n_cols), 0.0f);
    }
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * n_cols;
      for (int64_t j = 0; j < n_cols; ++j) s.channel_absmax[size_t(j)] = std::max(s.channel_absmax[size_t(j)], std::fabs(row[j]));
      ++s.tokens;
      if (s.n_samples() < sample_rows_) {
        s.samples.insert(s.samples.end(), row, row + n_cols);
      } else if (const int64_t slot = int64_t(rng_() % uint64_t(s.tokens)); slot < sample_rows_) {
        std::copy(row, row + n_cols, s.samples.begin() + slot * n_cols);
      }
    }
  }

  int64_t sample_rows_;
  std::mt19937_64 rng_{20261202};
  std::unordered_map<const uint8_t*, InputStatistics*> watched_;
};

}  // namespace

const InputStatistics* Calibration::find(const std::string& tensor) const {
  auto it = inputs.find(tensor);
  if (it != inputs.end()) return &it->second;
  for (const char* expert : {".ffn_gate_exps.weight", ".ffn_up_exps.weight"}) {
    const size_t at = tensor.find(expert);
    if (at == std::string::npos) continue;
    auto router = inputs.find(tensor.substr(0, at) + ".ffn_gate_inp.weight");
    if (router != inputs.end()) return &router->second;
  }
  return nullptr;
}

Result<Calibration> Calibration::collect(const std::string& model_path, const ModelOptions& model_options,
                                         const KvCacheOptions& kv, const std::vector<std::string>& documents,
                                         const CalibrationOptions& options) {
  InputRecorder* recorder = nullptr;
  auto model = Model::load(model_path, model_options, [&](std::unique_ptr<Backend> inner) {
    auto wrapped = std::make_unique<InputRecorder>(std::move(inner), options.sample_rows);
    recorder = wrapped.get();
    return wrapped;
  });
  if (!model.ok()) return model.status();
  Calibration calibration;
  for (const NamedMatrix& m : model.value()->weights().named_matrices) {
    const bool whole_tensor = m.first_row == 0 && m.matrix->n_rows * m.matrix->n_cols ==
                                                      model.value()->file().find_tensor(m.tensor)->n_elements();
    const bool first_down_expert = m.first_row == 0 && m.tensor.find(".ffn_down_exps.") != std::string::npos;
    if ((whole_tensor && m.tensor != "token_embd.weight") || first_down_expert)
      recorder->watch(m.matrix->data, &calibration.inputs[m.tensor]);
  }
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<int32_t> text;
  for (const std::string& d : documents) {
    const std::vector<int32_t> ids = tokenizer.value()->encode(d, /*add_special=*/true, /*parse_special=*/false);
    text.insert(text.end(), ids.begin(), ids.end());
  }
  if (int64_t(text.size()) > options.max_tokens) text.resize(size_t(options.max_tokens));
  const int64_t chunk = std::min<int64_t>(options.chunk_tokens, model.value()->config().n_ctx_train);
  auto run = TeacherForcing::create(*model.value(), kv, chunk);
  if (!run.ok()) return run.status();
  const int64_t n_chunks = (int64_t(text.size()) + chunk - 1) / chunk;
  std::vector<float> logits(size_t(chunk * model.value()->config().n_vocab));
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * chunk, n = std::min<int64_t>(chunk, int64_t(text.size()) - begin);
    const Status status = run.value()->run(text.data() + begin, n, 0, logits.data());
    if (!status.ok()) return status;
    if (options.progress) options.progress(c + 1, n_chunks);
  }
  calibration.tokens = int64_t(text.size());
  for (auto it = calibration.inputs.begin(); it != calibration.inputs.end();) {
    it = it->second.tokens == 0 ? calibration.inputs.erase(it) : std::next(it);  // matrices no token reached
  }
  return calibration;
}

}  // namespace ds

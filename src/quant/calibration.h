#pragma once
// Calibration: a text run through the model in its original precision, and
// what it shows of the input of every matrix multiply: per input channel the
// largest |x| over every token, and a reservoir sample of whole input rows
// (uniform over the tokens), from which the quantizer chooses SmoothQuant's
// migration and static activation scales after any transformation.
//
// Recorded: every matmul whose matrix is a whole tensor of the file, and the
// routed experts' down inputs (one row per routed token and expert, all of a
// layer's experts in one table: the tensor holds them all). The MoE router's
// input is the routed experts' input too, so gate_exps and up_exps use its
// statistics.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ds {

struct InputStatistics {
  int64_t n_cols = 0;
  int64_t tokens = 0;                 // rows seen
  std::vector<float> channel_absmax;  // [n_cols]
  std::vector<float> samples;         // [n_samples, n_cols]: a uniform sample of the rows seen
  int64_t n_samples() const { return n_cols > 0 ? int64_t(samples.size()) / n_cols : 0; }
};

struct CalibrationOptions {
  int64_t chunk_tokens = 512;     // sequence length of each forward
  int64_t max_tokens = 16384;     // tokens of the text used at most
  int64_t sample_rows = 256;      // rows kept per matrix input
  std::function<void(int64_t done, int64_t total)> progress;  // in chunks
};

struct Calibration {
  int64_t tokens = 0;
  std::map<std::string, InputStatistics> inputs;  // by the tensor name of the matrix multiplied

  // The statistics of `tensor`'s input, or null; experts' gate/up answer with the router's input.
  const InputStatistics* find(const std::string& tensor) const;

  static Result<Calibration> collect(const std::string& model_path, const ModelOptions& model, const KvCacheOptions& kv,
                                     const std::vector<std::string>& documents, const CalibrationOptions& options);
};

}  // namespace ds

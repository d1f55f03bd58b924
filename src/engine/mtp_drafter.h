#pragma once
// Draft tokens from the model file's own multi-token-prediction layer
// (DeepSeek-V3's MTP module, which DeepSeek-V3.2's GGUF files keep as
// blk.{n_layer}.*; Model::load_nextn), vLLM's deepseek_mtp method and
// SGLang's NEXTN. The layer's row at position p combines the target's final
// hidden state h_p with the token t_{p+1} and predicts t_{p+2}.
//
// Its rows live in the target's KV pages, as one more layer after the
// target's (KvRowShape::nextn_layers): they are paged, shared through the
// prefix cache, preempted and freed with the target's rows at the same
// positions. The engine hands over the hidden states of every position its
// step computed (take_hidden); the next proposal first writes the rows whose
// next token is known by then (positions the target rejected have none: their
// next token is not the draft's any more), every sequence in one forward,
// whose last row per decoding sequence gives its first draft token. Further
// draft tokens chain, as vLLM's do: row p + 1 takes the layer's own output at
// row p in place of the target's h_{p+1}, which does not exist yet. Those
// rows are provisional and written again from the true h once the target
// computes their positions.
//
// A row whose page another sequence reuses from the prefix cache was computed
// with its writer's next token, which for a page's last row may differ from
// the reuser's: a draft there may be worse, never the output, which the
// target verifies (engine/draft_model.h says why that keeps plain decoding's tokens).

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/model_runner.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ds {

struct MtpSequence {
  int64_t id;
  const std::vector<int32_t>* tokens;  // its tokens so far (prompt and output)
  // Its pages in the target's cache: they cover its rows to write and, for
  // a draft of n tokens, positions up to tokens->size() + n - 3.
  BlockTableView table;
  int32_t max_tokens;            // draft at most this many; 0: only write its rows
  std::vector<int32_t>* draft;   // the proposal, when max_tokens > 0: cleared, then filled
};

class MtpDrafter {
 public:
  // The drafter over `target`'s file's multi-token-prediction layer; `cache`
  // is the target's, made with its nextn rows. Drafts stop before a token of
  // probability under min_probability (0: never).
  static Result<std::unique_ptr<MtpDrafter>> create(Model& target, KvCache& cache, const ModelOptions& options,
                                                     float min_probability);

  // The target's final hidden states at positions [first, first + n) of
  // sequence id, n rows of n_embd: kept until its next proposal writes their
  // rows. Rows from an earlier position on replace what is kept from there.
  void take_hidden(int64_t id, int32_t first, const float* rows, int32_t n);
  bool has_hidden(int64_t id) const { return pending_.count(id) > 0; }
  // Writes each sequence's rows and fills the drafts. A sequence that has not
  // written the row before its last token gets none. A failed forward leaves
  // every draft empty and the rows it held unwritten.
  // `trace`: the engine's profiler, when it records the step.
  Status propose(const std::vector<MtpSequence>& sequences, StepTrace* trace = nullptr);
  // Forgets a sequence (it ended).
  void forget(int64_t id) { pending_.erase(id); }

  const Model& model() const { return *model_; }

 private:
  struct Pending {
    int32_t first = 0;
    std::vector<float> rows;  // [n, n_embd]
  };
  MtpDrafter(std::unique_ptr<Model> model, KvCache& cache, float min_probability);

  std::unique_ptr<Model> model_;
  ModelRunner runner_;
  float min_probability_;
  std::unordered_map<int64_t, Pending> pending_;
};

}  // namespace ds

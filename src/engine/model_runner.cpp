#include "engine/model_runner.h"

namespace ds {

void ModelRunner::begin(StepTrace* trace) {
  batch_.trace = trace;
  batch_.tokens.clear();
  batch_.positions.clear();
  batch_.seq_of_token.clear();
  batch_.block_tables.clear();
  batch_.window_tables.clear();
  batch_.logit_tokens.clear();
  batch_.hidden_tokens.clear();
  previous_hidden_.clear();
}

int32_t ModelRunner::add(const int32_t* tokens, int32_t first_position, int32_t n, BlockTableView table, BlockTableView window_table) {
  const int32_t first = int32_t(batch_.tokens.size());
  const int32_t sequence = int32_t(batch_.block_tables.size());
  batch_.block_tables.push_back(table);
  if (window_table.pages) batch_.window_tables.push_back(window_table);
  batch_.tokens.insert(batch_.tokens.end(), tokens, tokens + n);
  for (int32_t i = 0; i < n; ++i) {
    batch_.positions.push_back(first_position + i);
    batch_.seq_of_token.push_back(sequence);
  }
  return first;
}

void ModelRunner::add_previous_hidden(const float* rows, int32_t n) {
  previous_hidden_.insert(previous_hidden_.end(), rows, rows + int64_t(n) * model_.config().n_embd);
}

void ModelRunner::want_logits(int32_t step_token) { batch_.logit_tokens.push_back(step_token); }

void ModelRunner::want_hidden(int32_t step_token) { batch_.hidden_tokens.push_back(step_token); }

Status ModelRunner::run(const LayerObserver& observer) {
  logits_.resize(batch_.logit_tokens.size() * size_t(model_.config().n_vocab));
  hidden_.resize(batch_.hidden_tokens.size() * size_t(model_.config().n_embd));
  if (!previous_hidden_.empty() && previous_hidden_.size() != size_t(batch_.n_tokens() * model_.config().n_embd)) {
    return Status::error("forward: previous hidden states given for some of the step's tokens only");
  }
  batch_.previous_hidden = previous_hidden_.empty() ? nullptr : previous_hidden_.data();
  DS_CHECK(!model_.collective() || ranks_.sender, "a split model's step with nowhere to send it");
  std::unique_lock<std::mutex> turn;  // the other ranks run the step beside this one, their collectives with its
  if (ranks_.sender) turn = ranks_.sender->step(ranks_.version, batch_);
  return model_.forward(batch_, memory_, logits_.data(), observer, hidden_.data());
}

}  // namespace ds

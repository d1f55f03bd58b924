#include "engine/mtp_drafter.h"

#include "engine/draft_model.h"

namespace ds {

Result<std::unique_ptr<MtpDrafter>> MtpDrafter::create(Model& target, KvCache& cache, const ModelOptions& options,
                                                       float min_probability) {
  auto model = Model::load_nextn(options, target);
  if (!model.ok()) return Status::error("multi-token prediction: " + model.message());
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(model.take(), cache, min_probability));
}

MtpDrafter::MtpDrafter(std::unique_ptr<Model> model, KvCache& cache, float min_probability)
    : model_(std::move(model)), runner_(*model_, cache), min_probability_(min_probability) {}

void MtpDrafter::take_hidden(int64_t id, int32_t first, const float* rows, int32_t n) {
  if (n <= 0) return;
  const int64_t n_embd = model_->config().n_embd;
  Pending& p = pending_[id];
  const int64_t kept = first - p.first;
  if (p.rows.empty() || kept < 0 || kept * n_embd > int64_t(p.rows.size())) {
    p.first = first;  // earlier (recomputed after preemption) or past a gap: only the new rows
    p.rows.clear();
  } else {
    p.rows.resize(size_t(kept * n_embd));
  }
  p.rows.insert(p.rows.end(), rows, rows + n * n_embd);
}

Status MtpDrafter::propose(const std::vector<MtpSequence>& sequences, StepTrace* trace) {
  const int64_t n_vocab = model_->config().n_vocab, n_embd = model_->config().n_embd;
  struct Drafting {
    const MtpSequence* sequence;
    std::vector<float> hidden;  // the layer's output at its last row: the next row's previous hidden state
  };
  std::vector<Drafting> drafting;
  // Rows whose next token is known, every sequence's, in one forward.
  runner_.begin(trace);
  for (const MtpSequence& s : sequences) {
    if (s.draft) s.draft->clear();
    const auto it = pending_.find(s.id);
    if (it == pending_.end()) continue;
    const Pending& p = it->second;
    const int32_t n_tokens = int32_t(s.tokens->size());
    const int32_t n = std::min<int32_t>(int32_t(p.rows.size() / size_t(n_embd)), n_tokens - 1 - p.first);
    if (n > 0) {
      const int32_t first = runner_.add(s.tokens->data() + p.first + 1, p.first, n, s.table);
      runner_.add_previous_hidden(p.rows.data(), n);
      // Its last row predicts the token after the sequence's last.
      if (s.max_tokens > 0 && p.first + n == n_tokens - 1) {
        runner_.want_logits(first + n - 1);
        runner_.want_hidden(first + n - 1);
        drafting.push_back({&s, {}});
      }
    }
    pending_.erase(it);
  }
  if (runner_.n_tokens() == 0) return Status();
  const auto fail = [&](const Status& status) {
    for (Drafting& d : drafting) d.sequence->draft->clear();
    return status;
  };
  // Each drafting sequence's next token from logit row `row`, and the hidden state that goes with it.
  const auto extend = [&](Drafting& d, int64_t row) {
    const int32_t token = confident_token(runner_.logits(row), n_vocab, min_probability_);
    if (token < 0) return;
    d.sequence->draft->push_back(token);
    d.hidden.assign(runner_.hidden(row), runner_.hidden(row) + n_embd);
  };
  DS_RETURN_IF_ERROR(runner_.run());
  for (size_t i = 0; i < drafting.size(); ++i) extend(drafting[i], int64_t(i));
  // Then one provisional row per forward: draft token j - 1 with the layer's
  // output before it, at the position after the last true row's.
  for (int32_t j = 1;; ++j) {
    runner_.begin(trace);
    std::vector<Drafting*> extending;
    for (Drafting& d : drafting) {
      const MtpSequence& s = *d.sequence;
      if (int32_t(s.draft->size()) != j || j >= s.max_tokens) continue;
      const int32_t position = int32_t(s.tokens->size()) - 2 + j;
      runner_.add(&(*s.draft)[size_t(j - 1)], position, 1, s.table);
      runner_.add_previous_hidden(d.hidden.data(), 1);
      const int32_t row = int32_t(extending.size());
      runner_.want_logits(row);
      runner_.want_hidden(row);
      extending.push_back(&d);
    }
    if (extending.empty()) break;
    const Status status = runner_.run();
    if (!status.ok()) return fail(status);
    for (size_t i = 0; i < extending.size(); ++i) extend(*extending[i], int64_t(i));
  }
  return Status();
}

}  // namespace ds

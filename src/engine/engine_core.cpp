#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/log.h"

namespace ds {

EngineCore::EngineCore(Model& model, KvCache& memory, const EngineCoreConfig& config,
                       std::vector<int32_t> end_of_generation)
    : model_(model),
      memory_(memory),
      runner_(model, memory),
      pool_(int32_t(memory.n_pages())),
      kv_(pool_, int32_t(memory.page_tokens()), config.model_salt, config.prefix_cache),
      scheduler_(config.scheduler, kv_),
      end_of_generation_(std::move(end_of_generation)),
      speculation_(config.speculation),
      draft_model_(config.draft_model) {}

Result<int64_t> EngineCore::add(std::vector<int32_t> prompt, const GenerationParams& params) {
  if (params.max_tokens < 1) return Status::error("max_tokens must be at least 1");
  for (int32_t t : prompt) {
    if (t < 0 || t >= model_.config().n_vocab) return Status::error("prompt token " + std::to_string(t) + " is outside the vocabulary");
  }
  auto request = std::make_unique<Request>(Request{Sequence{}, params, Sampler(params.sampling), {}, {}, {}, {}, false, {}, {}});
  request->added = Clock::now();
  Sequence& seq = request->seq;
  seq.id = next_id_++;
  seq.priority = params.priority;
  seq.tenant_salt = params.tenant_salt;
  seq.n_prompt = int32_t(prompt.size());
  seq.tokens = std::move(prompt);
  seq.max_new_tokens = params.max_tokens;
  // Scoring every prompt token (logprobs, mean pooling) needs every position computed.
  seq.reuse_prefix = params.prompt_logprobs < 0 && params.embedding != GenerationParams::Pooling::mean;
  DS_RETURN_IF_ERROR(scheduler_.add(&seq));
  const int64_t id = seq.id;
  requests_.emplace(id, std::move(request));
  return id;
}

void EngineCore::cancel(int64_t id) {
  if (requests_.count(id)) cancelled_.push_back(id);
}

RequestMetrics EngineCore::end(int64_t id) {
  auto it = requests_.find(id);
  const Request& r = *it->second;
  const auto seconds = [](Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); };
  RequestMetrics m;
  m.n_prompt_tokens = r.seq.n_prompt;
  m.n_output_tokens = int32_t(r.seq.tokens.size()) - r.seq.n_prompt;
  m.n_cached_prompt_tokens = std::max(0, r.seq.n_cached_prompt);
  const Clock::time_point now = Clock::now();
  m.queue_seconds = seconds(r.added, r.started ? r.scheduled : now);
  if (m.n_output_tokens > 0) m.ttft_seconds = seconds(r.added, r.first_token);
  if (m.n_output_tokens > 1) m.tpot_seconds = seconds(r.first_token, r.last_token) / (m.n_output_tokens - 1);
  m.e2e_seconds = seconds(r.added, now);
  scheduler_.finish(&it->second->seq);
  if (draft_model_) draft_model_->forget(id);
  requests_.erase(it);
  return m;
}

Result<std::vector<StepOutput>> EngineCore::step() {
  std::vector<StepOutput> outputs;
  std::optional<TraceScope> stage(std::in_place, &trace_, "schedule");
  for (int64_t id : cancelled_) {
    if (!requests_.count(id)) continue;
    const RequestMetrics metrics = end(id);
    outputs.push_back({id, -1, FinishReason::cancelled, std::nullopt, metrics, {}, {}});
  }
  cancelled_.clear();

  const Clock::time_point start = Clock::now();
  if (speculation_.n_draft > 0) propose_drafts();
  const StepPlan plan = scheduler_.schedule();
  if (plan.chunks.empty()) return outputs;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Request& request = *requests_.at(chunk.seq->id);
    if (!request.started) request.scheduled = start;
    request.started = true;
  }

  // The step's input: each chunk's tokens at their positions, through its block table.
  stage.emplace(&trace_, "batch");
  runner_.begin(trace_.on() ? &trace_ : nullptr);
  std::vector<std::pair<Sequence*, int32_t>> hidden_rows;  // embedding requests: (sequence, position)
  // Each row of logits either samples a sequence's next token (scores = -1)
  // or scores prompt token scores + 1 for prompt_logprobs. A speculative
  // chunk's rows sample one after another: row k verifies draft token k (the
  // last row, k == n_draft, has no draft to check).
  struct LogitRow {
    Sequence* seq;
    int64_t id;
    int32_t scores;
    int32_t draft_row = 0;
    int32_t n_draft = 0;
  };
  std::vector<LogitRow> rows;
  std::vector<int32_t> input;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = chunk.seq;
    const Request& request = *requests_.at(seq->id);
    const std::vector<int32_t>& table = kv_.block_table(seq->id);
    input.assign(seq->tokens.begin() + seq->n_computed, seq->tokens.begin() + seq->n_computed + chunk.n_tokens);
    input.insert(input.end(), seq->draft.begin(), seq->draft.begin() + chunk.n_draft);
    const int32_t first = runner_.add(input.data(), seq->n_computed, int32_t(input.size()), {table.data(), int32_t(table.size())});
    const GenerationParams::Pooling pooling = request.params.embedding;
    for (int32_t i = 0; i < chunk.n_tokens; ++i) {
      const int32_t position = seq->n_computed + i;
      const bool pooled = (pooling == GenerationParams::Pooling::mean && position >= request.n_pooled) ||
                          (pooling == GenerationParams::Pooling::last && position + 1 == seq->n_prompt);
      if (pooled) {
        runner_.want_hidden(first + i);
        hidden_rows.emplace_back(seq, position);
      }
      // Positions scored before a preemption are not scored again.
      if (request.params.prompt_logprobs >= 0 && position + 1 < seq->n_prompt && position >= int32_t(request.prompt_logprobs.size())) {
        runner_.want_logits(first + i);
        rows.push_back({seq, seq->id, position});
      }
    }
    if (seq->n_computed + chunk.n_tokens == int32_t(seq->tokens.size()) && pooling == GenerationParams::Pooling::none) {
      for (int32_t k = 0; k <= chunk.n_draft; ++k) {
        runner_.want_logits(first + chunk.n_tokens - 1 + k);
        rows.push_back({seq, seq->id, -1, k, chunk.n_draft});
      }
      if (chunk.n_draft > 0) ++drafts_;
      draft_tokens_ += chunk.n_draft;
    }
  }
  stage.reset();
  DS_RETURN_IF_ERROR(runner_.run());
  stage.emplace(&trace_, "commit");

  const int64_t n_vocab = model_.config().n_vocab, n_embd = model_.config().n_embd;
  for (size_t i = 0; i < hidden_rows.size(); ++i) {
    Request& request = *requests_.at(hidden_rows[i].first->id);
    request.pooled.resize(size_t(n_embd), 0.0);
    const float* hidden = runner_.hidden(int64_t(i));
    for (int64_t d = 0; d < n_embd; ++d) request.pooled[size_t(d)] += hidden[d];
    request.n_pooled = hidden_rows[i].second + 1;
  }
  for (const ScheduledChunk& chunk : plan.chunks) {
    chunk.seq->n_computed += chunk.n_tokens;
    kv_.commit(chunk.seq->id, chunk.seq->tokens, chunk.seq->n_computed);
    Request& request = *requests_.at(chunk.seq->id);
    if (request.params.embedding != GenerationParams::Pooling::none && chunk.seq->n_computed == chunk.seq->n_prompt) {
      outputs.push_back(embedding_output(chunk.seq->id));
    }
  }
  // Constrained rows are masked first, in parallel: each matcher is its own
  // request's, and masks are the costly part of constrained decoding.
  std::vector<size_t> masked_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].scores < 0 && requests_.at(rows[i].seq->id)->params.grammar) masked_rows.push_back(i);
  }
  std::vector<size_t> allowed_of(rows.size(), size_t(n_vocab));
  stage.emplace(&trace_, "grammar_mask");
  if (!masked_rows.empty()) {
    const auto mask_start = Clock::now();
    model_.backend().host_pool().parallel_for_dynamic(int64_t(masked_rows.size()), 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t k = begin; k < end; ++k) {
        const size_t i = masked_rows[size_t(k)];
        std::optional<grammar::TokenMatcher>& grammar = requests_.at(rows[i].seq->id)->params.grammar;
        allowed_of[i] = grammar->mask(runner_.logits(int64_t(i)), n_vocab);
      }
    });
    grammar_mask_seconds_ += std::chrono::duration<double>(Clock::now() - mask_start).count();
  }
  stage.emplace(&trace_, "sample");
  // Speculative sequences whose verification has stopped: a draft token was
  // not the one sampled, or the request ended (and is gone).
  std::vector<int64_t> done_verifying;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].draft_row > 0 && std::find(done_verifying.begin(), done_verifying.end(), rows[i].id) != done_verifying.end()) continue;
    Sequence* seq = rows[i].seq;
    Request& request = *requests_.at(seq->id);
    float* logits = runner_.logits(int64_t(i));
    if (rows[i].scores >= 0) {
      const int32_t next = seq->tokens[size_t(rows[i].scores) + 1];
      request.prompt_logprobs.push_back(token_logprobs(logits, n_vocab, next, request.params.prompt_logprobs));
      continue;
    }
    std::optional<grammar::TokenMatcher>& grammar = request.params.grammar;
    // Nothing the grammar takes is in the vocabulary: the reply ends here.
    const int32_t token = allowed_of[i] > 0 || end_of_generation_.empty() ? request.sampler.sample(logits, n_vocab, seq->tokens)
                                                                    : end_of_generation_[0];
    if (grammar) grammar->accept(token);
    seq->tokens.push_back(token);
    const int32_t n_generated = int32_t(seq->tokens.size()) - seq->n_prompt;
    FinishReason finish = FinishReason::none;
    const auto& stops = request.params.stop_tokens;
    if ((request.params.stop_at_end_of_generation &&
         std::find(end_of_generation_.begin(), end_of_generation_.end(), token) != end_of_generation_.end()) ||
        std::find(stops.begin(), stops.end(), token) != stops.end()) {
      finish = FinishReason::stop;
    } else if (n_generated >= seq->max_new_tokens) {
      finish = FinishReason::length;
    }
    std::optional<TokenLogprobs> logprobs;
    if (request.params.logprobs >= 0) logprobs = token_logprobs(logits, n_vocab, token, request.params.logprobs);
    request.last_token = Clock::now();
    if (n_generated == 1) request.first_token = request.last_token;
    outputs.push_back({seq->id, token, finish, std::move(logprobs), std::nullopt, {}, {}});
    if (n_generated == 1) outputs.back().prompt_logprobs = std::move(request.prompt_logprobs);
    if (rows[i].n_draft > 0) {
      const int32_t k = rows[i].draft_row;
      if (finish == FinishReason::none && k < rows[i].n_draft && token == seq->draft[size_t(k)]) {
        ++seq->n_computed;  // the draft's keys and values, computed at this position, are this token's
        ++accepted_draft_tokens_;
      } else {
        done_verifying.push_back(seq->id);
        if (finish == FinishReason::none) kv_.commit(seq->id, seq->tokens, seq->n_computed);
      }
    }
    if (finish != FinishReason::none) outputs.back().metrics = end(seq->id);
  }
  stage.reset();
  ++steps_;
  last_step_tokens_ = plan.n_tokens();
  step_tokens_ += last_step_tokens_;
  last_step_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  return outputs;
}

void EngineCore::propose_drafts() {
  std::vector<DraftRequest> for_draft_model;
  for (auto& [id, request] : requests_) {
    Sequence& seq = request->seq;
    seq.draft.clear();
    // Decoding (one token left to compute), unconstrained, generating: the
    // draft leaves room for the token sampled after it within max_tokens.
    const int32_t room = seq.max_new_tokens - (int32_t(seq.tokens.size()) - seq.n_prompt) - 1;
    if (seq.n_computed + 1 != int32_t(seq.tokens.size()) || request->params.grammar ||
        request->params.embedding != GenerationParams::Pooling::none || room <= 0) {
      continue;
    }
    const int32_t n = std::min(room, speculation_.n_draft);
    if (draft_model_) {
      for_draft_model.push_back({id, &seq.tokens, n, &seq.draft});
    } else {
      seq.draft = propose_ngram_draft(speculation_, seq.tokens, n);
    }
  }
  if (!draft_model_) return;
  // A draft is only ever an offer: a failed draft forward costs this step its drafts, nothing else.
  const Status status = draft_model_->propose(for_draft_model);
  if (!status.ok()) DS_LOG_WARN("draft model: %s; this step decodes without drafts", status.message().c_str());
}

// The pooled hidden state, L2-normalised, as the request's only output.
StepOutput EngineCore::embedding_output(int64_t id) {
  Request& request = *requests_.at(id);
  const double count = request.params.embedding == GenerationParams::Pooling::mean ? double(request.seq.n_prompt) : 1.0;
  double norm = 0.0;
  for (double v : request.pooled) norm += (v / count) * (v / count);
  norm = std::sqrt(norm);
  StepOutput out{id, -1, FinishReason::stop, std::nullopt, std::nullopt, {}, {}};
  for (double v : request.pooled) out.embedding.push_back(float(norm > 0 ? v / count / norm : 0.0));
  out.metrics = end(id);
  return out;
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.n_running = scheduler_.n_running();
  s.n_waiting = scheduler_.n_waiting();
  s.n_preemptions = scheduler_.n_preemptions();
  s.pages_total = pool_.n_pages();
  s.pages_held = pool_.n_pages() - pool_.n_unheld();
  s.pages_cached = pool_.n_cached();
  s.page_bytes = memory_.page_bytes();
  s.fragmentation = scheduler_.fragmentation();
  s.prefix_query_tokens = scheduler_.prefix_query_tokens();
  s.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
  s.steps = steps_;
  s.step_tokens = step_tokens_;
  s.last_step_tokens = last_step_tokens_;
  s.last_step_seconds = last_step_seconds_;
  s.grammar_mask_seconds = grammar_mask_seconds_;
  s.drafts = drafts_;
  s.draft_tokens = draft_tokens_;
  s.accepted_draft_tokens = accepted_draft_tokens_;
  s.expert_tokens = model_.last_expert_tokens();
  return s;
}

}  // namespace ds

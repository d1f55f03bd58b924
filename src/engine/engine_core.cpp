#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/log.h"
#include "tokenizer/tokenizer.h"

namespace ds {

const char* drafter_name(const EngineCoreConfig& config) {
  return config.mtp_drafter ? "multi-token prediction" : config.draft_model ? "draft model" : "prompt lookup";
}

EngineCore::EngineCore(Model& model, KvCache& memory, const EngineCoreConfig& config, const Tokenizer* tokenizer)
    : model_(model),
      memory_(memory),
      runner_(model, memory, config.ranks),
      pool_(int32_t(memory.n_pages())),
      window_pool_(int32_t(memory.n_window_pages())),
      kv_(pool_, int32_t(memory.page_tokens()), config.model_salt, config.prefix_cache, memory.n_window_pages() > 0 ? &window_pool_ : nullptr,
          int32_t(model.config().kv.horizon)),
      scheduler_(config.scheduler, kv_),
      tokenizer_(tokenizer),
      end_of_generation_(tokenizer ? tokenizer->vocab().end_of_generation : std::vector<int32_t>{}),
      speculation_(config.speculation),
      draft_model_(config.draft_model),
      mtp_drafter_(config.mtp_drafter) {
  // A draft the target or the draft model rejects has written rows past what
  // the sequence keeps; a cache with rings must keep that many more.
  const int32_t n_draft = config.speculation.n_draft;
  DS_CHECK(memory.keeps_drafts(n_draft), "the KV cache's rings keep fewer draft tokens than speculation drafts (KvCacheOptions::draft_tokens)");
  DS_CHECK(!draft_model_ || draft_model_->cache().keeps_drafts(n_draft), "the draft model's KV cache keeps fewer draft tokens than it drafts");
  if (config.kv_disk) {
    kv_disk_ = config.kv_disk;
    kv_.attach_tier(tier_link(config.kv_disk, model.config(), memory, config.ranks));
  }
}

Result<int64_t> EngineCore::add(std::vector<int32_t> prompt, const GenerationParams& params) {
  if (params.max_tokens < 0) return Status::error("max_tokens must not be negative");
  if (!params.stop.empty() && !tokenizer_) return Status::error("stop strings need an engine with a tokenizer");
  for (int32_t t : prompt) {
    if (t < 0 || t >= model_.config().n_vocab) return Status::error("prompt token " + std::to_string(t) + " is outside the vocabulary");
  }
  const int64_t max_new_tokens = scheduler_.admission_rule().max_new_tokens(int64_t(prompt.size()), params.max_tokens);
  const int64_t id = next_id_++;
  auto request = std::make_unique<Request>(id, std::move(prompt), params, int32_t(std::min<int64_t>(max_new_tokens, INT32_MAX)), tokenizer_);
  DS_RETURN_IF_ERROR(scheduler_.add(&request->seq));
  requests_.emplace(id, std::move(request));
  return id;
}

void EngineCore::cancel(int64_t id) {
  if (requests_.count(id)) cancelled_.push_back(id);
}

RequestMetrics EngineCore::end(int64_t id) {
  auto it = requests_.find(id);
  const RequestMetrics metrics = it->second->metrics(Clock::now());
  scheduler_.finish(&it->second->seq);
  if (draft_model_) draft_model_->forget(id);
  if (mtp_drafter_) mtp_drafter_->forget(id);
  requests_.erase(it);
  return metrics;
}

Result<std::vector<StepOutput>> EngineCore::step() {
  std::vector<StepOutput> outputs;
  const Clock::time_point start = Clock::now();
  end_cancelled(outputs);
  const StepPlan plan = schedule(start);
  if (plan.chunks.empty()) return outputs;
  StepRows rows = build_batch(plan);
  open_to_yield(plan);
  const Status ran = runner_.run();
  step_priority_.store(std::numeric_limits<int32_t>::min(), std::memory_order_release);
  DS_RETURN_IF_ERROR(ran);
  if (runner_.yielded()) {
    ++yielded_steps_;
    return outputs;  // nothing of the step is kept: its chunks are scheduled again
  }
  commit(plan, rows, outputs);
  mask_grammar(rows);
  sample(rows, outputs);
  count_step(plan, start);
  return outputs;
}

// A step may yield when dropping it loses nothing: no drafts (their drafters
// keep state), no windowed streams (a compressor's), no other ranks.
void EngineCore::open_to_yield(const StepPlan& plan) {
  yield_.store(false, std::memory_order_release);
  const int32_t pending = pending_yield_.exchange(std::numeric_limits<int32_t>::max());
  const bool may_yield = speculation_.n_draft == 0 && !mtp_drafter_ && window_pool_.n_pages() == 0 && !model_.collective();
  if (!may_yield) return runner_.set_yield(nullptr);
  int32_t best = std::numeric_limits<int32_t>::max();
  for (const ScheduledChunk& chunk : plan.chunks) best = std::min(best, chunk.seq->priority);
  runner_.set_yield(&yield_);
  step_priority_.store(best, std::memory_order_release);
  if (pending < best) yield_.store(true, std::memory_order_release);  // asked since the requests were taken
}

void EngineCore::write_nextn_rows(const std::vector<int64_t>& ids) {
  if (!mtp_drafter_) return;
  std::vector<MtpSequence> sequences;
  for (int64_t id : ids) {
    const auto it = requests_.find(id);
    if (it == requests_.end() || !kv_.has(id) || !mtp_drafter_->has_hidden(id)) continue;
    const std::vector<int32_t>& table = kv_.block_table(id);
    sequences.push_back({id, &it->second->seq.tokens, {table.data(), int32_t(table.size())}, 0, nullptr});
  }
  if (sequences.empty()) return;
  const Status status = mtp_drafter_->propose(sequences);
  if (!status.ok()) DS_LOG_WARN("multi-token prediction: %s; the rows of ending requests are not written", status.message().c_str());
}

void EngineCore::end_cancelled(std::vector<StepOutput>& outputs) {
  write_nextn_rows(cancelled_);
  for (int64_t id : cancelled_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    StepOutput out;
    out.id = id;
    out.finish = FinishReason::cancelled;
    out.text = it->second->rest_of_text();
    out.metrics = end(id);
    outputs.push_back(std::move(out));
  }
  cancelled_.clear();
}

StepPlan EngineCore::schedule(Clock::time_point now) {
  TraceScope stage(&trace_, "schedule");
  if (speculation_.n_draft > 0) propose_drafts();
  StepPlan plan = scheduler_.schedule();
  for (const ScheduledChunk& chunk : plan.chunks) {
    Request& request = *requests_.at(chunk.seq->id);
    if (!request.started) request.scheduled = now;
    request.started = true;
  }
  return plan;
}

void EngineCore::propose_drafts() {
  std::vector<DraftRequest> for_draft_model;
  std::vector<MtpSequence> for_mtp;
  for (auto& [id, request] : requests_) {
    Sequence& seq = request->seq;
    seq.draft.clear();
    // Decoding (one token left to compute), unconstrained, generating: the
    // draft leaves room for the token sampled after it within max_tokens.
    const int32_t room = seq.max_new_tokens - request->n_generated() - 1;
    const bool decoding = seq.n_computed + 1 == int32_t(seq.tokens.size()) && !request->params.grammar && !request->embeds() && room > 0;
    int32_t n = decoding ? std::min(room, speculation_.n_draft) : 0;
    if (mtp_drafter_) {
      // Every sequence with hidden states to take writes its rows, decoding or
      // not (without, it has nothing to draft from); a chained draft's
      // provisional rows need the pages of the positions it verifies.
      if (!kv_.has(id) || !mtp_drafter_->has_hidden(id)) continue;
      const int32_t n_tokens = int32_t(seq.tokens.size());
      while (n > 1 && !kv_.can_grow(id, n_tokens + n - 2)) --n;
      if (n > 1) kv_.grow(id, n_tokens + n - 2);
      for_mtp.push_back({id, &seq.tokens, {}, n, &seq.draft});
    } else if (n == 0) {
      continue;
    } else if (draft_model_) {
      for_draft_model.push_back({id, &seq.tokens, n, &seq.draft});
    } else {
      seq.draft = propose_ngram_draft(speculation_, seq.tokens, n);
    }
  }
  // A draft is only ever an offer: a failed draft forward costs this step its drafts, nothing else.
  Status status;
  if (mtp_drafter_) {
    for (MtpSequence& s : for_mtp) {
      const std::vector<int32_t>& table = kv_.block_table(s.id);  // after every grow: the tables are final
      s.table = {table.data(), int32_t(table.size())};
    }
    TraceScope scope(&trace_, "draft");
    status = mtp_drafter_->propose(for_mtp, trace_.on() ? &trace_ : nullptr);
  } else if (draft_model_) {
    status = draft_model_->propose(for_draft_model);
  }
  if (!status.ok()) DS_LOG_WARN("drafter: %s; this step decodes without drafts", status.message().c_str());
}

// Each chunk's tokens at their positions through its block table, and the
// rows each request wants back.
EngineCore::StepRows EngineCore::build_batch(const StepPlan& plan) {
  TraceScope stage(&trace_, "batch");
  runner_.begin(trace_.on() ? &trace_ : nullptr);
  StepRows rows;
  int64_t n_logit_rows = 0, n_hidden_rows = 0;
  std::vector<int32_t> input;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    Request& request = *requests_.at(seq.id);
    const std::vector<int32_t>& table = kv_.block_table(seq.id);
    input.assign(seq.tokens.begin() + seq.n_computed, seq.tokens.begin() + seq.n_computed + chunk.n_tokens);
    input.insert(input.end(), seq.draft.begin(), seq.draft.begin() + chunk.n_draft);
    BlockTableView window_table{};
    if (kv_.window_pool()) {
      const std::vector<int32_t>& pages = kv_.window_table(seq.id);
      window_table = {pages.data(), int32_t(pages.size())};
    }
    const int32_t first = runner_.add(input.data(), seq.n_computed, int32_t(input.size()), {table.data(), int32_t(table.size())}, window_table);
    const GenerationParams::Pooling pooling = request.params.embedding;
    for (int32_t i = 0; i < chunk.n_tokens; ++i) {
      const int32_t position = seq.n_computed + i;
      if ((pooling == GenerationParams::Pooling::mean && position >= request.n_pooled) ||
          (pooling == GenerationParams::Pooling::last && position + 1 == seq.n_prompt)) {
        runner_.want_hidden(first + i);
        rows.pool.push_back({&request, n_hidden_rows++, position});
      }
      // Positions scored before a preemption are not scored again.
      if (request.params.prompt_logprobs >= 0 && position + 1 < seq.n_prompt && position >= int32_t(request.prompt_logprobs.size())) {
        runner_.want_logits(first + i);
        rows.score.push_back({&request, n_logit_rows++, position});
      }
    }
    if (mtp_drafter_ && !request.embeds()) {
      rows.nextn.push_back({seq.id, seq.n_computed, n_hidden_rows, int32_t(input.size())});
      for (int32_t i = 0; i < int32_t(input.size()); ++i) runner_.want_hidden(first + i);
      n_hidden_rows += int64_t(input.size());
    }
    if (seq.n_computed + chunk.n_tokens == int32_t(seq.tokens.size()) && !request.embeds()) {
      for (int32_t k = 0; k <= chunk.n_draft; ++k) {
        runner_.want_logits(first + chunk.n_tokens - 1 + k);
        rows.sample.push_back({&request, n_logit_rows++, k, chunk.n_draft, size_t(model_.config().n_vocab)});
      }
      if (chunk.n_draft > 0) ++drafts_;
      draft_tokens_ += chunk.n_draft;
    }
  }
  return rows;
}

// What the forward computed becomes the requests': the chunks' keys and
// values (their full pages into the prefix cache), prompt tokens' scores,
// pooled hidden states; an embedding whose prompt is all computed is done.
void EngineCore::commit(const StepPlan& plan, const StepRows& rows, std::vector<StepOutput>& outputs) {
  TraceScope stage(&trace_, "commit");
  const int64_t n_vocab = model_.config().n_vocab, n_embd = model_.config().n_embd;
  for (const ScoreRow& row : rows.score) {
    Request& request = *row.request;
    const int32_t next = request.seq.tokens[size_t(row.position) + 1];
    request.prompt_logprobs.push_back(token_logprobs(runner_.logits(row.logit_row), n_vocab, next, request.params.prompt_logprobs));
  }
  for (const HiddenRow& row : rows.pool) {
    Request& request = *row.request;
    request.pooled.resize(size_t(n_embd), 0.0);
    const float* hidden = runner_.hidden(row.hidden_row);
    for (int64_t d = 0; d < n_embd; ++d) request.pooled[size_t(d)] += hidden[d];
    request.n_pooled = row.position + 1;
  }
  // Every computed position's, the drafts' too: the drafter keeps those whose next token is known by its proposal.
  for (const NextnRows& row : rows.nextn) mtp_drafter_->take_hidden(row.id, row.first_position, runner_.hidden(row.hidden_row), row.n);
  for (const ScheduledChunk& chunk : plan.chunks) {
    chunk.seq->n_computed += chunk.n_tokens;
    kv_.commit(chunk.seq->id, chunk.seq->tokens, chunk.seq->n_computed);
    Request& request = *requests_.at(chunk.seq->id);
    if (request.embeds() && chunk.seq->n_computed == chunk.seq->n_prompt) outputs.push_back(embedding_output(request));
  }
}

// Constrained rows are masked in parallel: each matcher is its own request's,
// and masks are the costly part of constrained decoding.
void EngineCore::mask_grammar(StepRows& rows) {
  TraceScope stage(&trace_, "grammar_mask");
  std::vector<SampleRow*> masked;
  for (SampleRow& row : rows.sample) {
    if (row.request->params.grammar) masked.push_back(&row);
  }
  if (masked.empty()) return;
  const auto mask_start = Clock::now();
  const int64_t n_vocab = model_.config().n_vocab;
  model_.backend().host_pool().parallel_for_dynamic(int64_t(masked.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t k = begin; k < end; ++k) {
      SampleRow& row = *masked[size_t(k)];
      row.n_allowed = row.request->params.grammar->mask(runner_.logits(row.logit_row), n_vocab);
    }
  });
  grammar_mask_seconds_ += std::chrono::duration<double>(Clock::now() - mask_start).count();
}

// Each sample row's token; a speculative chunk's rows in order, each keeping
// its draft token while the token sampled there equals it.
void EngineCore::sample(const StepRows& rows, std::vector<StepOutput>& outputs) {
  TraceScope stage(&trace_, "sample");
  // Sequences whose verification has stopped: a draft token was not the one
  // sampled, or the request ended (and is gone).
  std::vector<int64_t> done_verifying;
  std::vector<std::pair<size_t, int64_t>> ending;  // (output, request)
  for (const SampleRow& row : rows.sample) {
    const int64_t id = row.request->seq.id;
    if (row.draft_row > 0 && std::find(done_verifying.begin(), done_verifying.end(), id) != done_verifying.end()) continue;
    Request& request = *row.request;
    Sequence& seq = request.seq;
    float* logits = runner_.logits(row.logit_row);
    // Nothing the grammar takes is in the vocabulary: the reply ends here.
    const int32_t token = row.n_allowed > 0 || end_of_generation_.empty()
                              ? request.sampler.sample(logits, model_.config().n_vocab, seq.tokens)
                              : end_of_generation_[0];
    outputs.push_back(take_token(request, token, logits));
    const bool finished = outputs.back().finish != FinishReason::none;
    if (row.n_draft > 0) {
      const int32_t k = row.draft_row;
      if (!finished && k < row.n_draft && token == seq.draft[size_t(k)]) {
        ++seq.n_computed;  // the draft's keys and values, computed at this position, are this token's
        ++accepted_draft_tokens_;
      } else {
        done_verifying.push_back(id);
        if (!finished) kv_.commit(id, seq.tokens, seq.n_computed);
      }
    }
    if (finished) ending.emplace_back(outputs.size() - 1, id);
  }
  std::vector<int64_t> ending_ids;
  for (const auto& [output, id] : ending) ending_ids.push_back(id);
  write_nextn_rows(ending_ids);
  for (const auto& [output, id] : ending) outputs[output].metrics = end(id);
}

StepOutput EngineCore::take_token(Request& request, int32_t token, const float* logits) {
  if (request.params.grammar) request.params.grammar->accept(token);
  Request::Appended appended = request.append(token, end_of_generation_);
  StepOutput out;
  out.id = request.seq.id;
  out.token = token;
  out.finish = appended.finish;
  out.in_reply = appended.in_reply;
  out.text = std::move(appended.text);
  out.stop_string = std::move(appended.stop_string);
  if (request.params.logprobs >= 0) out.logprobs = token_logprobs(logits, model_.config().n_vocab, token, request.params.logprobs);
  request.last_token = Clock::now();
  if (request.n_generated() == 1) {
    request.first_token = request.last_token;
    out.prompt_logprobs = std::move(request.prompt_logprobs);
  }
  return out;
}

StepOutput EngineCore::embedding_output(Request& request) {
  const double count = request.params.embedding == GenerationParams::Pooling::mean ? double(request.seq.n_prompt) : 1.0;
  double norm = 0.0;
  for (double v : request.pooled) norm += (v / count) * (v / count);
  norm = std::sqrt(norm);
  StepOutput out;
  out.id = request.seq.id;
  out.finish = FinishReason::stop;
  for (double v : request.pooled) out.embedding.push_back(float(norm > 0 ? v / count / norm : 0.0));
  out.metrics = end(request.seq.id);
  return out;
}

void EngineCore::count_step(const StepPlan& plan, Clock::time_point start) {
  ++steps_;
  last_step_tokens_ = plan.n_tokens();
  step_tokens_ += last_step_tokens_;
  last_step_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
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
  s.window_pages_total = window_pool_.n_pages();
  s.window_pages_held = window_pool_.n_pages() - window_pool_.n_unheld();
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
  s.yielded_steps = yielded_steps_;
  s.expert_tokens = model_.last_expert_tokens();
  if (kv_disk_) s.kv_disk = kv_disk_->stats();
  return s;
}

}  // namespace ds

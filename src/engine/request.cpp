#include "engine/request.h"

#include <algorithm>

namespace ds {

Request::Request(int64_t id, std::vector<int32_t> prompt, GenerationParams p, int32_t max_new_tokens, const Tokenizer* tokenizer)
    : params(std::move(p)), sampler(params.sampling), stops(params.stop), added(Clock::now()) {
  seq.id = id;
  seq.priority = params.priority;
  seq.tenant_salt = params.tenant_salt;
  seq.n_prompt = int32_t(prompt.size());
  seq.tokens = std::move(prompt);
  seq.max_new_tokens = max_new_tokens;
  // Scoring every prompt token (logprobs, mean pooling) needs every position computed.
  seq.reuse_prefix = params.prompt_logprobs < 0 && params.embedding != GenerationParams::Pooling::mean;
  if (tokenizer) detokenizer.emplace(*tokenizer, false, false);
}

Request::Appended Request::append(int32_t token, const std::vector<int32_t>& end_of_generation) {
  seq.tokens.push_back(token);
  Appended out;
  const auto& stop_tokens = params.stop_tokens;
  if ((params.stop_at_end_of_generation && std::find(end_of_generation.begin(), end_of_generation.end(), token) != end_of_generation.end()) ||
      std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) {
    out.finish = FinishReason::stop;
    out.in_reply = false;
    out.text = rest_of_text();
    return out;
  }
  if (detokenizer) out.text = stops.push(detokenizer->push(token));
  if (stops.stopped()) {
    out.finish = FinishReason::stop;
    out.stop_string = stops.matched();
  } else if (n_generated() >= seq.max_new_tokens) {
    out.finish = FinishReason::length;
    out.text += rest_of_text();
  }
  return out;
}

std::string Request::rest_of_text() {
  if (!detokenizer || stops.stopped()) return {};
  std::string text = stops.push(detokenizer->flush());
  return text + stops.flush();
}

RequestMetrics Request::metrics(Clock::time_point now) const {
  const auto seconds = [](Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); };
  RequestMetrics m;
  m.n_prompt_tokens = seq.n_prompt;
  m.n_output_tokens = n_generated();
  m.n_cached_prompt_tokens = std::max(0, seq.n_cached_prompt);
  m.queue_seconds = seconds(added, started ? scheduled : now);
  if (m.n_output_tokens > 0) m.ttft_seconds = seconds(added, first_token);
  if (m.n_output_tokens > 1) m.tpot_seconds = seconds(first_token, last_token) / (m.n_output_tokens - 1);
  m.e2e_seconds = seconds(added, now);
  return m;
}

}  // namespace ds

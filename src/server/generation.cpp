// One generation request from admission to its last byte: its n choices,
// each its own engine sequence, streamed as SSE chunks or gathered into one
// JSON reply, then its metrics and access-log line.
//
// Choice 0 is submitted first and the others when it has produced its first
// token: its prompt pages are then in the prefix cache, so the other choices
// reuse them instead of computing the prompt again. Choice i samples with
// seed + i, so a seed reproduces every choice.

#include <nlohmann/json.hpp>
#include <random>

#include "base/log.h"
#include "base/random_id.h"
#include "base/unix_time.h"
#include "server/anthropic_reply.h"
#include "server/anthropic_request.h"
#include "server/generation.h"
#include "server/reasoning_splitter.h"
#include "server/response_store.h"
#include "server/responses_reply.h"

namespace ds {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* finish_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
    case FinishReason::none: break;
  }
  return "none";
}

json bytes_of(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(int(c));
  return bytes;
}

bool failed(FinishReason reason) { return reason == FinishReason::error || reason == FinishReason::cancelled; }

}  // namespace

GenerationParams generation_params(const CompletionRequest& request, const std::string& tenant) {
  GenerationParams params;
  params.sampling = request.sampling;
  // max_tokens 0 (echo): one token is computed for the prompt's sake and not returned.
  params.max_tokens = request.max_tokens ? std::max(*request.max_tokens, 1) : GenerationParams::k_to_context_end;
  if (request.echo && request.logprobs >= 0) params.prompt_logprobs = request.logprobs;
  params.tenant_salt = tenant_salt(tenant);
  params.logprobs = request.logprobs;
  params.stop = request.stop;
  params.stop_tokens = request.stop_token_ids;
  params.stop_at_end_of_generation = !request.ignore_eos;
  return params;
}

std::string refused_field(const CompletionRequest& request, const Admit& admit) {
  if (admit.limit == Admit::Limit::context && request.max_tokens) return "max_tokens";
  return request.endpoint == Endpoint::completion ? "prompt" : "messages";
}

// Lives on the connection's strand; the engine thread only posts wake-ups to it.
struct Server::Generation : std::enable_shared_from_this<Generation> {
  struct Choice {
    std::shared_ptr<RequestStream> stream;  // null until submitted
    std::optional<ReasoningSplitter> splitter;
    std::optional<ToolCallParser> tool_parser;
    std::string content, reasoning;  // non-streamed replies accumulate here
    json tool_calls = json::array();  // every call reported, streamed or not
    bool echoed = false;              // echo: the prompt has been put before the reply
    json logprobs = json::array();   // one entry per token
    size_t text_offset = 0;
    bool done = false;
    StreamEvent last;  // the final event: finish reason, error, metrics
  };

  Server& server;
  std::shared_ptr<ModelVersion> version;  // held to the last byte: a swap retires it only when every request on it has ended
  std::shared_ptr<HttpExchange> exchange;
  CompletionRequest request;
  RequestContext context;
  EngineRequest shared;  // prompt and parameters of every choice
  std::string id, prompt_text;
  int64_t created = unix_seconds();
  int32_t n_prompt = 0;
  std::vector<Choice> choices;
  std::optional<AnthropicReply> anthropic;  // /v1/messages: the reply in Anthropic's shape (one choice)
  std::optional<Prepared::ResponsesTurn> turn;  // /v1/responses: the turn, stored when it ends ...
  std::optional<ResponsesReply> responses;      // ... and its Response object (one choice)
  std::shared_ptr<Generation> self_hold;  // alive until the final event, even if the client has gone
  bool timed_out = false, gone = false, ended = false;
  bool prompt_only = false;

  Generation(Server& s, std::shared_ptr<HttpExchange> e, RequestContext c, Prepared& p)
      : server(s), version(p.version), exchange(std::move(e)), request(std::move(p.request)), context(std::move(c)),
        prompt_text(std::move(p.prompt_text)), turn(std::move(p.responses)) {
    n_prompt = int32_t(p.prompt.size());
    shared.prompt = std::move(p.prompt);
    shared.params = std::move(p.params);
    prompt_only = request.max_tokens == 0;
    choices.resize(size_t(request.n));
    for (Choice& c : choices) {
      if (p.reasoning_open) c.splitter.emplace(*p.reasoning_open);
      if (p.tool_calls != ToolCallFormat::none) c.tool_parser.emplace(p.tool_calls);
    }
  }

  // OpenAI's shape for a call, with an id of its own.
  json tool_call_json(const ParsedToolCall& call) {
    static thread_local std::mt19937_64 random{std::random_device{}()};
    char id[32];
    std::snprintf(id, sizeof id, "call_%016llx%08llx", (unsigned long long)random(), (unsigned long long)(random() & 0xffffffffu));
    return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  }

  // stop with calls made is tool_calls, as OpenAI reports it.
  const char* finish_reason_of(const Choice& c) const {
    if (c.last.finish == FinishReason::stop && !c.tool_calls.empty()) return "tool_calls";
    return finish_name(c.last.finish);
  }

  bool chat() const { return request.endpoint != Endpoint::completion; }
  const char* chunk_object() const { return chat() ? "chat.completion.chunk" : "text_completion"; }

  void start() {
    self_hold = shared_from_this();
    std::weak_ptr<Generation> weak = self_hold;
    exchange->on_disconnect([weak] {
      if (auto g = weak.lock()) {
        g->gone = true;
        g->cancel_all();
      }
    });
    exchange->after(server.options_.request_timeout, [weak] {
      if (auto g = weak.lock()) {
        g->timed_out = true;
        g->cancel_all();
      }
    });
    if (request.endpoint == Endpoint::messages) anthropic.emplace(id, server.options_.model_name, request.stream, request.omit_reasoning);
    if (turn) responses.emplace(id, server.options_.model_name, turn->echo_json, turn->previous_response_id, turn->store, request.stream);
    if (request.stream) {
      exchange->begin_stream(200, "text/event-stream", {{"X-Model-Version", version->label}});
      if (responses) {
        exchange->write_chunk(responses->start());
      } else if (anthropic) {
        exchange->write_chunk(anthropic->start(n_prompt));
      } else if (chat()) {
        for (size_t i = 0; i < choices.size(); ++i) send_chunk(i, json{{"role", "assistant"}, {"content", ""}}, nullptr, json(nullptr));
      }
    }
    submit(0);
    if (exchange->disconnected()) {  // left while the request was prepared
      gone = true;
      cancel_all();
    }
  }

  void submit(size_t i) {
    EngineRequest r = shared;
    r.params.sampling.seed = shared.params.sampling.seed + i;
    Choice& c = choices[i];
    c.stream = version->engine->submit(std::move(r));
    {
      std::lock_guard lock(server.live_mutex_);
      server.live_.emplace(version->engine.get(), c.stream->id());
    }
    if (server.drain_cut_) version->engine->cancel(c.stream->id());
    std::weak_ptr<Generation> weak = self_hold;
    c.stream->set_listener([weak, i, exchange = exchange] {
      exchange->post([weak, i] {
        if (auto g = weak.lock()) g->drain(i);
      });
    });
  }

  // The choices not yet submitted end with choice 0; the running ones within an engine step.
  void cancel_all() {
    for (Choice& c : choices) {
      if (c.stream && !c.done) version->engine->cancel(c.stream->id());
    }
  }

  void drain(size_t i) {
    Choice& c = choices[i];
    while (!c.done) {
      auto event = c.stream->next(std::chrono::milliseconds(0));
      if (!event) return;
      on_event(i, *event);
    }
  }

  json token_logprobs_json(Choice& c, const StreamEvent& event) {
    json entries = json::array();
    for (size_t i = 0; i < event.logprobs.size() && i < event.tokens.size(); ++i) {
      const std::string piece = version->tokenizer->token_to_piece(event.tokens[i], false);
      const TokenLogprobs& lp = event.logprobs[i];
      if (chat()) {
        json top = json::array();
        for (const auto& [token, logprob] : lp.top) {
          const std::string p = version->tokenizer->token_to_piece(token, false);
          top.push_back({{"token", p}, {"logprob", logprob}, {"bytes", bytes_of(p)}});
        }
        entries.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
      } else {
        json top = json::object();
        for (const auto& [token, logprob] : lp.top) top[version->tokenizer->token_to_piece(token, false)] = logprob;
        entries.push_back({{"token", piece}, {"logprob", lp.logprob}, {"top", top}, {"offset", c.text_offset}});
        c.text_offset += piece.size();
      }
    }
    return entries;
  }

  // Completions report logprobs as parallel arrays.
  static json completion_arrays(const json& entries) {
    json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const json& e : entries) {
      out["tokens"].push_back(e["token"]);
      out["token_logprobs"].push_back(e["logprob"]);
      out["top_logprobs"].push_back(e["top"]);
      out["text_offset"].push_back(e["offset"]);
    }
    return out;
  }

  // echo: the prompt's text and, with logprobs, one entry per prompt token
  // (the first has no logprob: nothing comes before it), offsets from 0.
  void echo_prompt(Choice& c, const StreamEvent& event) {
    c.echoed = true;
    json entries = json::array();
    if (request.logprobs >= 0) {
      for (size_t k = 0; k < shared.prompt.size(); ++k) {
        const std::string piece = version->tokenizer->token_to_piece(shared.prompt[k], false);
        json top = nullptr, logprob = nullptr;
        if (k > 0 && k - 1 < event.prompt_logprobs.size()) {
          const TokenLogprobs& lp = event.prompt_logprobs[k - 1];
          logprob = lp.logprob;
          top = json::object();
          for (const auto& [token, value] : lp.top) top[version->tokenizer->token_to_piece(token, false)] = value;
        }
        entries.push_back({{"token", piece}, {"logprob", logprob}, {"top", top}, {"offset", c.text_offset}});
        c.text_offset += piece.size();
      }
    }
    c.text_offset = prompt_text.size();
    if (request.stream) {
      send_chunk(size_t(&c - choices.data()), json{{"content", prompt_text}}, request.logprobs >= 0 ? entries : json(nullptr), json(nullptr));
    } else {
      c.content = prompt_text + c.content;
      c.logprobs.insert(c.logprobs.begin(), entries.begin(), entries.end());
    }
  }

  void on_event(size_t i, const StreamEvent& event) {
    Choice& c = choices[i];
    if (request.echo && !c.echoed) echo_prompt(c, event);
    if (prompt_only) {  // the token computed for max_tokens 0 is not part of the reply
      if (event.finish != FinishReason::none) finish_choice(i, event);
      return;
    }
    ReasoningDelta delta;
    if (c.splitter) {
      delta = c.splitter->push(event.text);
    } else {
      delta.content = event.text;
    }
    json lp = request.logprobs >= 0 ? token_logprobs_json(c, event) : json(nullptr);
    if (event.finish != FinishReason::none && c.splitter) {
      ReasoningDelta rest = c.splitter->flush();
      delta.reasoning += rest.reasoning;
      delta.content += rest.content;
    }
    std::vector<ParsedToolCall> calls;
    if (c.tool_parser) {
      ToolCallParser::Output parsed = c.tool_parser->feed(delta.content);
      if (event.finish != FinishReason::none) {
        ToolCallParser::Output rest = c.tool_parser->finish();
        parsed.content += rest.content;
        parsed.calls.insert(parsed.calls.end(), rest.calls.begin(), rest.calls.end());
      }
      delta.content = std::move(parsed.content);
      // parallel_tool_calls false: the first call is the reply's only one.
      for (ParsedToolCall& call : parsed.calls) {
        if (request.chat.parallel_tool_calls || (c.tool_calls.empty() && calls.empty())) calls.push_back(std::move(call));
      }
    }
    if (responses) {
      std::string events = responses->reasoning(delta.reasoning);  // before the text: one statement each, in order
      events += responses->text(delta.content);
      for (const ParsedToolCall& call : calls) events += responses->function_call(call.name, call.arguments);
      if (!events.empty()) exchange->write_chunk(events);
    } else if (anthropic) {
      std::string events = anthropic->thinking(delta.reasoning);  // before the text: one statement each, in order
      events += anthropic->text(delta.content);
      for (const ParsedToolCall& call : calls) events += anthropic->tool_use(call.name, call.arguments);
      if (!events.empty()) exchange->write_chunk(events);
    } else if (request.stream) {
      const bool has_text = !delta.content.empty() || !delta.reasoning.empty();
      if (has_text || (!lp.is_null() && !lp.empty())) {
        json d = json::object();
        if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
        if (!delta.content.empty() || delta.reasoning.empty()) d["content"] = delta.content;
        send_chunk(i, d, lp, json(nullptr));
      }
      for (const ParsedToolCall& call : calls) {
        json entry = tool_call_json(call);
        entry["index"] = c.tool_calls.size();
        c.tool_calls.push_back(entry);
        send_chunk(i, json{{"tool_calls", json::array({entry})}}, nullptr, json(nullptr));
      }
    } else {
      c.content += delta.content;
      c.reasoning += delta.reasoning;
      for (const ParsedToolCall& call : calls) c.tool_calls.push_back(tool_call_json(call));
      if (!lp.is_null()) c.logprobs.insert(c.logprobs.end(), lp.begin(), lp.end());
    }
    if (event.finish != FinishReason::none) return finish_choice(i, event);
    if (i == 0 && choices.size() > 1 && !choices[1].stream && !gone && !timed_out) {
      for (size_t k = 1; k < choices.size(); ++k) submit(k);  // choice 0's prompt is computed and cached now
    }
  }

  json choice_logprobs(const json& entries) const {
    if (entries.is_null() || request.logprobs < 0) return json(nullptr);
    return chat() ? json{{"content", entries}} : completion_arrays(entries);
  }

  void send_chunk(size_t i, const json& delta, const json& entries, const json& finish_reason) {
    json choice = {{"index", i}, {"logprobs", choice_logprobs(entries)}, {"finish_reason", finish_reason}};
    if (chat()) {
      choice["delta"] = delta;
    } else {
      choice["text"] = delta.value("content", "");
    }
    const json chunk = {{"id", id}, {"object", chunk_object()}, {"created", created},
                        {"model", server.options_.model_name}, {"system_fingerprint", version->label}, {"choices", json::array({choice})}};
    exchange->write_chunk("data: " + dump(chunk) + "\n\n");
  }

  void finish_choice(size_t i, const StreamEvent& event) {
    Choice& c = choices[i];
    c.done = true;
    c.last = event;
    c.stream->set_listener(nullptr);
    {
      std::lock_guard lock(server.live_mutex_);
      server.live_.erase({version->engine.get(), c.stream->id()});
    }
    if (failed(event.finish)) cancel_all();  // one choice failing ends the request
    if (request.stream && !anthropic && !responses && !failed(event.finish) && !gone && !timed_out) {
      send_chunk(i, json::object(), nullptr, finish_reason_of(c));
    }
    if (i == 0) {
      // The choices not submitted yet (choice 0 ended with its first event) start
      // now from the cached prompt, unless the request is over.
      const bool start_others = !failed(event.finish) && !gone && !timed_out;
      for (size_t k = 1; k < choices.size(); ++k) {
        if (choices[k].stream) continue;
        if (start_others) {
          submit(k);
        } else {
          choices[k].done = true;
          choices[k].last = StreamEvent::ending(FinishReason::cancelled);
        }
      }
    }
    for (const Choice& other : choices) {
      if (!other.done) return;
    }
    finish();
  }

  json usage(const RequestMetrics& m) const {
    return {{"prompt_tokens", m.n_prompt_tokens},
            {"completion_tokens", m.n_output_tokens},
            {"total_tokens", m.n_prompt_tokens + m.n_output_tokens},
            {"prompt_tokens_details", {{"cached_tokens", m.n_cached_prompt_tokens}}}};
  }

  // The request's totals: the prompt once (as choice 0 ran it), the outputs of every choice.
  RequestMetrics totals() const {
    RequestMetrics m = choices[0].last.metrics.value_or(RequestMetrics{n_prompt, 0, 0, 0, 0, 0, 0});
    for (size_t i = 1; i < choices.size(); ++i) {
      if (choices[i].last.metrics) m.n_output_tokens += choices[i].last.metrics->n_output_tokens;
    }
    if (prompt_only) m.n_output_tokens = 0;  // the token computed for max_tokens 0 was not returned
    return m;
  }

  // The error that ends the request, if one does.
  std::optional<std::pair<ApiError, std::string>> failure() const {
    if (timed_out) return std::pair{ApiError{503, "the request did not finish within --request-timeout", "server_error", "", "timeout", 1}, "timeout"};
    for (const Choice& c : choices) {
      if (!failed(c.last.finish)) continue;
      if (c.last.finish == FinishReason::cancelled && server.drain_cut_) {
        return std::pair{ApiError{503, "the server stopped before this request finished (--drain-timeout expired)", "server_error", "",
                                  "drain_timeout", 1},
                         "drain_timeout"};
      }
      if (c.last.finish == FinishReason::cancelled) {
        return std::pair{ApiError{503, "the server is shutting down", "server_error", "", "shutting_down", 1}, "shutting_down"};
      }
      return std::pair{ApiError{500, "the engine failed: " + c.last.error, "server_error", "", "engine_error", 0}, "engine_error"};
    }
    return std::nullopt;
  }

  void finish() {
    if (ended) return;
    ended = true;
    const auto release = std::move(self_hold);  // this object may go when finish returns
    // The slot is free before the answer's last bytes leave: a client that
    // sends its next request on reading them must find it free.
    server.leave(context);
    --version->in_flight;
    const RequestMetrics m = totals();
    int status = 200;
    std::string reason = finish_name(choices[0].last.finish);
    if (gone) {
      reason = "client_gone";
      status = 499;  // nginx's code for a client that closed the connection; logged, never sent
    } else if (answer_failure(status, reason)) {
    } else if (anthropic) {
      answer_anthropic(m);
    } else if (responses) {
      answer_responses(m);
    } else if (request.stream) {
      if (request.include_usage) {
        const json chunk = {{"id", id}, {"object", chunk_object()}, {"created", created},
                            {"model", server.options_.model_name}, {"system_fingerprint", version->label}, {"choices", json::array()}, {"usage", usage(m)}};
        exchange->write_chunk("data: " + dump(chunk) + "\n\n");
      }
      exchange->write_chunk("data: [DONE]\n\n");
      exchange->end_stream();
      server.count_request(context.path, 200);
    } else {
      json out = json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        const Choice& c = choices[i];
        json choice = {{"index", i}, {"finish_reason", finish_reason_of(c)},
                       {"logprobs", choice_logprobs(request.logprobs >= 0 ? c.logprobs : json(nullptr))}};
        if (chat()) {
          const bool only_calls = !c.tool_calls.empty() && c.content.find_first_not_of(" \t\r\n") == std::string::npos;
          json message = {{"role", "assistant"}, {"content", only_calls ? json(nullptr) : json(c.content)}};
          if (!c.tool_calls.empty()) message["tool_calls"] = c.tool_calls;
          if (c.splitter) message["reasoning_content"] = c.reasoning;
          choice["message"] = message;
        } else {
          choice["text"] = c.content;
        }
        out.push_back(choice);
      }
      const json body = {{"id", id}, {"object", chat() ? "chat.completion" : "text_completion"}, {"created", created},
                         {"model", server.options_.model_name}, {"system_fingerprint", version->label}, {"choices", out}, {"usage", usage(m)}};
      // W3C Server-Timing: what a client (or the router's canary) cannot
      // measure of an answer that arrives whole, in milliseconds.
      std::string timing = "queue;dur=" + std::to_string(m.queue_seconds * 1e3);
      if (m.n_output_tokens > 0) timing += ", ttft;dur=" + std::to_string(m.ttft_seconds * 1e3);
      if (m.n_output_tokens > 1) timing += ", tpot;dur=" + std::to_string(m.tpot_seconds * 1e3);
      exchange->respond(200, "application/json", dump(body), {{"X-Model-Version", version->label}, {"Server-Timing", timing}});
      server.count_request(context.path, 200);
    }
    record(m, status, reason);
  }

  // The error that ends the request, as its API writes it: the stream's last
  // events, or a whole error body. False when the request did not fail.
  bool answer_failure(int& status, std::string& reason) {
    const auto error = failure();
    if (!error) return false;
    reason = error->second;
    status = error->first.status;
    if (request.stream) {
      exchange->write_chunk(anthropic   ? AnthropicReply::error_event(error->first)
                            : responses ? responses->failed(error->first)
                                        : "data: " + error->first.json() + "\n\ndata: [DONE]\n\n");
      exchange->end_stream();
      server.count_request(context.path, 200);
    } else {
      HttpHeaders headers{{"X-Model-Version", version->label}};
      if (error->first.retry_after_seconds > 0) headers.emplace_back("Retry-After", std::to_string(error->first.retry_after_seconds));
      exchange->respond(status, "application/json", anthropic ? anthropic_error_json(error->first) : error->first.json(), headers);
      server.count_request(context.path, status);
    }
    return true;
  }

  // /v1/messages: the message, or its stream's last events.
  void answer_anthropic(const RequestMetrics& m) {
    const Choice& c = choices[0];
    const std::string stop = anthropic_stop_reason(c.last.finish, c.last.stop_string, anthropic->made_tool_calls());
    const std::string stop_sequence = stop == "stop_sequence" ? c.last.stop_string : "";
    if (request.stream) {
      exchange->write_chunk(anthropic->finish(stop, stop_sequence, m));
      exchange->end_stream();
    } else {
      exchange->respond(200, "application/json", dump(anthropic->message(stop, stop_sequence, m)), {{"X-Model-Version", version->label}});
    }
    server.count_request(context.path, 200);
  }

  // /v1/responses: the Response object (stored first, when asked), or its stream's last events.
  void answer_responses(const RequestMetrics& m) {
    const std::string events = responses->finish(choices[0].last.finish, m);
    if (turn->store) {
      nlohmann::ordered_json context_items = nlohmann::ordered_json::parse(turn->context_json);
      for (const auto& item : responses->output()) context_items.push_back(item);
      const auto text = [](const nlohmann::ordered_json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
      const Status stored = server.options_.response_store->put(context.tenant, id,
                                                                {text(responses->response()), turn->input_json, text(context_items)});
      if (!stored.ok()) DS_LOG_ERROR("response %s not stored: %s", id.c_str(), stored.message().c_str());
    }
    if (request.stream) {
      exchange->write_chunk(events);
      exchange->end_stream();
    } else {
      exchange->respond(200, "application/json", responses->response().dump(-1, ' ', false, json::error_handler_t::replace),
                        {{"X-Model-Version", version->label}});
    }
    server.count_request(context.path, 200);
  }

  void record(const RequestMetrics& m, int status, const std::string& reason) {
    Metrics& metrics = server.metrics_;
    const double total = std::chrono::duration<double>(Clock::now() - context.arrived).count();
    metrics.add("dsinfer:request_success_total", "finished_reason=\"" + reason + "\"");
    metrics.add("dsinfer:prompt_tokens_total", "", m.n_prompt_tokens);
    metrics.add("dsinfer:generation_tokens_total", "", m.n_output_tokens);
    if (m.n_output_tokens > 0) metrics.observe("dsinfer:time_to_first_token_seconds", m.ttft_seconds);
    if (m.n_output_tokens > 1) metrics.observe("dsinfer:time_per_output_token_seconds", m.tpot_seconds);
    metrics.observe("dsinfer:e2e_request_latency_seconds", total);
    metrics.observe("dsinfer:request_queue_time_seconds", m.queue_seconds);
    AccessRecord line = server.access_record(context, status, reason);
    line.completion_id = id;
    line.user = request.user.substr(0, 256);
    line.prompt_tokens = m.n_prompt_tokens;
    line.cached_tokens = m.n_cached_prompt_tokens;
    line.output_tokens = m.n_output_tokens;
    line.ttft_ms = m.ttft_seconds * 1e3;
    if (server.options_.log_prompts) line.prompt = prompt_text;
    write_access_log(line);
  }
};

// On the connection's strand: admission against what the engine holds now, then submit.
void Server::start(const RequestContext& context, std::shared_ptr<Prepared> p, std::shared_ptr<HttpExchange> exchange) {
  if (exchange->disconnected()) return log_access(context, 499, "client_gone");
  const Admit admit = p->version->engine->admit(p->prompt, p->params);
  if (!admit.fits()) {
    return answer_error(context, *exchange, admission_error(admit, refused_field(p->request, admit)), admission_reason(admit));
  }
  if (const Refusal full = enter(context); full != Refusal::none) {
    return answer_error(context, *exchange, in_flight_error(full), refusal_name(full));
  }
  ++p->version->in_flight;
  const Endpoint endpoint = p->request.endpoint;
  auto g = std::make_shared<Generation>(*this, exchange, context, *p);
  g->id = endpoint == Endpoint::responses ? random_id("resp_")
                                          : std::string(endpoint == Endpoint::chat       ? "chatcmpl-"
                                                        : endpoint == Endpoint::messages ? "msg_"
                                                                                         : "cmpl-") +
                                                std::to_string(next_id_++);
  g->start();
}

}  // namespace ds

// POST /v1/embeddings: each input its own engine request whose prompt is
// computed and pooled (the last token's final hidden state, or the mean of
// all, --embedding-pooling) instead of sampled, scheduled with the other
// requests; the reply gathers them in input order, as floats or base64.

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/completion_request.h"

namespace ds {
namespace {

using json = nlohmann::json;

// An embedding is one engine request per input: its prompt computed and
// pooled, one position of output room (nothing is sampled).
GenerationParams embedding_params(GenerationParams::Pooling pooling, const std::string& tenant, int32_t priority) {
  GenerationParams params;
  params.max_tokens = 1;
  params.embedding = pooling;
  params.tenant_salt = tenant_salt(tenant);
  params.priority = priority;
  return params;
}

std::string base64_floats(const std::vector<float>& values) {
  static const char* const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian float32, as OpenAI's base64 holds them
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace

// Lives on the connection's strand, as Generation does.
struct Server::Embedding : std::enable_shared_from_this<Embedding> {
  Server& server;
  std::shared_ptr<ModelVersion> version;  // held to the last byte, as a generation holds its own
  std::shared_ptr<HttpExchange> exchange;
  RequestContext context;
  std::shared_ptr<EmbeddingRequest> request;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::optional<StreamEvent>> results;
  std::shared_ptr<Embedding> self_hold;
  size_t done = 0;
  int32_t prompt_tokens = 0;
  bool gone = false;

  Embedding(Server& s, std::shared_ptr<ModelVersion> v, std::shared_ptr<HttpExchange> e, RequestContext c,
            std::shared_ptr<EmbeddingRequest> r)
      : server(s), version(std::move(v)), exchange(std::move(e)), context(std::move(c)), request(std::move(r)) {}

  void start(std::vector<std::vector<int32_t>>& inputs) {
    self_hold = shared_from_this();
    std::weak_ptr<Embedding> weak = self_hold;
    exchange->on_disconnect([weak] {
      if (auto e = weak.lock()) {
        e->gone = true;
        for (const auto& s : e->streams) e->version->engine->cancel(s->id());
      }
    });
    results.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      prompt_tokens += int32_t(inputs[i].size());
      streams.push_back(version->engine->submit({std::move(inputs[i]), embedding_params(server.options_.embedding_pooling, context.tenant, context.priority())}));
      streams.back()->set_listener([weak, i, exchange = exchange] {
        exchange->post([weak, i] {
          if (auto e = weak.lock()) e->drain(i);
        });
      });
    }
  }

  void drain(size_t i) {
    while (!results[i]) {
      auto event = streams[i]->next(std::chrono::milliseconds(0));
      if (!event) return;
      if (event->finish == FinishReason::none) continue;
      results[i] = std::move(*event);
      streams[i]->set_listener(nullptr);
      if (++done == results.size()) finish();
    }
  }

  void finish() {
    const auto release = std::move(self_hold);
    server.leave(context);
    --version->in_flight;
    if (gone) return server.log_access(context, 499, "client_gone");
    json data = json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const StreamEvent& r = *results[i];
      if (r.finish != FinishReason::stop || r.embedding.empty()) {
        const ApiError error = r.finish == FinishReason::cancelled
                                   ? ApiError{503, "the server is shutting down", "server_error", "", "shutting_down", 1}
                                   : ApiError{500, "the engine failed: " + r.error, "server_error", "", "engine_error", 0};
        return server.answer_error(context, *exchange, error, error.code);
      }
      json item = {{"object", "embedding"}, {"index", i}};
      if (request->base64) item["embedding"] = base64_floats(r.embedding);
      else item["embedding"] = r.embedding;
      data.push_back(std::move(item));
    }
    const json body = {{"object", "list"}, {"data", data}, {"model", server.options_.model_name}, {"system_fingerprint", version->label},
                       {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
    server.answer(context, *exchange, 200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace), "ok");
  }
};

// On a prepare thread: parse, check, tokenize; then admission on the strand.
void Server::prepare_embedding(const RequestContext& context, Version version, const std::string& body, std::shared_ptr<HttpExchange> exchange) {
  const ModelVersion& v = *version;
  auto fail = [&](const ApiError& error, const char* reason) {
    exchange->post([this, context, exchange, error, reason = std::string(reason)] { answer_error(context, *exchange, error, reason); });
  };
  auto parsed = parse_embedding_request(body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return fail(*error, "invalid");
  auto request = std::make_shared<EmbeddingRequest>(std::move(std::get<EmbeddingRequest>(parsed)));
  if (auto error = unknown_model(request->model)) return fail(*error, "model");
  if (request->dimensions && *request->dimensions != v.model->config().n_embd) {
    return fail(ApiError::invalid("dimensions", "this model's embeddings have " + std::to_string(v.model->config().n_embd) +
                                                    " dimensions; shortening them is not supported"),
                "invalid");
  }
  auto inputs = std::make_shared<std::vector<std::vector<int32_t>>>(request->token_lists);
  const GenerationParams params = embedding_params(options_.embedding_pooling, context.tenant, context.priority());
  // A text that can never fit is refused before it is tokenized (by its
  // byte length); the tokenized inputs are admitted on the strand (start_embedding).
  for (const std::string& text : request->texts) {
    if (const Admit admit = v.engine->admit_at_least(v.min_tokens(text), params); !admit.fits()) {
      return fail(admission_error(admit, "input"), admission_reason(admit));
    }
    inputs->push_back(v.tokenizer->encode(text, true, false));
  }
  for (const auto& tokens : *inputs) {
    for (const int32_t t : tokens) {
      if (t >= v.tokenizer->vocab().n_tokens()) return fail(ApiError::invalid("input", "token id " + std::to_string(t) + " is outside the vocabulary"), "invalid");
    }
  }
  exchange->post([this, context, version, request, inputs, exchange] { start_embedding(context, version, request, inputs, exchange); });
}

void Server::start_embedding(const RequestContext& context, Version version, std::shared_ptr<EmbeddingRequest> request,
                             std::shared_ptr<std::vector<std::vector<int32_t>>> inputs, std::shared_ptr<HttpExchange> exchange) {
  if (exchange->disconnected()) return log_access(context, 499, "client_gone");
  // Each input is its own engine request, admitted by the same rule as a generation's.
  const GenerationParams params = embedding_params(options_.embedding_pooling, context.tenant, context.priority());
  for (const auto& tokens : *inputs) {
    if (const Admit admit = version->engine->admit(tokens, params); !admit.fits()) {
      return answer_error(context, *exchange, admission_error(admit, "input"), admission_reason(admit));
    }
  }
  if (const Refusal full = enter(context); full != Refusal::none) {
    return answer_error(context, *exchange, in_flight_error(full), refusal_name(full));
  }
  ++version->in_flight;
  auto e = std::make_shared<Embedding>(*this, std::move(version), exchange, context, std::move(request));
  e->start(*inputs);
}

}  // namespace ds

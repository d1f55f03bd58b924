#pragma once
// OpenAI's Files and Batch APIs over the batch store (batch_store.h), for one
// tenant per call: POST /v1/files (multipart, purpose batch), GET /v1/files,
// GET and DELETE /v1/files/{id}, GET /v1/files/{id}/content; POST
// /v1/batches, GET /v1/batches, GET /v1/batches/{id}, POST
// /v1/batches/{id}/cancel. A batch's input file is checked line by line when
// the batch is created: a malformed line becomes that line's record in the
// error file, and the rest run. Unknown fields and query parameters are
// refused by name. Runs on a prepare thread (it reads files and parses JSONL).

#include <functional>
#include <optional>
#include <string>

#include "server/batch_store.h"
#include "server/http_server.h"

namespace ds {

struct StoreAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string reason = "ok";  // the access log's
};

class BatchApi {
 public:
  // `changed`: called when a batch is created or cancelled (the runner looks at once).
  // `tenant_max_bytes`: what one tenant may store (files and batch lines), 0 for no bound.
  BatchApi(BatchStore& store, std::function<void()> changed, int64_t tenant_max_bytes)
      : store_(store), changed_(std::move(changed)), tenant_max_bytes_(tenant_max_bytes) {}
  // `route`: the route's pattern ("/v1/files/{id}/content").
  StoreAnswer handle(const std::string& tenant, const HttpRequest& request, const std::string& route);

 private:
  StoreAnswer upload(const std::string& tenant, const HttpRequest& request);
  StoreAnswer create_batch(const std::string& tenant, const std::string& body);
  // A 413 when `adding` more bytes would take the tenant past its quota, else nullopt.
  std::optional<StoreAnswer> over_quota(const std::string& tenant, int64_t adding);

  BatchStore& store_;
  std::function<void()> changed_;
  int64_t tenant_max_bytes_;
};

// The routes it serves: whether `route` is one.
bool is_batch_api_route(const std::string& route);

}  // namespace ds

#include "server/batch_api.h"

#include <nlohmann/json.hpp>
#include <set>

#include "base/random_id.h"
#include "base/unix_time.h"
#include "server/api_error.h"
#include "server/multipart_form.h"
#include "server/url_query.h"

namespace ds {
namespace {

using json = nlohmann::json;

constexpr size_t k_max_lines = 50000;  // OpenAI's bound on a batch's requests
constexpr int64_t k_max_window_seconds = 24 * 3600;
const std::set<std::string> k_batch_endpoints = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

StoreAnswer error_answer(const ApiError& error, const char* reason) { return StoreAnswer{error.status, "application/json", error.json(), reason}; }
StoreAnswer invalid(const std::string& param, const std::string& message) { return error_answer(ApiError::invalid(param, message), "invalid"); }
StoreAnswer not_found(const std::string& what, const std::string& id) {
  return error_answer(ApiError{404, "no " + what + " '" + id.substr(0, 128) + "'", "invalid_request_error", "id", "not_found", 0}, "not_found");
}
StoreAnswer ok(const json& body) { return StoreAnswer{200, "application/json", dump(body), "ok"}; }

json time_or_null(int64_t t) { return t ? json(t) : json(nullptr); }
json id_or_null(const std::string& id) { return id.empty() ? json(nullptr) : json(id); }

json file_json(const StoredFile& f) {
  return {{"id", f.id}, {"object", "file"}, {"bytes", f.bytes}, {"created_at", f.created_at}, {"filename", f.filename},
          {"purpose", f.purpose}, {"status", "processed"}, {"expires_at", nullptr}, {"status_details", nullptr}};
}

json batch_json(const BatchRecord& b) {
  return {{"id", b.id}, {"object", "batch"}, {"endpoint", b.endpoint}, {"errors", nullptr}, {"input_file_id", b.input_file_id},
          {"completion_window", b.completion_window}, {"status", b.status}, {"output_file_id", id_or_null(b.output_file_id)},
          {"error_file_id", id_or_null(b.error_file_id)}, {"created_at", b.created_at}, {"in_progress_at", time_or_null(b.in_progress_at)},
          {"expires_at", b.expires_at}, {"finalizing_at", time_or_null(b.finalizing_at)}, {"completed_at", time_or_null(b.completed_at)},
          {"failed_at", nullptr}, {"expired_at", time_or_null(b.expired_at)}, {"cancelling_at", time_or_null(b.cancelling_at)},
          {"cancelled_at", time_or_null(b.cancelled_at)},
          {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
          {"metadata", json::parse(b.metadata_json, nullptr, false)}};
}

// The list's envelope, OpenAI's cursor pagination.
json list_json(const json& data, bool has_more) {
  return {{"object", "list"}, {"data", data}, {"first_id", data.empty() ? json() : data.front()["id"]},
          {"last_id", data.empty() ? json() : data.back()["id"]}, {"has_more", has_more}};
}

// The path's segment after "/v1/files/" or "/v1/batches/".
std::string id_in(const std::string& path, const std::string& prefix) {
  const std::string rest = path.substr(prefix.size());
  return rest.substr(0, rest.find('/'));
}

// A `limit` query parameter: absent gives `fallback`; else 1..max.
std::optional<int64_t> limit_of(const std::map<std::string, std::string>& query, int64_t fallback, int64_t max) {
  const auto it = query.find("limit");
  if (it == query.end()) return fallback;
  try {
    size_t used = 0;
    const long long n = std::stoll(it->second, &used);
    if (used == it->second.size() && n >= 1 && n <= max) return n;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// A completion_window: a duration of seconds, minutes or hours up to 24h ("24h" is OpenAI's only value).
std::optional<int64_t> window_seconds(const std::string& window) {
  if (window.size() < 2 || window.size() > 8) return std::nullopt;
  const char unit = window.back();
  const std::string digits = window.substr(0, window.size() - 1);
  if (digits[0] == '0' || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int64_t n = std::stoll(digits) * (unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : 0);
  if (n <= 0 || n > k_max_window_seconds) return std::nullopt;
  return n;
}

// One input line as a request to run, or the error record it becomes.
NewBatchLine check_line(const std::string& text, size_t number, const std::string& endpoint, std::set<std::string>& custom_ids,
                        const PendingLine& place) {
  NewBatchLine line;
  const auto fail = [&](const std::string& message) {
    const json record = {{"id", place.request_id()}, {"custom_id", line.custom_id.empty() ? json(nullptr) : json(line.custom_id)},
                         {"response", nullptr},
                         {"error", {{"code", "invalid_request"}, {"message", "line " + std::to_string(number) + ": " + message}}}};
    line.error_record = dump(record);
    return line;
  };
  const json parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) return fail("not valid JSON");
  if (!parsed.is_object()) return fail("not a JSON object");
  // First, so that the line's error record names it whatever else is wrong.
  if (!parsed.contains("custom_id") || !parsed["custom_id"].is_string() || parsed["custom_id"].get<std::string>().empty()) {
    return fail("'custom_id' must be a non-empty string");
  }
  line.custom_id = parsed["custom_id"].get<std::string>().substr(0, 512);
  if (!custom_ids.insert(line.custom_id).second) return fail("custom_id '" + line.custom_id + "' is not unique in the file");
  for (const auto& [key, value] : parsed.items()) {
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") return fail("unknown field '" + key + "'");
  }
  if (parsed.value("method", json()) != json("POST")) return fail("'method' must be \"POST\"");
  if (parsed.value("url", json()) != json(endpoint)) return fail("'url' must be the batch's endpoint, " + endpoint);
  if (!parsed.contains("body") || !parsed["body"].is_object()) return fail("'body' must be an object");
  if (parsed["body"].value("stream", false) == true) return fail("'body.stream' is not supported in a batch");
  line.body = dump(parsed["body"]);
  return line;
}

}  // namespace

bool is_batch_api_route(const std::string& route) { return route.rfind("/v1/files", 0) == 0 || route.rfind("/v1/batches", 0) == 0; }

StoreAnswer BatchApi::handle(const std::string& tenant, const HttpRequest& request, const std::string& route) {
  auto parsed_query = parse_url_query(request.target);
  if (!parsed_query.ok()) return invalid("query", parsed_query.message());
  const std::map<std::string, std::string>& query = parsed_query.value();
  const std::set<std::string> takes_query = route == "/v1/files" && request.method == "GET"     ? std::set<std::string>{"purpose", "limit", "order", "after"}
                                            : route == "/v1/batches" && request.method == "GET" ? std::set<std::string>{"limit", "after"}
                                                                                                : std::set<std::string>{};
  for (const auto& [name, value] : query) {
    if (!takes_query.count(name)) return invalid(name, "query parameter '" + name.substr(0, 64) + "' is not supported on " + request.method + " " + route);
  }
  const std::string path = request.path();
  if (route == "/v1/files") {
    if (request.method == "POST") return upload(tenant, request);
    const auto limit = limit_of(query, 10000, 10000);
    if (!limit) return invalid("limit", "limit must be an integer from 1 to 10000");
    const std::string order = query.count("order") ? query.at("order") : "desc";
    if (order != "asc" && order != "desc") return invalid("order", "order must be asc or desc");
    const std::string after = query.count("after") ? query.at("after") : "";
    const auto files = store_.list_files(tenant, query.count("purpose") ? query.at("purpose") : "", after, *limit + 1, order == "asc");
    json data = json::array();
    for (size_t i = 0; i < files.size() && int64_t(i) < *limit; ++i) data.push_back(file_json(files[i]));
    return ok(list_json(data, int64_t(files.size()) > *limit));
  }
  if (route == "/v1/files/{id}" || route == "/v1/files/{id}/content") {
    const std::string id = id_in(path, "/v1/files/");
    if (request.method == "DELETE") {
      if (!store_.remove_file(tenant, id)) return not_found("file", id);
      return ok(json{{"id", id}, {"object", "file"}, {"deleted", true}});
    }
    if (route == "/v1/files/{id}") {
      const auto f = store_.file(tenant, id);
      return f ? ok(file_json(*f)) : not_found("file", id);
    }
    const auto content = store_.file_content(tenant, id);
    if (!content) return not_found("file", id);
    return StoreAnswer{200, "application/octet-stream", *content, "ok"};
  }
  if (route == "/v1/batches") {
    if (request.method == "POST") return create_batch(tenant, request.body);
    const auto limit = limit_of(query, 20, 100);
    if (!limit) return invalid("limit", "limit must be an integer from 1 to 100");
    const auto batches = store_.list_batches(tenant, query.count("after") ? query.at("after") : "", *limit + 1);
    json data = json::array();
    for (size_t i = 0; i < batches.size() && int64_t(i) < *limit; ++i) data.push_back(batch_json(batches[i]));
    return ok(list_json(data, int64_t(batches.size()) > *limit));
  }
  const std::string id = id_in(path, "/v1/batches/");
  if (route == "/v1/batches/{id}/cancel") {
    const auto batch = store_.cancel(tenant, id, unix_seconds());
    if (!batch) return not_found("batch", id);
    if (batch->status != "cancelling") {
      return error_answer(ApiError{409, "batch '" + id + "' is " + batch->status + ": only an in_progress batch can be cancelled",
                                   "invalid_request_error", "", "conflict", 0}, "conflict");
    }
    changed_();
    return ok(batch_json(*batch));
  }
  const auto batch = store_.batch(tenant, id);
  return batch ? ok(batch_json(*batch)) : not_found("batch", id);
}

StoreAnswer BatchApi::upload(const std::string& tenant, const HttpRequest& request) {
  auto parts = parse_multipart_form(request.header("content-type"), request.body);
  if (!parts.ok()) return invalid("file", parts.message());
  const FormPart* file = nullptr;
  std::string purpose;
  for (const FormPart& part : parts.value()) {
    if (part.name == "purpose" && !part.is_file && purpose.empty()) {
      purpose = part.body;
    } else if (part.name == "file" && part.is_file && !file) {
      file = &part;
    } else {
      return invalid(part.name.substr(0, 64), "unknown or repeated form field '" + part.name.substr(0, 64) + "' (POST /v1/files takes purpose and file)");
    }
  }
  if (purpose.empty()) return invalid("purpose", "'purpose' is required");
  if (purpose != "batch") return invalid("purpose", "purpose '" + purpose.substr(0, 64) + "' is not supported by dsinfer (only batch is)");
  if (!file) return invalid("file", "'file' is required (a file part)");
  if (file->body.empty()) return invalid("file", "the file is empty");
  const std::string filename = file->filename.empty() ? "upload.jsonl" : file->filename.substr(0, 255);
  if (auto refused = over_quota(tenant, int64_t(file->body.size()))) return *refused;
  auto stored = store_.add_file(tenant, filename, purpose, file->body);
  if (!stored.ok()) return error_answer(ApiError{500, stored.message(), "server_error", "", "store_failed", 0}, "store_failed");
  return ok(file_json(stored.value()));
}

StoreAnswer BatchApi::create_batch(const std::string& tenant, const std::string& body) {
  const json request = json::parse(body, nullptr, false);
  if (request.is_discarded() || !request.is_object()) return invalid("", "the body must be a JSON object");
  for (const auto& [key, value] : request.items()) {
    if (key != "input_file_id" && key != "endpoint" && key != "completion_window" && key != "metadata") {
      return invalid(key, "unknown field '" + key + "' (POST /v1/batches takes input_file_id, endpoint, completion_window, metadata)");
    }
  }
  for (const char* field : {"input_file_id", "endpoint", "completion_window"}) {
    if (!request.contains(field) || !request[field].is_string()) return invalid(field, std::string("'") + field + "' is required (a string)");
  }
  const std::string endpoint = request["endpoint"], window = request["completion_window"], input = request["input_file_id"];
  if (!k_batch_endpoints.count(endpoint)) {
    return invalid("endpoint", "endpoint '" + endpoint.substr(0, 64) + "' is not supported (/v1/chat/completions, /v1/completions, "
                               "/v1/embeddings and /v1/responses are)");
  }
  const auto seconds = window_seconds(window);
  if (!seconds) return invalid("completion_window", "completion_window must be a duration up to 24h such as '24h' or '30m'");
  json metadata = request.value("metadata", json());
  if (!metadata.is_null()) {
    if (!metadata.is_object() || metadata.size() > 16) return invalid("metadata", "metadata must be an object of at most 16 keys");
    for (const auto& [key, value] : metadata.items()) {
      if (key.size() > 64 || !value.is_string() || value.get<std::string>().size() > 512) {
        return invalid("metadata", "metadata keys are strings of at most 64 characters, values strings of at most 512");
      }
    }
  }
  const auto file = store_.file(tenant, input);
  if (!file) return not_found("file", input);
  if (file->purpose != "batch") return invalid("input_file_id", "file '" + input + "' has purpose " + file->purpose + ", not batch");
  const auto content = store_.file_content(tenant, input);
  if (!content) return not_found("file", input);

  BatchRecord batch;
  batch.id = random_id("batch_");
  batch.endpoint = endpoint;
  batch.input_file_id = input;
  batch.completion_window = window;
  batch.status = "in_progress";
  batch.metadata_json = dump(metadata);
  batch.created_at = batch.in_progress_at = unix_seconds();
  batch.expires_at = batch.created_at + *seconds;
  std::vector<NewBatchLine> lines;
  std::set<std::string> custom_ids;
  size_t number = 0;
  for (size_t at = 0; at < content->size();) {
    const size_t end = std::min(content->find('\n', at), content->size());
    std::string text = content->substr(at, end - at);
    at = end + 1;
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry no request
    if (lines.size() == k_max_lines) return invalid("input_file_id", "the file has more than " + std::to_string(k_max_lines) + " requests");
    lines.push_back(check_line(text, number, endpoint, custom_ids, PendingLine{batch.id, tenant, endpoint, "", "", int64_t(lines.size())}));
  }
  if (lines.empty()) return invalid("input_file_id", "file '" + input + "' holds no request");
  if (auto refused = over_quota(tenant, int64_t(content->size()))) return *refused;  // the lines are stored again with the batch
  if (Status created = store_.create_batch(tenant, batch, lines); !created.ok()) {
    return error_answer(ApiError{500, created.message(), "server_error", "", "store_failed", 0}, "store_failed");
  }
  changed_();
  const auto stored = store_.batch(tenant, batch.id);
  return stored ? ok(batch_json(*stored)) : not_found("batch", batch.id);
}

std::optional<StoreAnswer> BatchApi::over_quota(const std::string& tenant, int64_t adding) {
  if (tenant_max_bytes_ <= 0) return std::nullopt;
  const int64_t used = store_.tenant_bytes(tenant);
  if (used + adding <= tenant_max_bytes_) return std::nullopt;
  return error_answer(ApiError{413,
                               "this tenant stores " + std::to_string(used) + " bytes of files and batches; " + std::to_string(adding) +
                                   " more would pass its quota of " + std::to_string(tenant_max_bytes_) +
                                   " (--store-tenant-max-bytes): delete files (DELETE /v1/files/{id}) first",
                               "invalid_request_error", "", "storage_quota_exceeded", 0},
                      "storage_quota_exceeded");
}

}  // namespace ds

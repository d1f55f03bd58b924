#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

namespace ds {
namespace {

// A transfer slower than this for this long is cut (and resumed by the caller).
constexpr long k_low_speed_bytes = 1024, k_low_speed_seconds = 30;
constexpr size_t k_max_error_body = 64 << 10;

struct Transfer {
  CURL* curl;
  HttpReply* reply;
  const HttpClient::Sink* sink;
  const std::function<void(int64_t)>* progress;
  size_t max_body;
  int64_t received = 0;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * count);
  // A new response (after a redirect) starts with its status line: the last one's headers go.
  if (line.rfind("HTTP/", 0) == 0) t->reply->headers.clear();
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * count;
  std::string name = line.substr(0, colon), value = line.substr(colon + 1);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  value.erase(value.begin(), std::find_if(value.begin(), value.end(), not_space));
  value.erase(std::find_if(value.rbegin(), value.rend(), not_space).base(), value.end());
  t->reply->headers[name] = value;
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  // A success's body goes to the sink; any other (an error page) is kept to explain the status.
  if (t->sink && (status == 200 || status == 206)) {
    if (!(*t->sink)(status, data, n)) return 0;
    t->received += int64_t(n);
    if (*t->progress) (*t->progress)(t->received);
    return n;
  }
  const size_t limit = t->sink ? k_max_error_body : t->max_body;
  if (t->reply->body.size() + n > limit) return 0;
  t->reply->body.append(data, n);
  return n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

std::string HttpReply::header(const std::string& name) const {
  const auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

HttpClient::HttpClient(std::vector<std::string> headers) : headers_(std::move(headers)) {
  global_init();
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpReply HttpClient::get(const std::string& url, size_t max_body) { return perform(url, 0, nullptr, nullptr, max_body); }

HttpReply HttpClient::download(const std::string& url, int64_t offset, const Sink& sink, const std::function<void(int64_t)>& progress) {
  return perform(url, offset, sink, progress, 0);
}

HttpReply HttpClient::perform(const std::string& url, int64_t offset, const Sink& sink, const std::function<void(int64_t)>& progress,
                              size_t max_body) {
  HttpReply reply;
  auto* curl = static_cast<CURL*>(curl_);
  if (!curl) {
    reply.transport_error = "libcurl could not start";
    return reply;
  }
  curl_easy_reset(curl);
  Transfer transfer{curl, &reply, sink ? &sink : nullptr, &progress, max_body};
  curl_slist* list = nullptr;
  for (const std::string& h : headers_) list = curl_slist_append(list, h.c_str());
  const std::string range = std::to_string(offset) + "-";
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 15L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, k_low_speed_bytes);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, k_low_speed_seconds);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "dsinfer");
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  // The system's CA store, unless a bundle is named (a mirror behind a private CA), as Python's clients honour it.
  for (const char* variable : {"CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
    const char* bundle = std::getenv(variable);
    if (bundle && *bundle) {
      curl_easy_setopt(curl, CURLOPT_CAINFO, bundle);
      break;
    }
  }
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(list);
  if (code != CURLE_OK) reply.transport_error = error[0] ? error : curl_easy_strerror(code);
  return reply;
}

}  // namespace ds

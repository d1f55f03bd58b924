#include "hub/hub_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/fd_io.h"
#include "base/log.h"
#include "hub/file_digest.h"
#include "hub/hub_reference.h"

namespace ds {
namespace {

using json = nlohmann::json;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::vector<std::string> request_headers(const HubClientOptions& options) {
  std::vector<std::string> headers = {"Accept-Encoding: identity"};  // sizes and ranges are of the file's own bytes
  if (!options.token.empty()) headers.push_back("Authorization: Bearer " + options.token);
  return headers;
}

// Each path segment escaped, the slashes between them kept.
std::string escape_path(const std::string& path, bool keep_slashes) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t end = keep_slashes ? path.find('/', start) : std::string::npos;
    const std::string segment = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    char* escaped = curl_easy_escape(nullptr, segment.c_str(), int(segment.size()));
    out += escaped ? escaped : "";
    curl_free(escaped);
    if (end == std::string::npos) return out;
    out += '/';
    start = end + 1;
  }
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
}

}  // namespace

HubClientOptions HubClientOptions::from_environment() {
  HubClientOptions options;
  if (!env("HF_ENDPOINT").empty()) options.endpoint = env("HF_ENDPOINT");
  while (!options.endpoint.empty() && options.endpoint.back() == '/') options.endpoint.pop_back();
  options.token = !env("HF_TOKEN").empty() ? env("HF_TOKEN") : env("HUGGING_FACE_HUB_TOKEN");
  return options;
}

HubClient::HubClient(HubClientOptions options) : options_(std::move(options)), http_(request_headers(options_)) {}

std::string HubClient::failure(const HttpReply& reply, const std::string& what) const {
  if (!reply.transport_error.empty()) {
    return "cannot reach the hub at " + options_.endpoint + " for " + what + ": " + reply.transport_error +
           " (offline? HF_HUB_OFFLINE=1 uses the cache only; HF_ENDPOINT names another hub)";
  }
  switch (reply.status) {
    case 200:
    case 206:
      return "";
    case 401:
      return "401 Unauthorized for " + what +
             (options_.token.empty() ? ": it needs a token, and HF_TOKEN is not set" : ": the hub did not accept HF_TOKEN");
    case 403:
      return "403 Forbidden for " + what + ": access is gated or not granted to this token (accept the model's terms on the hub)";
    case 404:
      return "404 Not Found: " + what + " does not exist" + (options_.token.empty() ? " (or is private: set HF_TOKEN)" : "");
    case 429:
      return "429 Too Many Requests for " + what + ": the hub is limiting this client's rate; try again later";
    default:
      return "the hub answered " + std::to_string(reply.status) + " for " + what;
  }
}

double HubClient::retry_delay(const HttpReply& reply, int attempt, bool made_progress) const {
  if (attempt + 1 >= options_.max_attempts) return -1;
  const double backoff = std::min(30.0, std::pow(2.0, attempt));
  if (!reply.transport_error.empty()) {
    // A cut mid-transfer is resumed at once; a hub that cannot be reached at all gets one more try.
    if (made_progress) return 0;
    return attempt == 0 ? 1 : -1;
  }
  if (reply.status == 429) {
    const std::string after = reply.header("retry-after");
    if (after.empty()) return backoff;
    char* end = nullptr;
    double seconds = std::strtod(after.c_str(), &end);
    if (end == after.c_str() || *end != '\0') {  // an HTTP date
      const time_t when = curl_getdate(after.c_str(), nullptr);
      seconds = when < 0 ? backoff : double(when - time(nullptr));
    }
    seconds = std::max(seconds, 0.0);
    return seconds <= options_.max_retry_after_seconds ? seconds : -1;
  }
  return reply.status >= 500 ? backoff : -1;
}

Result<RepoRevision> HubClient::revision(const std::string& repo, const std::string& revision) {
  const std::string url = options_.endpoint + "/api/models/" + escape_path(repo, true) + "/revision/" + escape_path(revision, false) + "?blobs=true";
  const std::string what = repo + " at revision " + revision;
  HttpReply reply;
  for (int attempt = 0;; ++attempt) {
    reply = http_.get(url);
    if (failure(reply, what).empty()) break;
    const double delay = retry_delay(reply, attempt, false);
    if (delay < 0) return Status::error(failure(reply, what));
    DS_LOG_INFO("pull: %s; trying again in %.0f s", failure(reply, what).c_str(), delay);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  }
  const json info = json::parse(reply.body, nullptr, false);
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() || !info.contains("siblings") || !info["siblings"].is_array()) {
    return Status::error("the hub's answer for " + what + " is not a model's information (no sha or siblings)");
  }
  RepoRevision out;
  out.commit = info["sha"];
  if (out.commit.size() != 40 || !FileDigest::kind_of(out.commit).ok()) return Status::error("the hub's commit for " + what + " is not a commit hash");
  for (const json& sibling : info["siblings"]) {
    HubFile file;
    if (!sibling.is_object() || !sibling.contains("rfilename") || !sibling["rfilename"].is_string()) continue;
    file.name = sibling["rfilename"];
    if (!is_repository_file(file.name)) return Status::error("the hub's file list for " + what + " names '" + file.name + "', not a file inside a repository");
    const json lfs = sibling.value("lfs", json());
    if (lfs.is_object() && lfs.contains("sha256") && lfs["sha256"].is_string()) {
      file.hash = lfs["sha256"];
      file.size = lfs.value("size", int64_t(-1));
    } else {
      file.hash = sibling.value("blobId", std::string());
      file.size = sibling.value("size", int64_t(-1));
    }
    if (!FileDigest::kind_of(file.hash).ok() || file.size < 0) {
      return Status::error("the hub gave no size or hash for " + repo + "/" + file.name + " (a hub without ?blobs=true?)");
    }
    out.files.push_back(std::move(file));
  }
  return out;
}

Status HubClient::download(const std::string& repo, const std::string& commit, const HubFile& file, const std::string& partial,
                           const std::function<void(int64_t done)>& progress) {
  auto kind = FileDigest::kind_of(file.hash);
  if (!kind.ok()) return kind.status();
  const std::string url = options_.endpoint + "/" + escape_path(repo, true) + "/resolve/" + commit + "/" + escape_path(file.name, true);
  const std::string what = repo + "/" + file.name;
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(partial + ": " + std::strerror(errno));
  int64_t have = std::min(file_size(partial), file.size);
  if (::ftruncate(fd, have) != 0 || ::lseek(fd, have, SEEK_SET) < 0) {
    ::close(fd);
    return Status::error(partial + ": " + std::strerror(errno));
  }
  bool write_failed = false;
  for (int attempt = 0; have < file.size; ++attempt) {
    const int64_t before = have;
    bool first = true;
    const HttpReply reply = http_.download(
        url, have,
        [&](long status, const char* data, size_t n) {
          // A 200 to a Range request is the whole file again: it is written from byte 0.
          if (first && status == 200 && have > 0) {
            if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) < 0) {
              write_failed = true;
              return false;
            }
            have = 0;
          }
          first = false;
          if (!write_fully(fd, data, n)) {
            write_failed = true;
            return false;
          }
          have += int64_t(n);
          return have <= file.size;
        },
        [&](int64_t) {
          if (progress) progress(have);
        });
    if (write_failed) {
      ::close(fd);
      return Status::error("cannot write " + partial + ": " + std::strerror(errno));
    }
    if (have > file.size) break;  // more than the hub said: caught by the checks below
    if (failure(reply, what).empty()) continue;
    const double delay = retry_delay(reply, attempt, have != before);
    if (delay < 0) {
      ::close(fd);
      return Status::error(failure(reply, what) + (have > 0 ? " (" + std::to_string(have) + " bytes kept in " + partial + " for the next pull)" : ""));
    }
    DS_LOG_INFO("pull: %s after %lld bytes; resuming in %.0f s", failure(reply, what).c_str(), (long long)have, delay);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return Status::error("cannot sync " + partial + ": " + std::strerror(errno));
  FileDigest digest(kind.value(), file.size);
  const Status hashed = digest.update_from_file(partial, file.size);
  const std::string got = hashed.ok() && file_size(partial) == file.size ? digest.hex() : "";
  if (got != file.hash) {
    ::unlink(partial.c_str());
    return Status::error(what + ": the downloaded bytes do not match the hub's " +
                         (kind.value() == FileDigest::Kind::sha256 ? "SHA-256 " : "git hash ") + file.hash +
                         (got.empty() ? " (size " + std::to_string(file_size(partial)) + ", expected " + std::to_string(file.size) + ")" : " (got " + got + ")") +
                         ": the download was removed and not used; pull again");
  }
  return Status();
}

}  // namespace ds

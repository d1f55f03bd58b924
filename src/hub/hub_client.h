#pragma once
// The Hugging Face hub's HTTP API, as huggingface_hub speaks it: a
// revision's commit and files (`/api/models/REPO/revision/REV?blobs=true`:
// each file's size and hash) and a file's bytes (`/REPO/resolve/COMMIT/FILE`).
// A download resumes with Range after a cut; when whole, its bytes are read
// back from the disk and hashed (what is checked is what was written) against
// the hub's hash. 429s wait their Retry-After; a
// cut or a 5xx is tried again a few times; 401, 403 and 404 are errors that
// say what to do.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/http_client.h"

namespace ds {

struct HubFile {
  std::string name;  // relative to the repository
  int64_t size = 0;
  std::string hash;  // an LFS file's SHA-256, else its git blob SHA-1: the cache's blob name
};

struct RepoRevision {
  std::string commit;
  std::vector<HubFile> files;
};

struct HubClientOptions {
  std::string endpoint = "https://huggingface.co";
  std::string token;
  int max_attempts = 6;                  // per request, for 429s, 5xx and cuts
  double max_retry_after_seconds = 300;  // a longer Retry-After is an error, not a wait
  // HF_ENDPOINT and HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), when set.
  static HubClientOptions from_environment();
};

class HubClient {
 public:
  explicit HubClient(HubClientOptions options);

  Result<RepoRevision> revision(const std::string& repo, const std::string& revision);
  // The file's bytes into `partial`, resumed from what is there; its size
  // and hash checked. A partial that fails the check is removed.
  Status download(const std::string& repo, const std::string& commit, const HubFile& file, const std::string& partial,
                  const std::function<void(int64_t done)>& progress);

  const HubClientOptions& options() const { return options_; }

 private:
  // Why a reply failed, for a person; "" for a success.
  std::string failure(const HttpReply& reply, const std::string& what) const;
  // Whether a failed reply is worth another try, and after how many seconds (-1: not).
  double retry_delay(const HttpReply& reply, int attempt, bool made_progress) const;

  HubClientOptions options_;
  HttpClient http_;
};

}  // namespace ds

#pragma once
// `dsinfer pull`: a model's files from the hub into the hub cache, or found
// there. A reference's selector picks the files: a file's name, or a
// quantization (Q4_K_M) matched against the GGUF files' names, or nothing
// (the repository's Q4_K_M GGUF, else its only GGUF), or "*": a Hugging Face
// checkpoint's files for `dsinfer convert` (config.json, the safetensors and
// their index, the tokenizer's files, top level only). A split GGUF
// (NAME-00001-of-0000N.gguf) brings all its parts. A file already in the
// snapshot, or whose blob is there, is not downloaded again; a blob is
// renamed into place only after its hash matches. With HF_HUB_OFFLINE=1 or a
// hub that cannot be reached, a revision already in the cache is used as it is.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/hub_client.h"
#include "hub/hub_reference.h"

namespace ds {

struct PullObserver {
  // A file starts downloading (size bytes); its progress; it is done.
  std::function<void(const std::string& file, int64_t size)> started;
  std::function<void(int64_t done)> progress;
  std::function<void(const std::string& file, bool downloaded)> finished;  // downloaded: false when the cache had it
};

struct PulledModel {
  std::string commit;
  std::string snapshot;  // the revision's folder in the cache
  std::vector<std::string> paths;  // the selected files in the snapshot; the first is the one to open
  int64_t downloaded_bytes = 0;
};

struct PullOptions {
  std::string cache_root;  // HubCache::default_root() unless set
  bool offline = false;    // HF_HUB_OFFLINE: the cache only
  static PullOptions from_environment();
};

constexpr const char* k_checkpoint_selector = "*";

Result<PulledModel> pull_model(const HubReference& reference, HubClient& client, const PullOptions& options, const PullObserver& observer);

// The files a selector picks among a revision's (for the tests and the error messages).
Result<std::vector<std::string>> select_files(const std::vector<std::string>& names, const std::string& selector);

}  // namespace ds

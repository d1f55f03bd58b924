#pragma once
// How a user names a model on the hub: `OWNER/NAME[:FILE or :QUANT]` for
// `dsinfer pull` (a file name, or a quantization such as Q4_K_M matched
// against the repository's GGUF files), and `hf://OWNER/NAME[@REVISION]/FILE`
// wherever a command takes a model file.

#include <string>

#include "base/status.h"

namespace ds {

struct HubReference {
  std::string repo;      // OWNER/NAME
  std::string selector;  // a file name, a quantization, or "" for the repository's default
  std::string revision = "main";
};

// `OWNER/NAME[:SELECTOR]`.
Result<HubReference> parse_hub_reference(const std::string& text);
// Whether a model argument names a hub file rather than a local path.
bool is_hub_url(const std::string& text);
// `hf://OWNER/NAME[@REVISION]/FILE`.
Result<HubReference> parse_hub_url(const std::string& text);
// `hf://OWNER/NAME[@REVISION]`: a whole repository (a checkpoint to convert); selector empty.
Result<HubReference> parse_hub_repository_url(const std::string& text);
// Whether a name is a file inside a repository, and so inside the cache's
// snapshot (relative, no "." or ".." segments): the hub's file names are checked too.
bool is_repository_file(const std::string& name);

}  // namespace ds

#pragma once
// Where a command's model comes from: a local GGUF path as it is, or
// `hf://OWNER/NAME[@REVISION]/FILE`, pulled into the hub cache (or found
// there) with a progress bar on stderr, then opened from the cache.

#include <string>

#include "base/status.h"
#include "hub/hub_reference.h"
#include "hub/model_pull.h"

namespace ds {

// The local path of a model argument.
Result<std::string> model_source_path(const std::string& argument);
// A pull with progress on stderr (a bar on a terminal, a line per file otherwise).
Result<PulledModel> pull_with_progress(const HubReference& reference);

}  // namespace ds

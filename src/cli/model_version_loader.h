#pragma once
// How serve makes a model version: its flags (the instance's own, and for a
// swap the admin request's fields over them: "ctx_size": 2048 is --ctx-size
// 2048, "no_mmap": true is --no-mmap, false drops a flag) to a loaded,
// warmed and checked ModelVersion, with the time each phase took.

#include <set>
#include <string>

#include "cli/args.h"
#include "server/admin_api.h"

namespace ds {

// serve's options that shape a version, beyond -m: those of model_options.h,
// --chat-template, --tool-call-format, --max-num-seqs, --max-num-batched-tokens.
std::set<std::string> version_value_options();
// ...and its flags: --no-mmap, --no-repack, --no-prefix-cache.
std::set<std::string> version_flags();

// Loads versions from `serve_args` (copied), with a request's fields over them.
ModelLoader model_version_loader(const Args& serve_args);

}  // namespace ds

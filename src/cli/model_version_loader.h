#pragma once
// How serve makes a model version: its flags (the instance's own, and for a
// swap the admin request's fields over them: "ctx_size": 2048 is --ctx-size
// 2048, "no_mmap": true is --no-mmap, false drops a flag) to a loaded,
// warmed and checked ModelVersion, with the time each phase took.

#include <set>
#include <string>

#include "cli/args.h"
#include "parallel/collective.h"
#include "server/admin_api.h"

namespace ds {

// serve's options that shape a version: those of model_options.h (the model,
// speculation), --chat-template, --tool-call-format, --max-num-seqs,
// --max-num-batched-tokens, --no-prefix-cache. A swap's request sets any of
// them but --model by its long name in snake case (threads, no_mmap).
OptionTable version_option_table();

// Loads versions from `serve_args` (copied), with a request's fields over
// them; `ranks`: split across them (tensor parallel), this process rank 0.
ModelLoader model_version_loader(const Args& serve_args, Collective* ranks = nullptr);
// Tensor parallel's other ranks: `request`'s version as rank 0 loads it (its
// part of the model, pages like rank 0's), following rank 0's steps until it ends.
Status follow_version(const Args& serve_args, const ModelLoadRequest& request, Collective& ranks);

}  // namespace ds

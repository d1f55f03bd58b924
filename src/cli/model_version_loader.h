#pragma once
// How serve makes a model version: its flags (the instance's own, and for a
// swap the admin request's fields over them: "ctx_size": 2048 is --ctx-size
// 2048, "no_mmap": true is --no-mmap, false drops a flag) to a loaded,
// warmed and checked ModelVersion, with the time each phase took.

#include <set>
#include <string>

#include "cli/args.h"
#include "engine/step_broadcast.h"
#include "parallel/collective.h"
#include "server/admin_api.h"

namespace ds {

// serve's options that shape a version: those of model_options.h (the model,
// speculation), --chat-template, --tool-call-format, --max-num-seqs,
// --max-num-batched-tokens, --no-prefix-cache. A swap's request sets any of
// them but --model by its long name in snake case (threads, no_mmap).
OptionTable version_option_table();

// Loads versions from `serve_args` (copied), with a request's fields over
// them; `ranks`: split across the ranks that `ranks` sends to (tensor
// parallel), this process rank 0: each version is loaded on every rank, and
// is not offered until every rank has it. The first version is loaded with
// nothing running beside it (StepSender::load's in_turn).
ModelLoader model_version_loader(const Args& serve_args, StepSender* ranks = nullptr);
// Tensor parallel's other ranks: the versions rank 0 loads (their parts of the
// models, pages like rank 0's), following rank 0's steps until it ends.
Status follow_served_versions(const Args& serve_args, Collective& ranks);

}  // namespace ds

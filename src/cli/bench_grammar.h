#pragma once
// `dsinfer bench --json-schema FILE`: what constrained decoding costs per
// token beside the decode step it rides on. One sequence generates under the
// schema's grammar (sampled, a new seed per repetition), then the same number
// of tokens unconstrained; prints the vocabulary trie's size and build time,
// the decode step time, and the mask time per token, first repetition (every
// state new) and all (states cached across repetitions, as a server reuses them).

#include "cli/args.h"
#include "cli/model_options.h"

namespace ds {

int run_grammar_bench(const Args& args, CommonModelOptions options);

}  // namespace ds

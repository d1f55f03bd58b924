#pragma once
// `dsinfer bench --concurrency C`: offline serving throughput. N requests with
// given prompt and output lengths run through the engine with at most C in
// flight; prints request throughput, output tokens/s, TTFT and TPOT percentiles.
// With a drafter (--speculative-ngram, --draft-model, --speculative-mtp) the same requests are
// served without one first, for the speedup and the check that the greedy
// outputs are the same. With --kv-disk-dir the requests are computed (their
// pages written to the tier), then served again by a fresh engine whose
// prompts come back from the tier: TTFT both ways, and the same check.
// Under --tensor-parallel (`ranks`, options.model split across them) rank 0
// runs all of this and the other ranks follow its steps.

#include "cli/args.h"
#include "cli/model_options.h"

namespace ds {

int run_throughput_bench(const Args& args, CommonModelOptions options, Collective* ranks);

}  // namespace ds

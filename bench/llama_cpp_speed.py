"""llama.cpp's prompt-processing and generation speed through llama-cpp-python,
measured the way `dsinfer bench` measures dsinfer (pp: N tokens in one batch;
tg: N single-token decode steps), each after a context of -d tokens (filled
untimed before every repetition, as llama-bench does). With --parallel S: S sequences prefilled
(--prompt-len tokens each), then decoded together, one token of each per
llama_decode, for --gen-len steps: "batched" is the decode steps' tokens/s,
as `dsinfer bench --concurrency S` reports its decode-only steps. Prints one JSON line."""

import argparse
import json
import random
import time

import llama_cpp


def measure(model, n_prompt, n_gen, repetitions, threads, mmap, depth=0, flash_attn=False):
    batch = max(n_prompt, 512 if depth else 1)  # the fill in micro-batches of 512, as dsinfer bench's
    llm = llama_cpp.Llama(model_path=model, n_ctx=depth + max(n_prompt, n_gen) + 16, n_batch=batch, n_ubatch=batch,
                          n_threads=threads, n_threads_batch=threads, use_mmap=mmap, flash_attn=flash_attn, verbose=False)
    rng = random.Random(1)
    vocab = llm.n_vocab()
    llm.eval([rng.randrange(vocab)])  # warm-up, as dsinfer bench does

    def start_at_depth():
        llm.reset()
        if depth:
            llm.eval([rng.randrange(vocab) for _ in range(depth)])

    result = {}
    if n_prompt:
        rates = []
        for _ in range(repetitions):
            start_at_depth()
            tokens = [rng.randrange(vocab) for _ in range(n_prompt)]
            start = time.perf_counter()
            llm.eval(tokens)
            rates.append(n_prompt / (time.perf_counter() - start))
        result["pp"] = sum(rates) / len(rates)
    if n_gen:
        rates = []
        for _ in range(repetitions):
            start_at_depth()
            start = time.perf_counter()
            for _ in range(n_gen):
                llm.eval([rng.randrange(vocab)])
            rates.append(n_gen / (time.perf_counter() - start))
        result["tg"] = sum(rates) / len(rates)
    llm.close()
    return result


def measure_batched(model, streams, prompt_len, gen_len, threads):
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    lmodel = llama_cpp.llama_model_load_from_file(model.encode(), mparams)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = streams * (prompt_len + gen_len + 8)
    cparams.n_batch = cparams.n_ubatch = max(streams * prompt_len, streams)
    cparams.n_seq_max = streams
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(lmodel, cparams)
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(lmodel))
    rng = random.Random(1)
    batch = llama_cpp.llama_batch_init(max(streams * prompt_len, streams), 0, streams)

    def decode(entries):  # (token, position, sequence) each, every one wanting logits
        batch.n_tokens = len(entries)
        for i, (token, pos, seq) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, True
            batch.seq_id[i][0] = seq
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    decode([(rng.randrange(vocab), p, s) for s in range(streams) for p in range(prompt_len)])
    start = time.perf_counter()
    for step in range(gen_len):
        decode([(rng.randrange(vocab), prompt_len + step, s) for s in range(streams)])
    rate = streams * gen_len / (time.perf_counter() - start)
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(lmodel)
    return {"batched": rate}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-d", type=int, default=0, help="context depth before each test")
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("--flash-attn", action="store_true")
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--no-mmap", action="store_true")
    parser.add_argument("--parallel", type=int, default=0, help="batched decode of this many sequences instead")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--gen-len", type=int, default=64)
    args = parser.parse_args()
    if args.parallel:
        print(json.dumps(measure_batched(args.model, args.parallel, args.prompt_len, args.gen_len, args.t)))
    else:
        print(json.dumps(measure(args.model, args.p, args.n, args.r, args.t, not args.no_mmap, args.d, args.flash_attn)))


if __name__ == "__main__":
    main()

"""llama.cpp's prompt-processing and generation speed through llama-cpp-python,
measured the way `dsinfer bench` measures dsinfer (pp: N tokens in one batch;
tg: N single-token decode steps). Prints one JSON line."""

import argparse
import json
import random
import time

import llama_cpp


def measure(model, n_prompt, n_gen, repetitions, threads, mmap):
    llm = llama_cpp.Llama(model_path=model, n_ctx=max(n_prompt, n_gen) + 16, n_batch=max(n_prompt, 1),
                          n_ubatch=max(n_prompt, 1), n_threads=threads, n_threads_batch=threads, use_mmap=mmap,
                          verbose=False)
    rng = random.Random(1)
    vocab = llm.n_vocab()
    llm.eval([rng.randrange(vocab)])  # warm-up, as dsinfer bench does
    result = {}
    if n_prompt:
        rates = []
        for _ in range(repetitions):
            llm.reset()
            tokens = [rng.randrange(vocab) for _ in range(n_prompt)]
            start = time.perf_counter()
            llm.eval(tokens)
            rates.append(n_prompt / (time.perf_counter() - start))
        result["pp"] = sum(rates) / len(rates)
    if n_gen:
        rates = []
        for _ in range(repetitions):
            llm.reset()
            start = time.perf_counter()
            for _ in range(n_gen):
                llm.eval([rng.randrange(vocab)])
            rates.append(n_gen / (time.perf_counter() - start))
        result["tg"] = sum(rates) / len(rates)
    llm.close()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--no-mmap", action="store_true")
    args = parser.parse_args()
    print(json.dumps(measure(args.model, args.p, args.n, args.r, args.t, not args.no_mmap)))


if __name__ == "__main__":
    main()

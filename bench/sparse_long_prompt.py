"""A long prompt on the sparse-attention families, up to 128K tokens: the KV
memory the sequence holds beside `dsinfer info`'s arithmetic for its length,
the prompt's time and the decode speed after it (`dsinfer run`'s own report).

--model v4 (the default): random weights at DeepSeek-V4-Flash's attention
widths (make_deepseek4.V4_FLASH_WIDTHS: d 4096, 64 heads of 512, q LoRA 1024,
8 output groups of 1024, a window of 128, the indexer's 64 heads of 128
keeping 512 rows) with two layers, one compressing by 4 and one by 128, 4
experts of 512 (2 used), Q8_0, V4's context of 1,048,576 with YaRN x16 over
65,536. --model v32: bench_vs_llama_cpp.py --v32's model (DeepSeek-V3.2's
attention widths: d 7168, 128 heads, q LoRA 1536, kv LoRA 512, the indexer's
64 heads of 128 choosing 2,048 positions; 2 layers, Q8_0, a context of
65,536 in its metadata, while its YaRN, x40 over 4,096 as V3.2's, reaches
163,840: `run -c` goes past the former as llama.cpp's does). DeepSeek's
102,400-token vocabulary. The prompt: "hello world"
repeated to the length asked for.

--llama-cpp runs the same prompt through llama.cpp (llama-cpp-python's
library, or LLAMA_CPP_LIB_PATH's) after dsinfer, in micro-batches of 512 as
llama-server does, then 16 greedy tokens: its prompt time and decode speed
beside dsinfer's, and the ratios. Its attention over the compressed rows
(V4) or the cached positions (V3.2) is dense and masked, a cost that grows
with the square of the prompt: at 131,072 tokens hours on two cores, so
shorter prompts measure the trend.

Usage: python3 bench/sparse_long_prompt.py [--model v4|v32] [--models DIR] [-p 131072] [--kv-page-tokens N
       (default: the model's)] [--llama-cpp]
"""

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_vs_llama_cpp import ensure_v32_models  # noqa: E402
from make_deepseek4 import V4_FLASH_WIDTHS, write_deepseek4  # noqa: E402
from make_model import FIXTURES  # noqa: E402

VOCAB = os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf")


def ensure_v4_model(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "deepseek4_widths2_ctx1m_q8_0.gguf")
    if not os.path.exists(path):
        print(f"writing {path} (random weights, DeepSeek-V4-Flash attention widths, 2 layers)", file=sys.stderr)
        write_deepseek4(path + ".partial", dtype="q8_0", seed=0, n_ctx=1048576, yarn=(16.0, 65536), vocab_path=VOCAB,
                        **dict(V4_FLASH_WIDTHS, ratios=[4, 128], n_expert=4, n_expert_used=2, expert_ff=512))
        os.replace(path + ".partial", path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["v4", "v32"], default="v4")
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-p", type=int, default=131072, help="the prompt's length in tokens, at least")
    parser.add_argument("--kv-page-tokens", type=int)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--llama-cpp", action="store_true", help="the same prompt through llama.cpp after dsinfer")
    args = parser.parse_args()
    model = ensure_v4_model(args.models) if args.model == "v4" else ensure_v32_models(args.models)["Q8_0"]
    prompt = os.path.join(args.models, f"hello_world_{args.p}.txt")
    with open(prompt, "w") as f:  # two tokens a repetition in DeepSeek's vocabulary
        f.write(" ".join(["hello world"] * (args.p // 2 + 64)))
    result = subprocess.run([args.dsinfer, "run", "-m", model, "-f", prompt, "-n", "16", "--temp", "0", "--ignore-eos",
                             "-c", str(args.p + 1024), "-t", str(args.t),
                             *(("--kv-page-tokens", str(args.kv_page_tokens)) if args.kv_page_tokens else ())],
                            capture_output=True, text=True, check=True)
    report = {k: re.search(rf"^{k}.*$", result.stderr, re.M).group(0) for k in ("prompt:", "generation:", "kv held")}
    for line in report.values():
        print(line)
    if args.llama_cpp:
        with open(prompt) as f:
            peer = llama_cpp_run(model, f.read(), args.p + 1024, args.t, 16)
        rate = {k: float(re.search(rf"^{k} .* ([0-9.]+) tokens/s", result.stderr, re.M).group(1)) for k in ("prompt:", "generation:")}
        peer_prompt, peer_generation = peer["prompt_tokens"] / peer["prompt_s"], 16 / peer["generation_s"]
        print(f"llama.cpp prompt: {peer['prompt_tokens']} tokens in {peer['prompt_s']:.3f} s, {peer_prompt:.2f} tokens/s")
        print(f"llama.cpp generation: 16 tokens in {peer['generation_s']:.3f} s, {peer_generation:.2f} tokens/s")
        print(f"dsinfer / llama.cpp (tokens/s): prompt {rate['prompt:'] / peer_prompt:.2f}x, "
              f"generation after it {rate['generation:'] / peer_generation:.2f}x")


def llama_cpp_run(model, text, n_ctx, threads, n_gen):
    """The prompt in micro-batches of 512, then n_gen greedy tokens, timed."""
    import llama_cpp
    import numpy as np
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    tokens = llm.tokenize(text.encode())
    start = time.perf_counter()
    llm.eval(tokens)
    prompt_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n_gen):
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        llm.eval([int(np.argmax(logits))])
    generation_s = time.perf_counter() - start
    llm.close()
    return {"prompt_tokens": len(tokens), "prompt_s": prompt_s, "generation_s": generation_s}


if __name__ == "__main__":
    main()

"""A 128K-token prompt on a DeepSeek-V4-shaped model: the KV memory the
sequence holds beside `dsinfer info`'s arithmetic for its length, the prompt's
time and the decode speed after it (`dsinfer run`'s own report).

The model: random weights at DeepSeek-V4-Flash's attention widths
(make_deepseek4.V4_FLASH_WIDTHS: d 4096, 64 heads of 512, q LoRA 1024, 8 output
groups of 1024, a window of 128, the indexer's 64 heads of 128 keeping 512
rows) with two layers, one compressing by 4 and one by 128, 4 experts of 512
(2 used), Q8_0, V4's context of 1,048,576 with YaRN x16 over 65,536;
DeepSeek's 102,400-token vocabulary. The prompt: "hello world" repeated to the
length asked for. No llama.cpp beside it: its dense, masked attention over
131,072 positions takes hours on two cores.

Usage: python3 bench/v4_long_prompt_memory.py [--models DIR] [-p 131072] [--kv-page-tokens N (default: the model's, 64)]
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

from make_deepseek4 import V4_FLASH_WIDTHS, write_deepseek4  # noqa: E402
from make_model import FIXTURES  # noqa: E402

VOCAB = os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf")


def ensure_model(directory):
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
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-p", type=int, default=131072, help="the prompt's length in tokens, at least")
    parser.add_argument("--kv-page-tokens", type=int)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    model = ensure_model(args.models)
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


if __name__ == "__main__":
    main()

"""What the profiler costs: `dsinfer bench --concurrency C` on the same model
and requests with the profiler off (every step still bracketed, as serve
does) and recording every step (`--trace`), alternating runs; prints output
tokens/s of each and their ratio, and where the traced time went.

Usage: python3 bench/trace_overhead.py [--model M] [-c 8] [--requests 16] [--gen-len 64] [-r 3] [-t 2]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_vs_llama_cpp import ensure_models, machine  # noqa: E402


def tokens_per_second(binary, model, args, trace=None):
    command = [binary, "bench", "-m", model, "--concurrency", str(args.c), "--requests", str(args.requests),
               "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len), "-t", str(args.t)]
    out = subprocess.run(command + (["--trace", trace] if trace else []), capture_output=True, text=True, check=True).stdout
    return float(re.search(r"^output tokens/s: ([0-9.]+)", out, re.M).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GGUF file (default: the 1.1B Q8_0 benchmark model, written if absent)")
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-c", type=int, default=8)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    model = args.model or ensure_models(os.path.join(ROOT, "models", "bench"))["Q8_0"]
    off, on = [], []
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        for _ in range(args.r):
            off.append(tokens_per_second(args.dsinfer, model, args))
            on.append(tokens_per_second(args.dsinfer, model, args, trace))
        with open(trace) as f:
            events = json.load(f)
    a, b = statistics.median(off), statistics.median(on)
    print(f"machine: {machine()}; {os.path.basename(model)}; concurrency {args.c}, {args.requests} requests of "
          f"{args.prompt_len}+{args.gen_len} tokens; median of {args.r} alternating runs\n")
    print("| profiler | output tokens/s | ratio to off |")
    print("| --- | --- | --- |")
    print(f"| off | {a:.2f} | 1.000 |")
    print(f"| recording every step | {b:.2f} | {b / a:.3f} |")
    totals = {}
    for e in events:
        if e.get("cat") == "op":
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"]
    step_us = sum(e["dur"] for e in events if e.get("cat") == "step")
    print(f"\nlast traced run: the ops cover {sum(totals.values()) / step_us:.1%} of its step time; the largest:\n")
    print("| op | share of step time |")
    print("| --- | --- |")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[:8]:
        print(f"| {name} | {us / step_us:.1%} |")


if __name__ == "__main__":
    main()

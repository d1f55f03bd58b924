"""Serving many streams at once beside one stream, and beside a previous build, in one run.

`dsinfer bench --concurrency C` (the batching engine, as `serve` runs it: every request
submitted at once, C in flight) at one stream and at -c streams, for this build and for the
previous release's binary (--baseline: the dsinfer binary of the release to compare with, built
from its commit) or for this binary on a lower kernel ISA (--baseline-isa avx512: the AMX tiles
against the VNNI ones, through DSINFER_ISA), alternating builds and stream counts in each repetition so that machine noise
hits all alike. Each run serves --requests requests per stream slot (C x --requests in all) of
--prompt-len random prompt tokens and --gen-len output tokens. Prints output tokens/s, TTFT p50
and p99, TPOT p50 and the decode-only step rate (the mean of the repetitions; TTFT p99 the
largest), then the ratios: -c streams against one, and this build against the baseline.

Usage: python3 bench/concurrent_streams.py [--model FILE] [--baseline BINARY | --baseline-isa ISA] [-c 16] [--requests 2]
       [--prompt-len 128] [--gen-len 64] [-r 2] [-t 2]
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_vs_llama_cpp import ensure_models, machine  # noqa: E402

FIGURES = {
    "output tok/s": r"^output tokens/s: ([0-9.]+)",
    "TTFT p50 ms": r"^TTFT ms: p50 ([0-9.]+)",
    "TTFT p99 ms": r"^TTFT ms: .* p99 ([0-9.]+)",
    "TPOT p50 ms": r"^TPOT ms: p50 ([0-9.]+)",
    "decode-only step tok/s": r"decode-only steps: \d+ at ([0-9.]+) tokens/s",
}


def serve_figures(build, model, streams, args):
    binary, isa = build
    cmd = [binary, "bench", "-m", model, "--concurrency", str(streams), "--requests", str(streams * args.requests),
           "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len), "-t", str(args.t)]
    env = dict(os.environ, DSINFER_ISA=isa) if isa else None
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    figures = {}
    for name, pattern in FIGURES.items():
        found = re.search(pattern, out, re.M)
        if not found:
            sys.exit(f"{' '.join(cmd)}: no '{name}' in its output:\n{out}")
        figures[name] = float(found.group(1))
    return figures


def summary(runs):
    """The mean of each figure over the repetitions, TTFT p99 the largest (a tail is not averaged away)."""
    return {name: (max if name == "TTFT p99 ms" else lambda v: sum(v) / len(v))([r[name] for r in runs]) for name in FIGURES}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="default: the 1.1B Q8_0 benchmark model of bench_vs_llama_cpp.py")
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("--baseline", help="the previous release's dsinfer binary, measured in the same alternation")
    parser.add_argument("--baseline-isa", help="this binary with DSINFER_ISA set to this (avx512, avx2), as the baseline")
    parser.add_argument("-c", type=int, default=16, help="concurrent streams")
    parser.add_argument("--requests", type=int, default=2, help="requests per stream slot")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    if args.c < 2 or args.requests < 1 or args.r < 1:
        parser.error("-c must be at least 2, --requests and -r at least 1")
    if args.baseline and args.baseline_isa:
        parser.error("--baseline, --baseline-isa: one baseline at a time")
    model = args.model or ensure_models(os.path.join(ROOT, "models", "bench"), ("Q8_0",))["Q8_0"]
    builds = {"dsinfer": (args.dsinfer, None)}
    if args.baseline or args.baseline_isa:
        builds["baseline"] = (args.baseline, None) if args.baseline else (args.dsinfer, args.baseline_isa)
    runs = {(build, streams): [] for build in builds for streams in (1, args.c)}
    for _ in range(args.r):
        for build, binary_isa in builds.items():
            for streams in (1, args.c):
                runs[(build, streams)].append(serve_figures(binary_isa, model, streams, args))

    print(f"machine: {machine()}; {args.t} threads; model {os.path.relpath(model, ROOT)}; {args.requests} requests per "
          f"stream, {args.prompt_len} prompt and {args.gen_len} output tokens each; {args.r} alternating repetitions\n")
    print("| build | streams | " + " | ".join(FIGURES) + " |")
    print("| --- | --- |" + " --- |" * len(FIGURES))
    means = {key: summary(r) for key, r in runs.items()}
    for (build, streams), m in means.items():
        binary, isa = builds[build]
        label = (f"{build} (DSINFER_ISA={isa})" if isa else f"{build} ({binary})") if build == "baseline" else build
        print(f"| {label} | {streams} | " + " | ".join(f"{m[name]:.1f}" for name in FIGURES) + " |")

    print(f"\n| build | output tok/s, {args.c} streams / 1 | TTFT p99, {args.c} streams / 1 |")
    print("| --- | --- | --- |")
    for build in builds:
        many, one = means[(build, args.c)], means[(build, 1)]
        print(f"| {build} | {many['output tok/s'] / one['output tok/s']:.2f}x | {many['TTFT p99 ms'] / one['TTFT p99 ms']:.2f}x |")
    if "baseline" in builds:
        print(f"\n| streams | output tok/s, dsinfer / baseline | TTFT p99, dsinfer / baseline (below 1: sooner) |")
        print("| --- | --- | --- |")
        for streams in (1, args.c):
            now, base = means[("dsinfer", streams)], means[("baseline", streams)]
            print(f"| {streams} | {now['output tok/s'] / base['output tok/s']:.2f}x | "
                  f"{now['TTFT p99 ms'] / base['TTFT p99 ms']:.2f}x |")

if __name__ == "__main__":
    main()

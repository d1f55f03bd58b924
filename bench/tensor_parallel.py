"""Tensor parallel beside one process on this machine: `dsinfer bench` of one
model with all its threads in one process, and split across N ranks of
threads / N each (`--tensor-parallel N`, started through mpirun), alternating,
pp and tg, with the bytes each rank moves per token. The ranks share one
memory and one set of cores here, so this measures the split's overhead (the
all-reduces, the smaller matrices); what it buys is memory bandwidth on a
machine whose ranks each have their own (README: Tensor parallel).

With --expert-parallel (a MoE model) a third row splits the routed experts
whole (`--expert-parallel N`) instead of by width. --streams S (default 16;
0: none) adds the batching engine's output tokens/s with S requests in flight
(`dsinfer bench --concurrency S`, 2 S requests of 128 prompt and 64 output tokens).

Usage: python3 bench/tensor_parallel.py [-m MODEL] [-t THREADS] [-N RANKS] [-p 512] [-n 128] [-r 2] [--rounds 2] [--streams 16]
       [--expert-parallel]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def bench(dsinfer, model, threads, ranks, p, n, r, experts_whole=False):
    extra = ["--tensor-parallel", str(ranks)] if ranks > 1 else []
    if experts_whole:
        extra += ["--expert-parallel", str(ranks)]
    out = subprocess.run([dsinfer, "bench", "-m", model, "-p", str(p), "-n", str(n), "-r", str(r), "-o", "json",
                          "-t", str(threads // ranks), *extra], capture_output=True, text=True, check=True).stdout
    tests = json.loads(out.split("\ntensor parallel:")[0])
    speeds = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in tests}
    wire = re.search(r"^tensor parallel: .*$", out, re.M)
    return speeds, wire.group(0) if wire else ""


def streams(dsinfer, model, threads, ranks, concurrency, experts_whole=False):
    """Output tokens/s of the batching engine with `concurrency` requests in flight."""
    extra = ["--tensor-parallel", str(ranks)] if ranks > 1 else []
    if experts_whole:
        extra += ["--expert-parallel", str(ranks)]
    out = subprocess.run([dsinfer, "bench", "-m", model, "--concurrency", str(concurrency), "--requests", str(2 * concurrency),
                          "--prompt-len", "128", "--gen-len", "64", "-t", str(threads // ranks), *extra],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"^output tokens/s: ([0-9.]+)$", out, re.M).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", default=os.path.join(ROOT, "models", "bench", "llama1b_q8_0.gguf"))
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-t", type=int, default=2, help="threads in all")
    parser.add_argument("-N", type=int, default=2, help="ranks")
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--expert-parallel", action="store_true")
    args = parser.parse_args()
    setups = [(f"one process, {args.t} threads", 1, False), (f"{args.N} ranks of {args.t // args.N} thread(s)", args.N, False)]
    if args.expert_parallel:
        setups.append((f"{args.N} ranks, routed experts whole", args.N, True))
    runs = {name: [] for name, _, _ in setups}
    wire = ""
    for _ in range(args.rounds):  # alternating, so drift in the machine's speed falls on every row
        for name, ranks, whole in setups:
            speeds, line = bench(args.dsinfer, args.m, args.t, ranks, args.p, args.n, args.r, whole)
            if args.streams:
                speeds["streams"] = streams(args.dsinfer, args.m, args.t, ranks, args.streams, whole)
            runs[name].append(speeds)
            wire = line or wire
    print(f"{os.path.basename(args.m)}, {args.t} threads in all, median of {args.rounds} rounds")
    kinds = ["pp", "tg"] + (["streams"] if args.streams else [])
    heads = {"pp": f"pp{args.p}", "tg": f"tg{args.n}", "streams": f"{args.streams} streams out"}
    print("| | " + " | ".join(f"{heads[k]} tok/s" for k in kinds) + " | " + " | ".join(f"{k} ratio" for k in kinds) + " |")
    print("| --- |" + " ---: |" * (2 * len(kinds)))
    med = {k: {t: statistics.median(s[t] for s in v) for t in kinds} for k, v in runs.items()}
    base = med[setups[0][0]]
    for name, _, _ in setups:
        m = med[name]
        print(f"| {name} | " + " | ".join(f"{m[k]:.1f}" for k in kinds) + " | " +
              " | ".join(f"{m[k] / base[k]:.2f}x" for k in kinds) + " |")
    print(wire)


if __name__ == "__main__":
    sys.exit(main())

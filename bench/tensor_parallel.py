"""Tensor parallel beside one process on this machine: `dsinfer bench` of one
model with all its threads in one process, and split across N ranks of
threads / N each (`--tensor-parallel N`, started through mpirun), alternating,
pp and tg, with the bytes each rank moves per token. The ranks share one
memory and one set of cores here, so this measures the split's overhead (the
all-reduces, the smaller matrices); what it buys is memory bandwidth on a
machine whose ranks each have their own (README: Tensor parallel).

Usage: python3 bench/tensor_parallel.py [-m MODEL] [-t THREADS] [-N RANKS] [-p 512] [-n 128] [-r 2] [--rounds 2]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def bench(dsinfer, model, threads, ranks, p, n, r):
    extra = ["--tensor-parallel", str(ranks)] if ranks > 1 else []
    out = subprocess.run([dsinfer, "bench", "-m", model, "-p", str(p), "-n", str(n), "-r", str(r), "-o", "json",
                          "-t", str(threads // ranks), *extra], capture_output=True, text=True, check=True).stdout
    tests = json.loads(out.split("\ntensor parallel:")[0])
    speeds = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in tests}
    wire = re.search(r"^tensor parallel: .*$", out, re.M)
    return speeds, wire.group(0) if wire else ""


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
    args = parser.parse_args()
    runs = {1: [], args.N: []}
    wire = ""
    for _ in range(args.rounds):  # alternating, so drift in the machine's speed falls on both
        for ranks in (1, args.N):
            speeds, line = bench(args.dsinfer, args.m, args.t, ranks, args.p, args.n, args.r)
            runs[ranks].append(speeds)
            wire = line or wire
    print(f"{os.path.basename(args.m)}, {args.t} threads in all, median of {args.rounds} rounds")
    print(f"| | pp{args.p} tok/s | tg{args.n} tok/s |")
    print("| --- | ---: | ---: |")
    med = {k: {t: statistics.median(s[t] for s in v) for t in ("pp", "tg")} for k, v in runs.items()}
    print(f"| one process, {args.t} threads | {med[1]['pp']:.1f} | {med[1]['tg']:.2f} |")
    print(f"| {args.N} ranks of {args.t // args.N} | {med[args.N]['pp']:.1f} | {med[args.N]['tg']:.2f} |")
    print(f"| ratio | {med[args.N]['pp'] / med[1]['pp']:.2f}x | {med[args.N]['tg'] / med[1]['tg']:.2f}x |")
    print(wire)


if __name__ == "__main__":
    sys.exit(main())

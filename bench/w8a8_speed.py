"""W8A8 speed beside Q8_0, and beside llama.cpp's Q8_0, in one run, on the 1.1B benchmark model
(bench_vs_llama_cpp.py's TinyLlama-shaped random-weight F16 file and its llama.cpp Q8_0).

W8A8 is made from the F16 file by `dsinfer quantize`: with the default policy (attention, embeddings
and output stay F16; the FFN is INT8) and with every linear layer of the blocks in INT8 (the kernel's
own speed). Measured, alternating engines per repetition: pp512 (512 prompt tokens in one batch) and
batched decode of 16 streams (dsinfer bench --concurrency 16: the decode-only steps' tokens/s; llama.cpp:
16 sequences, one token each per llama_decode, llama_cpp_speed.py --parallel 16). --baseline-isa avx512
adds every dsinfer row again with DSINFER_ISA=avx512 in the same alternation (on a CPU with AMX: the
AMX tiles against the VNNI ones) and prints their ratios; --types adds other weight types of the 1.1B
model (Q4_0) to dsinfer's rows.

Usage: python3 bench/w8a8_speed.py [--models DIR] [--baseline-isa ISA] [--types Q8_0,Q4_0] [-r 3] [-t 2]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_vs_llama_cpp import LLAMA_TYPES, ensure_models, machine  # noqa: E402

DSINFER = os.path.join(ROOT, "build", "dsinfer")
STREAMS, PROMPT, GEN = 16, 32, 64


def ensure_w8a8(models, directory):
    paths = {}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as policy:
        policy.write("blk.* W8A8\n")
    for name, extra in (("W8A8", []), ("W8A8 (all linear)", ["--policy", policy.name])):
        path = os.path.join(directory, "llama1b_w8a8" + ("_all" if extra else "") + ".gguf")
        if not os.path.exists(path):
            subprocess.run([DSINFER, "quantize", "-m", models["F16"], "-o", path, "--type", "W8A8", *extra], check=True,
                           capture_output=True)
        paths[name] = path
    os.unlink(policy.name)
    return paths


def isa_env(isa):
    return dict(os.environ, DSINFER_ISA=isa) if isa else None


def dsinfer_pp(model, threads, isa=None):
    out = subprocess.run([DSINFER, "bench", "-m", model, "-p", "512", "-n", "1", "-r", "1", "-t", str(threads)],
                         capture_output=True, text=True, check=True, env=isa_env(isa)).stdout
    return float(re.search(r"^pp512: ([0-9.]+)", out, re.M).group(1))


def dsinfer_batched(model, threads, isa=None):
    out = subprocess.run([DSINFER, "bench", "-m", model, "--concurrency", str(STREAMS), "--requests", str(STREAMS),
                          "--prompt-len", str(PROMPT), "--gen-len", str(GEN), "-t", str(threads)],
                         capture_output=True, text=True, check=True, env=isa_env(isa)).stdout
    return float(re.search(r"decode-only steps: \d+ at ([0-9.]+) tokens/s", out).group(1))


def llama(model, threads, *args):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "llama_cpp_speed.py"), model, "-t", str(threads), *args]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--baseline-isa", help="dsinfer's rows again with DSINFER_ISA set to this (avx512, avx2)")
    parser.add_argument("--types", default="Q8_0", help="the 1.1B model's weight types for dsinfer's rows beside W8A8")
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    types = args.types.split(",")
    unknown = [t for t in types if t not in LLAMA_TYPES or t == "F16"]
    if unknown:
        parser.error(f"--types: {', '.join(unknown)} not among {', '.join(t for t in LLAMA_TYPES if t != 'F16')}")
    if "Q8_0" not in types:
        parser.error("--types: Q8_0 is the reference row; keep it")
    models = ensure_models(args.models, ("F16", *types))
    dsinfer_models = {name: models[name] for name in types} | ensure_w8a8(models, args.models)
    baseline = f"dsinfer DSINFER_ISA={args.baseline_isa}" if args.baseline_isa else None
    runs = {("Q8_0", "llama.cpp"): models["Q8_0"]}
    for name, path in dsinfer_models.items():
        runs[(name, "dsinfer")] = path
        if baseline:
            runs[(name, baseline)] = path
    results = {key: {"pp": [], "batched": []} for key in runs}
    for _ in range(args.r):
        for (name, engine), path in runs.items():
            if engine != "llama.cpp":
                isa = args.baseline_isa if engine == baseline else None
                results[(name, engine)]["pp"].append(dsinfer_pp(path, args.t, isa))
                results[(name, engine)]["batched"].append(dsinfer_batched(path, args.t, isa))
            else:
                results[(name, engine)]["pp"].append(llama(path, args.t, "-p", "512", "-n", "0", "-r", "1")["pp"])
                results[(name, engine)]["batched"].append(
                    llama(path, args.t, "--parallel", str(STREAMS), "--prompt-len", str(PROMPT), "--gen-len", str(GEN))["batched"])
    mean = {key: {k: sum(v) / len(v) for k, v in r.items()} for key, r in results.items()}
    peer, own = mean[("Q8_0", "llama.cpp")], mean[("Q8_0", "dsinfer")]
    print(f"machine: {machine()}; {args.t} threads; mean of {args.r} alternating repetitions; "
          f"batched: {STREAMS} streams, {PROMPT}-token prompts, {GEN} decode steps\n")
    print("| weights | engine | pp512 tok/s | batched decode tok/s | pp / dsinfer Q8_0 | pp / llama.cpp Q8_0 | "
          "batched / dsinfer Q8_0 | batched / llama.cpp Q8_0 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (name, engine), m in mean.items():
        print(f"| {name} | {engine} | {m['pp']:.1f} | {m['batched']:.1f} | {m['pp'] / own['pp']:.2f}x | "
              f"{m['pp'] / peer['pp']:.2f}x | {m['batched'] / own['batched']:.2f}x | {m['batched'] / peer['batched']:.2f}x |")
    if baseline:
        print(f"\n| weights | pp512 dsinfer / {baseline} | batched decode dsinfer / {baseline} |")
        print("| --- | ---: | ---: |")
        for name in dsinfer_models:
            now, base = mean[(name, "dsinfer")], mean[(name, baseline)]
            print(f"| {name} | {now['pp'] / base['pp']:.2f}x | {now['batched'] / base['batched']:.2f}x |")


if __name__ == "__main__":
    main()

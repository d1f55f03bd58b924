"""Each weight type's speed on dsinfer's CPU paths beside llama.cpp, in one run, alternating engines per
repetition: pp512 (512 prompt tokens in one batch), tg128 (128 single-token steps) and batched decode of
16 streams (dsinfer bench --concurrency 16: the decode-only steps' tokens/s; llama.cpp: 16 sequences, one
token each per llama_decode, llama_cpp_speed.py --parallel 16).

The models: the 1.1B benchmark model (bench_vs_llama_cpp.py's TinyLlama-shaped random-weight F16 file;
BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q4_K_M made from it by llama.cpp's quantizer; W8A8 by `dsinfer quantize` with the
default policy, attention and embeddings F16, and W8A8_ALL with every linear layer of the blocks INT8) and
the DeepSeek-V2-Lite-width MoE (MOE_Q8_0, MOE_Q4_0, MOE_Q4_K_M: 4 layers, 64 routed experts; Q4_K_M's down
experts in Q5_0 and Q8_0, as llama.cpp's quantizer makes them). llama.cpp runs the same
file; it cannot read W8A8, whose rows are compared with llama.cpp's Q8_0.

--baseline-isa ISA adds dsinfer again with DSINFER_ISA=ISA (avx512 on a CPU with AMX: the VNNI path beside
the AMX one); --baseline BINARY adds another dsinfer build (the previous commit's, built beside this one).
llama.cpp is llama-cpp-python's library; LLAMA_CPP_LIB_PATH=DIR (llama-cpp-python's own
override) runs another build of it, e.g. one for AVX-512: the header names the features it was built with.

Usage: python3 bench/weight_types_speed.py [--models DIR] [--types Q8_0,W8A8,...] [--baseline-isa ISA] [--baseline BINARY] [-r 3] [-t 2]
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

from bench_vs_llama_cpp import LLAMA_TYPES, ensure_models, ensure_moe_models, kernels, machine  # noqa: E402

DSINFER = os.path.join(ROOT, "build", "dsinfer")
STREAMS, PROMPT, GEN = 16, 32, 64
W8A8_TYPES = ("W8A8", "W8A8_ALL")
MOE_TYPES = ("MOE_Q8_0", "MOE_Q4_0", "MOE_Q4_K_M")
TYPES = (*LLAMA_TYPES, *W8A8_TYPES, *MOE_TYPES)


def ensure_w8a8(f16, directory, name):
    path = os.path.join(directory, "llama1b_w8a8" + ("_all" if name == "W8A8_ALL" else "") + ".gguf")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as policy:
            policy.write("blk.* W8A8\n")
            policy.flush()
            extra = ["--policy", policy.name] if name == "W8A8_ALL" else []
            subprocess.run([DSINFER, "quantize", "-m", f16, "-o", path + ".partial", "--type", "W8A8", *extra], check=True,
                           capture_output=True)
        os.replace(path + ".partial", path)
    return path


def ensure_type_models(directory, types):
    """Each type's file, and the file llama.cpp runs beside it."""
    llama_types = [t for t in types if t in LLAMA_TYPES]
    if any(t in W8A8_TYPES for t in types):
        llama_types += ["F16", "Q8_0"]
    llama = ensure_models(directory, tuple(dict.fromkeys(llama_types))) if llama_types else {}
    moe_types = [t.removeprefix("MOE_") for t in types if t in MOE_TYPES]
    moe = ensure_moe_models(directory, moe_types) if moe_types else {}
    files = {}
    for t in types:
        if t in W8A8_TYPES:
            files[t] = (ensure_w8a8(llama["F16"], directory, t), llama["Q8_0"])
        elif t in MOE_TYPES:
            files[t] = (moe[t.removeprefix("MOE_")],) * 2
        else:
            files[t] = (llama[t],) * 2
    return files


def isa_env(isa):
    return dict(os.environ, DSINFER_ISA=isa) if isa else None


def dsinfer_run(binary, model, threads, isa):
    tests = json.loads(subprocess.run([binary, "bench", "-m", model, "-p", "512", "-n", "128", "-r", "1", "-t", str(threads),
                                       "-o", "json"], capture_output=True, text=True, check=True, env=isa_env(isa)).stdout)
    result = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in tests}
    out = subprocess.run([binary, "bench", "-m", model, "--concurrency", str(STREAMS), "--requests", str(STREAMS),
                          "--prompt-len", str(PROMPT), "--gen-len", str(GEN), "-t", str(threads)],
                         capture_output=True, text=True, check=True, env=isa_env(isa)).stdout
    result["batched"] = float(re.search(r"decode-only steps: \d+ at ([0-9.]+) tokens/s", out).group(1))
    return result


def llama_run(model, threads):
    def run(*args):
        cmd = [sys.executable, os.path.join(ROOT, "bench", "llama_cpp_speed.py"), model, "-t", str(threads), *args]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    return run("-p", "512", "-n", "128", "-r", "1") | run("--parallel", str(STREAMS), "--prompt-len", str(PROMPT),
                                                          "--gen-len", str(GEN))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--types", default="Q8_0,W8A8,W8A8_ALL", help=f"comma-separated, among {','.join(TYPES)}")
    parser.add_argument("--baseline-isa", help="dsinfer's rows again with DSINFER_ISA set to this (avx512, avx2)")
    parser.add_argument("--baseline", help="another dsinfer build's rows (the previous commit, built beside this one)")
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    types = args.types.split(",")
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        parser.error(f"--types: {', '.join(unknown)} not among {', '.join(TYPES)}")
    files = ensure_type_models(args.models, types)
    baseline = f"dsinfer DSINFER_ISA={args.baseline_isa}" if args.baseline_isa else None
    other_build = "dsinfer baseline" if args.baseline else None
    engines = ["dsinfer", *([baseline] if baseline else []), *([other_build] if other_build else []), "llama.cpp"]
    # llama.cpp runs each file once, however many types it stands beside.
    runs = {}
    for t in types:
        own, peer = files[t]
        runs[(t, "dsinfer")] = lambda own=own: dsinfer_run(DSINFER, own, args.t, None)
        if baseline:
            runs[(t, baseline)] = lambda own=own: dsinfer_run(DSINFER, own, args.t, args.baseline_isa)
        if other_build:
            runs[(t, other_build)] = lambda own=own: dsinfer_run(args.baseline, own, args.t, None)
        runs.setdefault((peer, "llama.cpp"), lambda peer=peer: llama_run(peer, args.t))
    results = {key: [] for key in runs}
    for _ in range(args.r):
        for key, run in runs.items():
            results[key].append(run())
            print(f"  {key[0]} {key[1]}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[key][-1].items()), file=sys.stderr)
    mean = {key: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for key, rs in results.items()}

    def row(t, engine):
        return mean[(files[t][1], engine)] if engine == "llama.cpp" else mean[(t, engine)]

    print(f"machine: {machine()}; {args.t} threads; mean of {args.r} alternating repetitions; "
          f"batched: {STREAMS} streams, {PROMPT}-token prompts, {GEN} decode steps")
    print(f"kernels: {kernels(DSINFER, args.t, None)}\n")
    print("| weights | engine | pp512 tok/s | tg128 tok/s | 16 streams tok/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for t in types:
        for engine in engines:
            m = row(t, engine)
            name = f"llama.cpp ({'Q8_0' if t in W8A8_TYPES else 'same file'})" if engine == "llama.cpp" else engine
            print(f"| {t} | {name} | {m['pp']:.1f} | {m['tg']:.2f} | {m['batched']:.1f} |")
    measures = (("pp", "pp512"), ("tg", "tg128"), ("batched", "16 streams"))
    for other in engines[1:]:
        print(f"\n| weights | " + " | ".join(f"{label} dsinfer / {other}" for _, label in measures) + " |")
        print("| --- |" + " ---: |" * len(measures))
        for t in types:
            now, then = row(t, "dsinfer"), row(t, other)
            print(f"| {t} | " + " | ".join(f"{now[k] / then[k]:.2f}x" for k, _ in measures) + " |")


if __name__ == "__main__":
    main()

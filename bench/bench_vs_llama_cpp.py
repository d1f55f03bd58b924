"""Prompt processing and generation speed of dsinfer beside llama.cpp, in one run.

Writes a ~1.1B-parameter random-weight Llama model (TinyLlama's shape) in F16
and quantizes it to Q8_0, Q4_0 and Q4_K_M with llama.cpp's quantizer (--types
picks others, BF16, Q4_1, Q5_0 and Q5_1 among them; or, with --moe,
a DeepSeek-V2-Lite-shaped MoE model with 4 of its 27 layers in Q8_0, Q4_0 and
Q4_K_M (llama.cpp's mix, its down experts in Q5_0 and Q8_0);
it carries V2's q LoRA of 1536 because llama.cpp takes a deepseek2 file without
one for V2-Lite only when it has 27 layers; or, with --v32, a DeepSeek-V3.2
model at its attention widths, indexer included, with 2 layers in Q8_0; or, with --v4,
a DeepSeek-V4 model at V4-Flash's attention widths, 3 layers in Q8_0), then measures
pp512 (512 prompt tokens in one batch) and tg128 (128 single-token decode
steps) for both engines with the same thread count, alternating engines per
repetition so that machine noise hits both alike. Prints a markdown table.
-d DEPTH adds tg128 after a context of DEPTH tokens (llama.cpp with flash
attention, its faster path at depth; the context filled untimed, by
`dsinfer bench -d` and llama_cpp_speed.py -d alike). Each tg figure is also
given as a share of the limit the memory bandwidth sets (bandwidth / the bytes
a token reads, as `dsinfer bench` counts them from the file: every matrix, the
embedding's row, the routed experts' average share, the cache at the test's
mean depth), the bandwidth measured by `dsinfer bench --membw` right before
each engine's run (a shared machine's bandwidth moves by half within the hour:
each rate is set against the bandwidth of its own minute, and a share is the
mean of the repetitions') or given with --bandwidth. The llama.cpp figures
come from llama-cpp-python's bundled llama.cpp, or with --llama-bench BINARY
from that llama-bench binary (each test one llama-bench run, `-r 1`, mmap on
and off through whichever flag its version has). --baseline BINARY adds
another dsinfer build (the previous commit, built beside this one) to the same
alternation, for a refactor's before and after; --baseline-isa ISA adds this
same binary with DSINFER_ISA=ISA instead (avx512: the AMX tiles against the
VNNI ones).

Usage: python3 bench/bench_vs_llama_cpp.py [--moe | --v32 | --v4] [--models DIR] [--baseline BINARY | --baseline-isa ISA]
       [-p 512] [-n 128] [-d 0]
       [--llama-load both|mmap|no-mmap]
       [-r 3] [-t 2] [--bandwidth GB/s] [--types F16,Q8_0,Q4_0,Q4_K_M (BF16, Q4_1, Q5_0, Q5_1 too)] [--llama-bench BINARY]
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

from make_deepseek2 import V32_WIDTHS, write_deepseek2  # noqa: E402
from make_deepseek4 import V4_FLASH_WIDTHS, write_deepseek4  # noqa: E402
from make_model import FIXTURES, quantize_with_llama_cpp, write_model  # noqa: E402

SHAPE = dict(n_embd=2048, n_ff=5632, n_head=32, n_head_kv=4, n_layer=22, n_ctx=2048)
# DeepSeek-V2-Lite's dimensions (its config.json), 4 layers: 1 dense, 3 MoE.
MOE_SHAPE = dict(n_embd=2048, n_head=16, q_lora_rank=1536, kv_lora_rank=512, qk_nope=128, qk_rope=64, v_head=128,
                 n_layer=4, leading_dense=1, n_ff=10944, n_expert=64, n_expert_used=6, n_shared=2, expert_ff=1408,
                 gating=1, weights_norm=False, weights_scale=1.0, n_group=1, n_group_used=1, probs_bias=False)


def ensure_v32_models(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "deepseek32_widths2_q8_0.gguf")
    if not os.path.exists(path):
        print(f"writing {path} (random weights, DeepSeek-V3.2 attention widths, 2 layers)", file=sys.stderr)
        write_deepseek2(path, shape="v3", dtype="q8_0", layout="split", seed=0, n_ctx=65536, indexer=(64, 128, 2048),
                        yarn=(40.0, 4096, 1.0), vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf"),
                        **V32_WIDTHS)
    return {"Q8_0": path}


def ensure_v4_models(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "deepseek4_widths3_q8_0.gguf")
    if not os.path.exists(path):
        print(f"writing {path} (random weights, DeepSeek-V4-Flash attention widths, 3 layers)", file=sys.stderr)
        write_deepseek4(path + ".partial", dtype="q8_0", seed=0, n_ctx=65536, yarn=(16.0, 65536),
                        vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf"), **V4_FLASH_WIDTHS)
        os.replace(path + ".partial", path)
    return {"Q8_0": path}


# The MoE model's weight types: Q8_0 and Q4_0 written directly; Q4_K_M by llama.cpp's quantizer from F16, which
# (as in every V2-Lite Q4_K_M file) puts the down experts, whose 1,408 columns are no multiple of 256, in Q5_0
# where Q4_K was due and in Q8_0 where Q6_K was.
MOE_TYPES = ("Q8_0", "Q4_0", "Q4_K_M")


def ensure_moe_models(directory, types=MOE_TYPES):
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name in types:
        path = os.path.join(directory, f"deepseek2_v2lite4_{name.lower()}.gguf")
        if not os.path.exists(path):
            written = os.path.join(directory, "deepseek2_v2lite4_f16.gguf") if name == "Q4_K_M" else path
            if not os.path.exists(written):
                print(f"writing {written} (random weights, V2-Lite dimensions, 4 layers)", file=sys.stderr)
                write_deepseek2(written, dtype="f16" if name == "Q4_K_M" else name.lower(), layout="split", seed=0, n_ctx=2048,
                                vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf"), **MOE_SHAPE)
            if name == "Q4_K_M":
                quantize_with_llama_cpp(written, path, LLAMA_TYPES[name])
        paths[name] = path
    return paths


# The Llama model's weight types: written in F16, the others converted from it by llama.cpp's quantizer.
LLAMA_TYPES = {"F16": None, "BF16": "LLAMA_FTYPE_MOSTLY_BF16", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
               "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
               "Q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0", "Q5_1": "LLAMA_FTYPE_MOSTLY_Q5_1", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
DEFAULT_TYPES = "F16,Q8_0,Q4_0,Q4_K_M"


def ensure_models(directory, types=tuple(DEFAULT_TYPES.split(","))):
    os.makedirs(directory, exist_ok=True)
    f16 = os.path.join(directory, "llama1b_f16.gguf")
    if not os.path.exists(f16):
        print(f"writing {f16} (random weights, TinyLlama shape)", file=sys.stderr)
        write_model(f16, arch="llama", dtype="f16", seed=0,
                    vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-llama-spm.gguf"), **SHAPE)
    paths = {}
    for name in types:
        path = os.path.join(directory, f"llama1b_{name.lower()}.gguf")
        if not os.path.exists(path):
            quantize_with_llama_cpp(f16, path, LLAMA_TYPES[name])
        paths[name] = path
    return paths


def dsinfer_speed(binary, model, p, n, depth, threads, bandwidth_of_now, isa=None):
    """pp, tg and (with a depth) tg_d in tokens/s, the bytes a token of each tg test reads, and the bandwidth
    measured just before the run (for each kind); isa: DSINFER_ISA for the run."""
    bandwidth = bandwidth_of_now()
    cmd = [binary, "bench", "-m", model, "-p", str(p), "-n", str(n), "-d", f"0,{depth}" if depth else "0", "-r", "1",
           "-t", str(threads), "-o", "json"]
    env = dict(os.environ, DSINFER_ISA=isa) if isa else None
    tests = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
    result, read_bytes = {}, {}
    for t in tests:
        kind = ("pp" if t["n_prompt"] else "tg") + ("_d" if t["n_depth"] else "")
        if kind == "pp_d":
            continue  # pp at depth: not in this table
        result[kind] = t["avg_ts"]
        if "read_bytes_per_token" in t:
            read_bytes[kind] = t["read_bytes_per_token"]
    return result, read_bytes, dict.fromkeys(result, bandwidth)


class LlamaBench:
    """A llama-bench binary, its flags told apart by version: mmap through `-lm mmap|none` (newer) or `-mmp 1|0`,
    flash attention through `-fa on` (newer) or `-fa 1`."""

    def __init__(self, binary):
        self.binary = binary
        usage = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        if "--n-prompt" not in usage:
            raise SystemExit(f"--llama-bench {binary}: its --help does not read like llama-bench's")
        self.has_depth = "--n-depth" in usage
        self.mmap_flags = (["-lm", "mmap"], ["-lm", "none"]) if "--load-mode" in usage else (["-mmp", "1"], ["-mmp", "0"])
        self.flash_attn = ["-fa", "on"] if "<on|off" in usage else ["-fa", "1"]

    def run(self, model, threads, no_mmap, *extra):
        """llama-bench's JSON tests: pp from those with n_prompt, tg from those with n_gen."""
        args = [self.binary, "-m", model, "-t", str(threads), "-r", "1", "-o", "json", *self.mmap_flags[no_mmap], *extra]
        tests = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        return {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in tests}

    def build(self, model):
        tests = json.loads(subprocess.run([self.binary, "-m", model, "-p", "1", "-n", "0", "-r", "1", "-o", "json"],
                                          capture_output=True, text=True, check=True).stdout)
        return f"llama-bench {self.binary} (build {tests[0].get('build_commit')}, {tests[0].get('backends')})"


def llama_speed(model, p, n, depth, threads, no_mmap, bandwidth_of_now, llama_bench=None):
    """As dsinfer_speed, without the bytes: two processes with a depth, each after its own bandwidth measurement;
    through llama-cpp-python, or the llama-bench binary given."""
    def run(*extra):
        if llama_bench:
            return llama_bench.run(model, threads, no_mmap, *extra)
        args = [sys.executable, os.path.join(ROOT, "bench", "llama_cpp_speed.py"), model, "-r", "1", "-t", str(threads),
                *extra] + (["--no-mmap"] if no_mmap else [])
        return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)

    bandwidth = bandwidth_of_now()
    result = run("-p", str(p), "-n", str(n))
    bandwidths = dict.fromkeys(result, bandwidth)
    if depth:
        bandwidths["tg_d"] = bandwidth_of_now()
        flash_attn = llama_bench.flash_attn if llama_bench else ["--flash-attn"]
        result["tg_d"] = run("-p", "0", "-n", str(n), "-d", str(depth), *flash_attn)["tg"]
    return result, bandwidths


def read_bandwidth(binary, threads):
    out = subprocess.run([binary, "bench", "--membw", "-t", str(threads)], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"memory read bandwidth: ([0-9.]+) GB/s", out).group(1)) * 1e9


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.*)", f.read()).group(1)
    except (OSError, AttributeError):
        pass
    flags = open("/proc/cpuinfo").read()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "baseline"
    return f"{cpu}, {os.cpu_count()} cores, {isa}, {platform.system()} {platform.release()}"


def kernels(binary, threads, llama_bench):
    """The kernels each engine runs: dsinfer's backend as its bench reports it, llama.cpp's build features (or, for a
    llama-bench binary, its build)."""
    import llama_cpp
    tiny = os.path.join(FIXTURES, "models", "stories260K.gguf")
    out = subprocess.run([binary, "bench", "-m", tiny, "-p", "1", "-n", "0", "-r", "1", "-t", str(threads), "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    if llama_bench:
        return f"dsinfer {json.loads(out)[0]['backend']}; llama.cpp: {llama_bench.build(tiny)}"
    built = llama_cpp.llama_print_system_info().decode()
    features = " ".join(f.split("=")[0].split(":")[-1].strip() for f in built.split("|") if f.strip().endswith("= 1"))
    return f"dsinfer {json.loads(out)[0]['backend']}; llama.cpp built with {features}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--moe", action="store_true", help="the DeepSeek-V2-Lite-shaped MoE model instead of the Llama")
    parser.add_argument("--v32", action="store_true", help="a DeepSeek-V3.2 model at its attention widths (2 layers, Q8_0)")
    parser.add_argument("--v4", action="store_true", help="a DeepSeek-V4 model at V4-Flash's attention widths (3 layers, Q8_0)")
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("--baseline", help="another dsinfer binary measured in the same alternation")
    parser.add_argument("--baseline-isa", help="this dsinfer binary with DSINFER_ISA set to this (avx512, avx2), as the baseline")
    parser.add_argument("--llama-bench", help="a llama-bench binary for the llama.cpp figures (default: llama-cpp-python)")
    parser.add_argument("--llama-load", choices=["both", "mmap", "no-mmap"], default="both",
                        help="llama.cpp's runs: with mmap and without (the best of the two is the peer), or one of them "
                             "(at depth each run fills the context again)")
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-d", type=int, default=0, help="also tg after a context of this many tokens")
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--bandwidth", type=float, help="memory read bandwidth in GB/s (default: dsinfer bench --membw)")
    parser.add_argument("--types", default=DEFAULT_TYPES,
                        help=f"the Llama model's weight types, of {', '.join(LLAMA_TYPES)} (default {DEFAULT_TYPES})")
    args = parser.parse_args()
    types = args.types.split(",")
    unknown = [t for t in types if t not in LLAMA_TYPES]
    if unknown or ((args.moe or args.v32 or args.v4) and args.types != DEFAULT_TYPES):
        parser.error(f"--types: {', '.join(unknown)} not among {', '.join(LLAMA_TYPES)}" if unknown
                     else f"--types is for the Llama model; --moe writes {', '.join(MOE_TYPES)}, --v32 and --v4 Q8_0")
    if args.moe + args.v32 + args.v4 > 1:
        parser.error("--moe, --v32, --v4: one model at a time")
    if args.baseline and args.baseline_isa:
        parser.error("--baseline, --baseline-isa: one baseline at a time")
    baseline = (args.baseline, None) if args.baseline else (args.dsinfer, args.baseline_isa) if args.baseline_isa else None
    baseline_name = f"dsinfer DSINFER_ISA={args.baseline_isa}" if args.baseline_isa else "dsinfer baseline"

    llama_bench = LlamaBench(args.llama_bench) if args.llama_bench else None
    if llama_bench and args.d and not llama_bench.has_depth:
        parser.error(f"-d: {args.llama_bench} has no --n-depth (a llama-bench from before depths were added)")
    models = (ensure_moe_models(args.models) if args.moe else ensure_v32_models(args.models) if args.v32
              else ensure_v4_models(args.models) if args.v4 else ensure_models(args.models, types))
    bandwidth_of_now = (lambda: args.bandwidth * 1e9) if args.bandwidth else (lambda: read_bandwidth(args.dsinfer, args.t))
    kinds = ["pp", "tg"] + (["tg_d"] if args.d else [])
    label = {"pp": f"pp{args.p}", "tg": f"tg{args.n}", "tg_d": f"tg{args.n} @ d{args.d}"}
    print(f"machine: {machine()}; {args.t} threads; mean of {args.r} alternating repetitions; memory read bandwidth "
          + (f"{args.bandwidth:.1f} GB/s (given)" if args.bandwidth
             else "measured by dsinfer bench --membw before each engine's run (the last column: the lowest and highest)"))
    print(f"kernels: {kernels(args.dsinfer, args.t, llama_bench)}\n")
    tg_kinds = [k for k in kinds if k != "pp"]
    print("| weights | engine | " + " | ".join(f"{label[k]} tok/s" + (f" | {label[k]} share of the bandwidth limit"
                                                                         if k != "pp" else "") for k in kinds)
          + " | bandwidth GB/s |")
    print("| --- | --- |" + " --- |" * (len(kinds) + len(tg_kinds) + 1))
    ratios = []
    for name, path in models.items():
        peers = {"both": (("llama.cpp (mmap)", False), ("llama.cpp (--no-mmap)", True)),
                 "mmap": (("llama.cpp (mmap)", False),), "no-mmap": (("llama.cpp (--no-mmap)", True),)}[args.llama_load]
        runs = {"dsinfer": [], **{engine: [] for engine, _ in peers}}
        if baseline:
            runs[baseline_name] = []
        # Each run: (tokens/s by kind, the bandwidth measured before it by kind).
        for _ in range(args.r):
            speed, read_bytes, bandwidths = dsinfer_speed(args.dsinfer, path, args.p, args.n, args.d, args.t, bandwidth_of_now)
            runs["dsinfer"].append((speed, bandwidths))
            if baseline:
                base_speed, _, base_bandwidths = dsinfer_speed(baseline[0], path, args.p, args.n, args.d, args.t,
                                                               bandwidth_of_now, baseline[1])
                runs[baseline_name].append((base_speed, base_bandwidths))
            for engine, no_mmap in peers:
                runs[engine].append(llama_speed(path, args.p, args.n, args.d, args.t, no_mmap, bandwidth_of_now, llama_bench))
        means = {engine: {k: sum(r[k] for r, _ in rs) / len(rs) for k in kinds} for engine, rs in runs.items()}
        for engine, m in means.items():
            def share(k):
                return sum(r[k] * read_bytes[k] / b[k] for r, b in runs[engine]) / len(runs[engine])
            measured = [b[k] / 1e9 for _, b in runs[engine] for k in tg_kinds]
            cells = [f"{m[k]:.1f}" if k == "pp" else f"{m[k]:.2f} | {100 * share(k):.0f}%" for k in kinds]
            print(f"| {name} | {engine} | " + " | ".join(cells) + f" | {min(measured):.1f}-{max(measured):.1f} |")
        best = {k: max(means[engine][k] for engine, _ in peers) for k in kinds}
        base = means.get(baseline_name)
        ratios.append((name, [means["dsinfer"][k] / best[k] for k in kinds],
                       base and [means["dsinfer"][k] / base[k] for k in kinds]))
    print("\n| weights | " + " | ".join(f"{label[k]} dsinfer / best llama.cpp" for k in kinds)
          + "".join(f" | {label[k]} dsinfer / baseline" for k in kinds if baseline) + " |")
    print("| --- |" + " --- |" * (len(kinds) * (2 if baseline else 1)))
    for name, own, base in ratios:
        print(f"| {name} | " + " | ".join(f"{r:.2f}x" for r in own + (base or [])) + " |")


if __name__ == "__main__":
    main()

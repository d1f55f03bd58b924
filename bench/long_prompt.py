"""Long prompts on a DeepSeek-V3-shaped model: prompt processing of 8,192 and
32,768 tokens by dsinfer (multi-head latent attention chosen per chunk:
`--mla-prefill auto`, which takes the expanded form for such prompts; and
`--mla-prefill absorbed`, the form every step took before) beside llama.cpp
with flash attention, in one run, alternating engines per repetition.

The model: random weights with DeepSeek-V3's attention widths (q LoRA 1536,
KV latent 512, 128 no-RoPE + 64 RoPE dimensions per key, 128 per value), 16
heads (V3 has 128: the per-position cost scales with them alike in both
engines, and 16 keeps a 32K prompt within minutes on two cores), 2048-wide
residual stream, one dense and one MoE layer (V3's routing: sigmoid gating,
a selection bias, groups), Q8_0 weights, an f16 cache on both sides. Each
prompt goes in as one batch (llama.cpp's n_batch = n_ubatch = the prompt), as
`dsinfer bench -p` does. --forms picks dsinfer's MLA forms; --baseline-isa ISA
adds the expanded form again with DSINFER_ISA=ISA (avx512: the AMX tiles
against the VNNI ones) to the same alternation.

--model llama1b-q8_0 takes the 1.1B Llama benchmark model instead
(bench_vs_llama_cpp.py's TinyLlama shape, 22 layers, grouped-query attention,
written with a context long enough for the prompts and quantized to Q8_0 by
llama.cpp's quantizer): no MLA forms, dsinfer and its baseline ISA beside
llama.cpp with flash attention.

Usage: python3 bench/long_prompt.py [--models DIR] [--model v3-mla|llama1b-q8_0] [-p 8192,32768] [-r 1] [-t 2]
       [--forms auto,absorbed] [--baseline-isa ISA]
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_vs_llama_cpp import SHAPE, machine  # noqa: E402
from make_deepseek2 import write_deepseek2  # noqa: E402
from make_model import FIXTURES, quantize_with_llama_cpp, write_model  # noqa: E402

V3_ATTENTION = dict(n_embd=2048, n_head=16, q_lora_rank=1536, kv_lora_rank=512, qk_nope=128, qk_rope=64, v_head=128,
                    n_layer=2, leading_dense=1, n_ff=5632, n_expert=16, n_expert_used=4, n_shared=1, expert_ff=1024,
                    gating=2, weights_norm=True, weights_scale=2.5, n_group=4, n_group_used=2, probs_bias=True)


def ensure_v3_mla_model(directory, n_ctx):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"deepseek2_v3_attention_q8_0_{n_ctx}.gguf")
    if not os.path.exists(path):
        print(f"writing {path} (random weights, DeepSeek-V3 attention widths, 16 heads, 2 layers)", file=sys.stderr)
        write_deepseek2(path, shape="v3", dtype="q8_0", layout="split", seed=0, n_ctx=n_ctx,
                        vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf"), **V3_ATTENTION)
    return path


def ensure_llama_model(directory, n_ctx):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"llama1b_q8_0_{n_ctx}.gguf")
    if not os.path.exists(path):
        f16 = path + ".f16.partial"
        print(f"writing {path} (random weights, TinyLlama shape, context {n_ctx})", file=sys.stderr)
        write_model(f16, arch="llama", dtype="f16", seed=0, vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-llama-spm.gguf"),
                    **(SHAPE | {"n_ctx": n_ctx}))
        quantize_with_llama_cpp(f16, path + ".partial", "LLAMA_FTYPE_MOSTLY_Q8_0")
        os.unlink(f16)
        os.replace(path + ".partial", path)
    return path


def dsinfer_pp(binary, model, n_prompt, threads, form, isa=None):
    cmd = [binary, "bench", "-m", model, "-p", str(n_prompt), "-n", "0", "-r", "1", "-t", str(threads), "-o", "json"]
    if form:
        cmd += ["--mla-prefill", form]
    env = dict(os.environ, DSINFER_ISA=isa) if isa else None
    tests = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
    return next(t["avg_ts"] for t in tests if t["n_prompt"] == n_prompt)


def llama_pp(model, n_prompt, threads):
    args = [sys.executable, os.path.join(ROOT, "bench", "llama_cpp_speed.py"), model, "-r", "1", "-t", str(threads),
            "-p", str(n_prompt), "-n", "0", "--flash-attn"]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["pp"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--model", choices=["v3-mla", "llama1b-q8_0"], default="v3-mla")
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-p", default="8192,32768", help="prompt lengths, comma-separated")
    parser.add_argument("-r", type=int, default=1)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("--forms", default="auto,absorbed", help="dsinfer's MLA prefill forms, comma-separated")
    parser.add_argument("--baseline-isa", help="the expanded form again with DSINFER_ISA set to this (avx512, avx2)")
    args = parser.parse_args()
    lengths = [int(p) for p in args.p.split(",")]
    forms = args.forms.split(",")
    unknown = [f for f in forms if f not in ("auto", "absorbed")]
    if unknown:
        parser.error(f"--forms: {', '.join(unknown)} not among auto, absorbed")
    if args.model == "llama1b-q8_0":
        model = ensure_llama_model(args.models, max(lengths) + 64)
        names, forms, baseline_form = {None: "dsinfer"}, [None], None
    else:
        model = ensure_v3_mla_model(args.models, max(lengths) + 64)
        names, baseline_form = {"auto": "dsinfer (auto: expanded)", "absorbed": "dsinfer (absorbed)"}, "auto"
    engines = {names[f]: (lambda form: lambda n: dsinfer_pp(args.dsinfer, model, n, args.t, form))(f) for f in forms}
    if args.baseline_isa:
        engines[f"{names[baseline_form]} DSINFER_ISA={args.baseline_isa}"] = (
            lambda n: dsinfer_pp(args.dsinfer, model, n, args.t, baseline_form, args.baseline_isa))
    engines["llama.cpp (flash attention)"] = lambda n: llama_pp(model, n, args.t)
    print(f"machine: {machine()}; {args.t} threads; mean of {args.r} alternating repetitions\n")
    print("| engine | " + " | ".join(f"pp{n} tok/s" for n in lengths) + " |")
    print("| --- |" + " --- |" * len(lengths))
    means = {}
    for n in lengths:
        runs = {engine: [] for engine in engines}
        for _ in range(args.r):
            for engine, run in engines.items():
                runs[engine].append(run(n))
                print(f"  pp{n} {engine}: {runs[engine][-1]:.1f} tok/s", file=sys.stderr)
        for engine, rates in runs.items():
            means.setdefault(engine, {})[n] = sum(rates) / len(rates)
    for engine, by_length in means.items():
        print(f"| {engine} | " + " | ".join(f"{by_length[n]:.1f}" for n in lengths) + " |")
    llama = means["llama.cpp (flash attention)"]
    print("\n| ratio | " + " | ".join(f"pp{n}" for n in lengths) + " |")
    print("| --- |" + " --- |" * len(lengths))
    for engine in (e for e in means if e.startswith("dsinfer")):
        print(f"| {engine} / llama.cpp | " + " | ".join(f"{means[engine][n] / llama[n]:.2f}x" for n in lengths) + " |")


if __name__ == "__main__":
    main()

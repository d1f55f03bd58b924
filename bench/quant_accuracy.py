"""How far each quantized type is from the original: `dsinfer quantize` then `dsinfer eval --ref` on the real
models (stories260K and the trained ones of tests/reference/train_models.py), on English (for the trained
models, the text they learned and one they never saw) and on rare Unicode. Prints a markdown table: mean and 99th-percentile KL divergence of the next-token
distributions against the original, top-1 agreement, and perplexity (the original's in brackets).
The same types written by llama.cpp's quantizer are measured beside ours where llama.cpp has them.

Usage: python3 bench/quant_accuracy.py [--models stories260K,llama,...] [--types Q8_0,W8A8,...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

import train_models  # noqa: E402
from make_model import FIXTURES, quantize_with_llama_cpp  # noqa: E402

DSINFER = os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer"))
CALIB = os.path.join(ROOT, "tests", "data", "calibration", "mixed.jsonl")
RARE = os.path.join(ROOT, "tests", "data", "eval", "rare_unicode.txt")
STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")
# name -> dsinfer quantize arguments
TYPES = {
    "Q8_0": ["--type", "Q8_0"],
    "Q4_K_M": ["--type", "Q4_K_M"],
    "Q4_0": ["--type", "Q4_0"],
    "W8A8": ["--type", "W8A8"],
    "W8A8_ASYM": ["--type", "W8A8_ASYM"],
    "W8A8 +SmoothQuant": ["--type", "W8A8", "--calib", CALIB],
    "W8A8 +static (KL)": ["--type", "W8A8", "--calib", CALIB, "--smooth", "0", "--activation-scales", "kl"],
}
LLAMA_CPP_TYPES = {"Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


def run(*args):
    result = subprocess.run([DSINFER, *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"dsinfer {' '.join(map(str, args))}: {result.stderr}")
    return result.stdout


def models(names):
    """name -> (path, [(set name, text)])."""
    out = {}
    for name in names:
        if name == "stories260K":
            out[name] = (STORIES, [("English", os.path.join(ROOT, "tests", "data", "eval", "english.txt")), ("rare Unicode", RARE)])
        else:
            out[name] = (train_models.trained_model(name), [("English (learned)", train_models.english_text()),
                                                            ("English (unseen)", train_models.held_out_text()),
                                                            ("rare Unicode", RARE)])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(["stories260K"] + sorted(train_models.CONFIGS)))
    parser.add_argument("--types", default=",".join(TYPES))
    args = parser.parse_args()
    print("| model | type | by | set | KL mean | KL p99 | top-1 | perplexity (original) |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for model, (path, sets) in models(args.models.split(",")).items():
            for type_name in args.types.split(","):
                variants = [("dsinfer", lambda out, t=type_name: run("quantize", "-m", path, "-o", out, *TYPES[t]))]
                if type_name in LLAMA_CPP_TYPES:
                    variants.append(("llama.cpp", lambda out, t=type_name: quantize_with_llama_cpp(path, out, LLAMA_CPP_TYPES[t])))
                for by, make in variants:
                    out = os.path.join(tmp, "q.gguf")
                    make(out)
                    for set_name, text in sets:
                        r = json.loads(run("eval", "-m", out, "--ref", path, "--text", text, "--json"))
                        print(f"| {model} | {type_name} | {by} | {set_name} | {r['kl_mean']:.5f} | {r['kl_p99']:.4f} | "
                              f"{100 * r['top1_agreement']:.2f}% | {r['perplexity']:.3f} ({r['ref_perplexity']:.3f}) |",
                              flush=True)


if __name__ == "__main__":
    main()

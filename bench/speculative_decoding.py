"""Speculative decoding, by prompt lookup (`--speculative-ngram N`), by a draft model (`--draft-model FILE`) and
by the model's multi-token-prediction layer (`--speculative-mtp N`), beside plain decoding, in one run.

The prompt quotes its own context, as the seeds' summarise/quote/edit requests do: a document of
about 2,000 tokens (the GPL-3 text every Debian machine has) and a request to repeat one of its
paragraphs, whose first words end the prompt. For each model, `dsinfer run` greedy, alternating
plain and speculative runs: decode tokens/s (the time after the first token, so the prompt's
forward is apart), the draft tokens verified and accepted, and whether the two texts (token ids)
are identical, which they must be.

Models: the 1.1B Q8_0 benchmark model (bench_vs_llama_cpp.py's, random weights: its continuation
is whatever a random model loops into, not the paragraph) and, with --trained, the small Llama
trained on these licences (train_models.py), which has learned the text and quotes it; it saw 256
positions, so its document is the first 60 tokens (and the reply up to -n within the rest). The trained
Llama also drafts with stories260K (the fixture, trained on children's stories with the same vocabulary)
as its draft model. With --trained also a DeepSeek-V3.2-shaped model trained with its multi-token-prediction
layer (train_models.py's deepseek32_mtp: four layers and the one), drafting with that layer.

Then, with --trained, the multi-token-prediction layer drafting for 16 requests 8 at a time
(`dsinfer bench --concurrency 8`, which serves the same requests plainly first over the same KV memory and
prints the speedup and whether the greedy outputs are identical): each prompt the first 24 words of a
paragraph of the licences the model learned, 64 tokens generated.

Usage: python3 bench/speculative_decoding.py [--models DIR] [--trained] [-n 128] [--draft 8] [-r 2] [-t 2]
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

from bench_vs_llama_cpp import ensure_models, machine  # noqa: E402

DOCUMENT = "/usr/share/common-licenses/GPL-3"


def quoting_prompt(binary, model, doc_tokens):
    """The document cut to about doc_tokens tokens, then the request; the paragraph asked for is the third."""
    text = open(DOCUMENT, encoding="utf-8").read()
    ids = subprocess.run([binary, "tokenize", "-m", model, text], capture_output=True, text=True, check=True).stdout.split()
    # Characters per token of this vocabulary, to cut the text near doc_tokens without a detokenizer.
    document = text[: int(len(text) * doc_tokens / len(ids))]
    paragraphs = [p for p in document.split("\n\n") if len(p.split()) >= 8] or [document]
    start = " ".join(paragraphs[min(2, len(paragraphs) - 1)].split()[:8])
    return f"{document}\n\nRepeat the paragraph above that begins \"{start}\", word for word:\n\n{start}"


STORIES = os.path.join(ROOT, "..", "shared", "fixtures", "models", "stories260K.gguf")


def run(binary, model, prompt, n, threads, drafter):
    cmd = [binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos", "--show-token-ids",
           "-t", str(threads)] + drafter
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"dsinfer run failed: {done.stderr}")
    err = done.stderr
    result = {"ids": re.search(r"token ids:(.*)", err).group(1).split(),
              "tps": float(re.search(r"generation: \d+ tokens in [0-9.]+ s, ([0-9.]+) tokens/s", err).group(1))}
    spec = re.search(r"speculative decoding \([a-z -]+\): (\d+) draft tokens verified, (\d+) accepted, in (\d+) steps", err)
    if spec:
        result.update(drafted=int(spec.group(1)), accepted=int(spec.group(2)))
    return result


def batched_mtp(binary, model, threads, out_dir):
    """The bench's figures for --speculative-mtp 1..3 over 16 paragraph openings, 8 requests at a time, drafts
    cut at the default --draft-p-min 0.75 and not cut (0)."""
    paragraphs = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.islink(path) or os.path.basename(path) == "MPL-2.0":  # MPL-2.0 is held out of training
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        paragraphs += [" ".join(p.split()[:24]) for p in text.split("\n\n") if len(p.split()) >= 40]
    prompts = os.path.join(out_dir, "mtp_prompts.jsonl")
    with open(prompts, "w") as f:
        for p in paragraphs[:: max(1, len(paragraphs) // 16)][:16]:
            f.write(json.dumps({"prompt": p}) + "\n")
    rows = []
    for n, p_min in ((1, 0.75), (3, 0.75), (1, 0), (2, 0), (3, 0)):
        done = subprocess.run([binary, "bench", "-m", model, "--concurrency", "8", "--prompts", prompts, "--gen-len", "64",
                               "-t", str(threads), "--speculative-mtp", str(n), "--draft-p-min", str(p_min)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"dsinfer bench failed: {done.stderr}")
        spec = re.search(r"(\d+) draft tokens verified in (\d+) drafts, (\d+) accepted \(([0-9.]+)%\), ([0-9.]+) tokens per drafted step",
                         done.stdout)
        plain = re.search(r"plain decoding of the same requests: output tokens/s ([0-9.]+).*speedup ([0-9.]+)x.*identical: (\w+)",
                          done.stdout)
        tps = re.search(r"output tokens/s: ([0-9.]+)", done.stdout)
        rows.append((n, p_min, plain.group(1), tps.group(1), plain.group(2), spec.group(1), spec.group(3), spec.group(4), spec.group(5),
                     plain.group(3)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("--trained", action="store_true", help="also the trained small Llama and DeepSeek-V3.2 with MTP")
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("--draft", type=int, default=8)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()

    ngram = ("prompt lookup", ["--speculative-ngram", str(args.draft)])
    models = [("1.1B Q8_0 (random weights)", ensure_models(args.models)["Q8_0"], 2000, [ngram])]
    if args.trained:
        import train_models
        models.append(("trained llama (F32, 256 positions)", train_models.trained_model("llama"), 60,
                       [ngram, ("draft model stories260K", ["--draft-model", STORIES, "--draft-tokens", str(args.draft)])]))
        models.append(("trained deepseek32 with its MTP layer (F32, 256 positions)", train_models.trained_model("deepseek32_mtp"),
                       60, [(f"multi-token prediction, {n} draft{'s' if n > 1 else ''}", ["--speculative-mtp", str(n)])
                            for n in (1, 2, 3)]))
    print(f"machine: {machine()}; {args.t} threads; greedy, {args.n} tokens, up to {args.draft} drafts per step; "
          f"mean of {args.r} alternating repetitions\n")
    print("| model | drafter | prompt tokens | plain decode tok/s | speculative decode tok/s | speedup | drafts verified | "
          "accepted | identical greedy text |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, path, doc_tokens, drafters in models:
        prompt = quoting_prompt(args.dsinfer, path, doc_tokens)
        n_prompt = len(subprocess.run([args.dsinfer, "tokenize", "-m", path, prompt], capture_output=True, text=True,
                                      check=True).stdout.split())
        for drafter_name, drafter in drafters:
            plain, spec = [], []
            for _ in range(args.r):
                plain.append(run(args.dsinfer, path, prompt, args.n, args.t, []))
                spec.append(run(args.dsinfer, path, prompt, args.n, args.t, drafter))
            identical = all(s["ids"] == plain[0]["ids"] for s in plain + spec)
            p_tps = sum(r["tps"] for r in plain) / len(plain)
            s_tps = sum(r["tps"] for r in spec) / len(spec)
            print(f"| {name} | {drafter_name} | {n_prompt} | {p_tps:.2f} | {s_tps:.2f} | {s_tps / p_tps:.2f}x | "
                  f"{spec[0]['drafted']} | {spec[0]['accepted']} "
                  f"({100 * spec[0]['accepted'] / max(1, spec[0]['drafted']):.0f}%) | {'yes' if identical else 'NO'} |")
    if args.trained:
        import train_models
        print("\n16 requests, 8 at a time, 64 tokens each (`dsinfer bench --concurrency 8 --speculative-mtp N`), "
              "the trained deepseek32 with its MTP layer:\n")
        print("| draft tokens | --draft-p-min | plain output tok/s | MTP output tok/s | speedup | draft tokens verified | "
              "accepted | tokens per drafted step | identical greedy outputs |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for n, p_min, plain, mtp, speedup, verified, accepted, rate, per_step, identical in batched_mtp(
                args.dsinfer, train_models.trained_model("deepseek32_mtp"), args.t, os.path.join(ROOT, "models", "trained")):
            print(f"| {n} | {p_min} | {plain} | {mtp} | {speedup}x | {verified} | {accepted} ({rate}%) | {per_step} | {identical} |")


if __name__ == "__main__":
    main()

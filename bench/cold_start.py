"""Cold start beside llama.cpp, in one run: the seconds from `dsinfer serve`
starting to its /ready answering 200 (weights mapped and repacked, KV pool,
engine, warm-up) against the seconds llama.cpp (llama-cpp-python) takes to
load the same file and compute its first token — the least a llama.cpp server
does before it can answer. Page cache warm (each file is read once first);
alternating repetitions, median. Prints a markdown table and, for dsinfer,
the phases its log reports.

Usage: python3 bench/cold_start.py [--models DIR] [-r 5] [-t 2] [--moe]
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_vs_llama_cpp import ensure_models, ensure_moe_models, machine  # noqa: E402

LLAMA_FIRST_TOKEN = """
import sys, time
started = time.time()
from llama_cpp import Llama
model = Llama(sys.argv[1], n_ctx=2048, n_threads=int(sys.argv[2]), verbose=False)
model.eval([1] * 16)
print(time.time() - started)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dsinfer_ready(binary, model, threads):
    port = free_port()
    started = time.time()
    process = subprocess.Popen([binary, "serve", "-m", model, "--port", str(port), "-t", str(threads)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while time.time() - started < 300:  # only a bound against a hang
            if process.poll() is not None:
                raise RuntimeError(process.stdout.read())
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.002)
        seconds = time.time() - started
    finally:
        process.terminate()
    log = process.communicate()[0]
    phases = re.search(r"loaded in [0-9.]+ s: (.*?) \(weights file", log)
    return seconds, phases.group(1) if phases else "?"


def llama_first_token(model, threads):
    started = time.time()
    subprocess.run([sys.executable, "-c", LLAMA_FIRST_TOKEN, model, str(threads)], check=True, capture_output=True)
    return time.time() - started  # the interpreter's start and import count too: a server pays them as well


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(ROOT, "models", "bench"))
    parser.add_argument("--moe", action="store_true", help="the DeepSeek-V2-Lite-shaped MoE model instead of the Llama")
    parser.add_argument("--dsinfer", default=os.path.join(ROOT, "build", "dsinfer"))
    parser.add_argument("-r", type=int, default=5)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    models = ensure_moe_models(args.models) if args.moe else ensure_models(args.models)
    models.pop("F16", None)
    print(f"machine: {machine()}; {args.t} threads; median of {args.r} alternating repetitions, page cache warm\n")
    print("| weights | dsinfer serve to /ready, s | llama.cpp load + first token, s | ratio | dsinfer's phases (last run) |")
    print("| --- | --- | --- | --- | --- |")
    for name, path in models.items():
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
        ours, theirs, phases = [], [], ""
        for _ in range(args.r):
            seconds, phases = dsinfer_ready(args.dsinfer, path, args.t)
            ours.append(seconds)
            theirs.append(llama_first_token(path, args.t))
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {phases} |")


if __name__ == "__main__":
    main()

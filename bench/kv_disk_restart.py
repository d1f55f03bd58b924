"""Time to first token of a long prompt cold, from the pool, and from the disk
tier after a restart, in one run.

Starts `dsinfer serve --kv-disk-dir DIR` (a fresh directory), sends a prompt
of --tokens random token ids (max_tokens 1, with logprobs) three times: cold
(computed), again (the pool's prefix cache), and after stopping and starting
the server on the same directory (read back from the disk tier). Prints each
time and its ratio to the cold one, and checks that the three answers' token
and logprobs are identical (the tier's pages are the computed ones, byte for byte).

Usage: python3 bench/kv_disk_restart.py [--model FILE] [--tokens 4096] [-t 2]
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from server_process import STORIES, ServerProcess  # noqa: E402


def complete(base, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 5}).encode()
    request = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=7200) as r:
        reply = json.loads(r.read())
    return time.perf_counter() - started, reply


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=STORIES)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="kv-disk-")
    prompt = [random.Random(7).randrange(3, 1000) for _ in range(args.tokens)]
    serve = ("--kv-disk-dir", directory, "--kv-disk-bytes", "64GiB", "--ctx-size", str(args.tokens + args.tokens // 10 + 64), "-t", str(args.t),
             "--max-num-seqs", "1", "--request-timeout", "7200")
    runs = []
    server = ServerProcess(*serve, model=args.model)
    try:
        runs.append(("cold (computed)",) + complete(server.base, prompt))
        runs.append(("again (pool hit)",) + complete(server.base, prompt))
    finally:
        server.stop()
    server = ServerProcess(*serve, model=args.model)
    try:
        runs.append(("after a restart (disk tier)",) + complete(server.base, prompt))
        metrics = {l.split()[0]: l.split()[1] for l in urllib.request.urlopen(server.base + "/metrics").read().decode().splitlines()
                   if l.startswith("dsinfer:kv_disk_")}
    finally:
        server.stop()
    cold = runs[0][1]
    print(f"model {os.path.basename(args.model)}, a prompt of {args.tokens} tokens, {args.t} threads\n")
    print("| run | TTFT s | cached tokens | cold / this |")
    print("|---|---|---|---|")
    for name, seconds, reply in runs:
        print(f"| {name} | {seconds:.3f} | {reply['usage']['prompt_tokens_details']['cached_tokens']} | {cold / seconds:.1f}x |")
    answers = [json.dumps(reply["choices"][0]["logprobs"]) for _, _, reply in runs]
    print(f"\nlogprobs identical in all three: {len(set(answers)) == 1}")
    print(f"disk tier after the restart: hits {metrics['dsinfer:kv_disk_hits']}, read {int(float(metrics['dsinfer:kv_disk_read_bytes'])) >> 20} MiB, "
          f"corrupt {metrics['dsinfer:kv_disk_corrupt_pages']}")
    if len(set(answers)) != 1:
        sys.exit("the answers differ")


if __name__ == "__main__":
    main()

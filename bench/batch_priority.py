"""Online time to first token with and without a batch running, in one run.

Starts `dsinfer serve --store-dir` and sends --requests streamed online
completions, one every --interval seconds, measuring each one's time to its
first token at the client (the first SSE chunk carries it). Phases alternate:
online alone, then online while a batch of --batch-lines long lines
(--batch-tokens output tokens each, --lines-in-flight at once) runs, then
alone again, and so on for -r repetitions, so that machine noise hits both
alike. Prints TTFT p50 and p99 of each phase (p99 over every repetition's
requests together), their ratio, and the batch lines finished during the
batch phases (the batch does progress: it is below, not stopped).

The issue's bar: online TTFT p99 with the batch within 20% of its value without.

A request that arrives while a step of batch work runs waits for that step
(the engine schedules per step): the ratio is largest for prompts that take
about one decode step (--prompt-words small) and shrinks as prompts grow.

Usage: python3 bench/batch_priority.py [--model FILE] [--requests 40] [--interval 0.2] [--prompt-words 8] [--batch-lines 1000]
       [--batch-tokens 400] [--lines-in-flight 4] [-r 2] [-t 2]
"""

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from server_process import STORIES, ServerProcess  # noqa: E402


def post(base, path, body, content_type="application/json"):
    request = urllib.request.Request(base + path, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.loads(r.read())


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())


def ttft_seconds(base, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True}).encode()
    request = urllib.request.Request(base + "/v1/completions", data=body, method="POST", headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {"):
                first = time.perf_counter() - start
                break
        r.read()
    return first


WORDS = "the contract between the parties shall remain in force until either party gives notice in writing".split()


SENT = [0]  # requests sent so far: every prompt of the run differs from the first token


def online_series(base, n, interval, words):
    times = []
    for _ in range(n):
        i = SENT[0]
        SENT[0] += 1
        started = time.perf_counter()
        # Each prompt its own from its first token: nothing comes from the prefix cache.
        body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
        times.append(ttft_seconds(base, f"Request {i}: {body}"))
        time.sleep(max(0.0, interval - (time.perf_counter() - started)))
    return times


def start_batch(base, lines, tokens):
    rows = [{"custom_id": f"b{i}", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": f"The long tale number {i} begins", "max_tokens": tokens, "ignore_eos": True}} for i in range(lines)]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    boundary = "benchboundary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.jsonl\"\r\n\r\n").encode() + content + \
        f"\r\n--{boundary}--\r\n".encode()
    uploaded = post(base, "/v1/files", form, f"multipart/form-data; boundary={boundary}")
    return post(base, "/v1/batches", json.dumps({"input_file_id": uploaded["id"], "endpoint": "/v1/completions",
                                                 "completion_window": "24h"}).encode())["id"]


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=STORIES)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--prompt-words", type=int, default=8, help="each online prompt's length in words")
    parser.add_argument("--batch-lines", type=int, default=1000)
    parser.add_argument("--batch-tokens", type=int, default=400)
    parser.add_argument("--lines-in-flight", type=int, default=4)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("-t", type=int, default=2)
    args = parser.parse_args()
    store = tempfile.mkdtemp(prefix="batch-priority-")
    server = ServerProcess("--store-dir", store, "--batch-lines-in-flight", str(args.lines_in_flight),
                           "-t", str(args.t), "--ctx-size", "2048", model=args.model)
    alone, beside, finished = [], [], 0
    try:
        online_series(server.base, 5, 0, args.prompt_words)  # warm-up, not counted
        for _ in range(args.r):
            alone += online_series(server.base, args.requests, args.interval, args.prompt_words)
            batch = start_batch(server.base, args.batch_lines, args.batch_tokens)
            deadline = time.time() + 60
            while server.metric("dsinfer:num_requests_running") < args.lines_in_flight:
                assert time.time() < deadline, "the batch lines did not start"
                time.sleep(0.01)
            before = get(server.base, f"/v1/batches/{batch}")["request_counts"]["completed"]
            beside += online_series(server.base, args.requests, args.interval, args.prompt_words)
            state = get(server.base, f"/v1/batches/{batch}")
            finished += state["request_counts"]["completed"] - before
            if state["status"] != "in_progress":
                sys.exit(f"the batch ended ({state['status']}) before the online requests did: give it more lines")
            post(server.base, f"/v1/batches/{batch}/cancel", b"{}")
            while get(server.base, f"/v1/batches/{batch}")["status"] != "cancelled":
                time.sleep(0.05)
    finally:
        server.stop()
    print(f"model {os.path.basename(args.model)}, {args.r} x {args.requests} online requests of {args.prompt_words} words every "
          f"{args.interval} s; batch: "
          f"{args.lines_in_flight} lines in flight of {args.batch_tokens} tokens\n")
    print("| online TTFT | alone | beside a batch | ratio |")
    print("|---|---|---|---|")
    for q in (50, 99):
        a, b = percentile(alone, q) * 1e3, percentile(beside, q) * 1e3
        print(f"| p{q} ms | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    print(f"\nbatch lines finished during the batch phases: {finished}")


if __name__ == "__main__":
    main()

"""/health while the engine is busy: one 30,000-token prompt prefilled by a
small random-weight model (chunks of --max-num-batched-tokens per step),
with /health polled every 20 ms from another connection throughout. Prints
the prefill's duration and the health probes' latency (p50, p99, max) beside
the same probes against the idle server, measured in the same run: health
is answered off the engine thread, so a long prefill should not move it.

Usage: python3 bench/health_during_prefill.py [--tokens 30000] [--chunk 2048]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

from make_model import write_model  # noqa: E402
from server_process import ServerProcess  # noqa: E402


def probe(base, latencies, stop):
    while not stop.is_set():
        started = time.perf_counter()
        with urllib.request.urlopen(base + "/health", timeout=10) as r:
            r.read()
        latencies.append((time.perf_counter() - started) * 1e3)
        time.sleep(0.02)


def summary(latencies):
    ordered = sorted(latencies)
    return (f"{len(ordered)} | {statistics.median(ordered):.2f} | {ordered[int(0.99 * (len(ordered) - 1))]:.2f} | "
            f"{ordered[-1]:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=30000)
    parser.add_argument("--chunk", type=int, default=2048)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(os.path.join(tmp, "long.gguf"), n_embd=128, n_ff=256, n_head=4, n_head_kv=2, n_layer=2,
                            n_ctx=args.tokens + 1024)
        server = ServerProcess("--ctx-size", str(args.tokens + 1024), "--max-num-batched-tokens", str(args.chunk),
                               "--kv-cache-memory", "512M", model=model)
        try:
            idle, busy, stop = [], [], threading.Event()
            prober = threading.Thread(target=probe, args=(server.base, idle, stop))
            prober.start()
            time.sleep(2)
            stop.set()
            prober.join()
            stop.clear()
            prober = threading.Thread(target=probe, args=(server.base, busy, stop))
            prober.start()
            prompt = [1] + [3 + (i * 37) % 400 for i in range(args.tokens - 1)]
            started = time.time()
            request = urllib.request.Request(server.base + "/v1/completions", method="POST",
                                             data=json.dumps({"prompt": prompt, "max_tokens": 1}).encode())
            urllib.request.urlopen(request, timeout=600).read()
            prefill = time.time() - started
            stop.set()
            prober.join()
        finally:
            server.stop()
    print(f"prefill of {args.tokens} tokens in chunks of {args.chunk}: {prefill:.2f} s\n")
    print("| /health | probes | p50 ms | p99 ms | max ms |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| idle server | {summary(idle)} |")
    print(f"| during the prefill | {summary(busy)} |")


if __name__ == "__main__":
    main()

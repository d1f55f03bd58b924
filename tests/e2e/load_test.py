"""Overload: N concurrent streaming requests, several times what the server
holds in flight, on loopback. Every answer must be 200, 429 or 503 with a
well-formed body, nothing may hang past its timeout, and /health must answer
throughout. Prints a table; exits non-zero on any violation.

    python3 tests/e2e/load_test.py [--factor 4] [--max-in-flight 16]
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_process import ServerProcess  # noqa: E402


def one_request(port, max_tokens, timeout, out):
    start = time.time()
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True, "temperature": 0.8})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read().decode()
        ok = False
        if r.status == 200:
            events = [line[6:] for line in data.split("\n") if line.startswith("data: ")]
            ok = events[-1] == "[DONE]" and all("choices" in json.loads(e) for e in events[:-1])
        elif r.status in (429, 503):
            ok = "message" in json.loads(data)["error"] and r.getheader("Retry-After") is not None
        out.append((r.status, ok, time.time() - start))
    except Exception as e:  # noqa: BLE001 - a hang or a broken connection is what we count
        out.append((repr(e), False, time.time() - start))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--max-in-flight", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    server = ServerProcess("--max-num-seqs", str(args.max_in_flight // 2), "--max-in-flight", str(args.max_in_flight),
                           "--request-timeout", str(args.timeout), "--rate", "50", "--burst", str(args.max_in_flight * 2))
    results, health = [], []
    stop = threading.Event()

    def watch_health():
        while not stop.is_set():
            t = time.time()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
                conn.request("GET", "/health")
                health.append((conn.getresponse().status, time.time() - t))
            except Exception as e:  # noqa: BLE001
                health.append((repr(e), time.time() - t))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_health)
    watcher.start()
    n = args.factor * args.max_in_flight
    threads = [threading.Thread(target=one_request, args=(server.port, args.max_tokens, args.timeout + 10, results))
               for _ in range(n)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    stop.set()
    watcher.join()
    alive = server.process.poll() is None
    rss = server.rss_kib()
    server.stop()

    by_status = {}
    for status, ok, seconds in results:
        by_status.setdefault(status, []).append((ok, seconds))
    print(f"{n} concurrent streaming requests against --max-in-flight {args.max_in_flight}, {elapsed:.1f} s")
    print("| status | count | well-formed | p50 s | max s |")
    print("| --- | --- | --- | --- | --- |")
    for status, rows in sorted(by_status.items(), key=lambda kv: str(kv[0])):
        times = [s for _, s in rows]
        print(f"| {status} | {len(rows)} | {sum(ok for ok, _ in rows)} | {statistics.median(times):.2f} | {max(times):.2f} |")
    health_ok = [s for st, s in health if st == 200]
    print(f"/health: {len(health_ok)} of {len(health)} answered 200, slowest {max(health_ok or [0]):.3f} s; server alive: {alive}; RSS {rss / 1024:.1f} MiB")
    failures = [r for r in results if r[0] not in (200, 429, 503) or not r[1] or r[2] > args.timeout + 5]
    if failures or len(health_ok) != len(health) or not alive or 200 not in by_status:
        print("FAILED:", failures[:5])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""No leak: a few thousand requests (streamed and not, completions and chat,
some cancelled mid-stream) through one server; resident memory is sampled
after warm-up and at the end and must stay flat.

    python3 tests/e2e/soak.py [--requests 3000] [--clients 4]
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_process import ServerProcess  # noqa: E402


def run_client(port, count, offset, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(offset, offset + count):
        kind = i % 4
        if kind == 0:
            path, body = "/v1/completions", {"prompt": f"Once upon a time {i}", "max_tokens": 16}
        elif kind == 1:
            path, body = "/v1/completions", {"prompt": "The little dog", "max_tokens": 16, "stream": True, "logprobs": 2}
        elif kind == 2:
            path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": f"story {i}"}], "max_tokens": 16,
                                                  "stream": True, "stream_options": {"include_usage": True}}
        else:  # a client that leaves mid-stream
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", "/v1/completions", json.dumps({"prompt": "Tom", "max_tokens": 200, "stream": True}))
            r = c.getresponse()
            r.read(64)
            c.close()
            continue
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            errors.append((r.status, data[:200]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    server = ServerProcess("--chat-template", "deepseek-r1", "--rate", "100000", "--burst", "100000")
    errors = []

    def batch(n):
        per = n // args.clients
        threads = [threading.Thread(target=run_client, args=(server.port, per, k * per, errors)) for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    batch(args.requests // 10)  # warm-up: allocator pools, thread stacks, metric series
    rss_warm = server.rss_kib()
    batch(args.requests - args.requests // 10)
    rss_end = server.rss_kib()
    deadline = time.time() + 2  # the last clients' cancellations take effect within a step
    while server.metric("dsinfer:kv_pages_held") > 0 and time.time() < deadline:
        time.sleep(0.02)
    held = server.metric("dsinfer:kv_pages_held")
    server.stop()
    growth = (rss_end - rss_warm) / rss_warm
    print(f"{args.requests} requests, {args.clients} clients: RSS after warm-up {rss_warm / 1024:.1f} MiB, "
          f"at the end {rss_end / 1024:.1f} MiB ({growth * 100:+.1f}%); KV pages held at the end {held:.0f}; errors {len(errors)}")
    if errors or held != 0 or growth > 0.05:
        print("FAILED", errors[:3])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A thousand open streaming connections on a handful of server threads: one
client thread multiplexes N sockets (selectors), each a streamed completion;
every stream must end in 'data: [DONE]', and the server's thread count is
reported beside N.

    python3 tests/e2e/many_streams.py [--streams 1000]
"""

import argparse
import json
import os
import resource
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_process import ServerProcess  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=40)
    args = parser.parse_args()
    n = args.streams
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the server inherits it
    if soft < 2 * n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2 * n + 100), hard))
    server = ServerProcess("--max-num-seqs", "64", "--max-in-flight", str(n), "--rate", "100000", "--burst", str(2 * n))
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": args.max_tokens, "stream": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
               str(len(body)).encode() + b"\r\n\r\n" + body)
    selector = selectors.DefaultSelector()
    received = {}
    start = time.time()
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(request)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ, i)
        received[i] = b""
    peak_threads, open_streams, done = 0, n, 0
    deadline = time.time() + 300
    while open_streams and time.time() < deadline:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            received[key.data] += chunk
            if not chunk or received[key.data].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                selector.unregister(key.fileobj)
                key.fileobj.close()
                open_streams -= 1
                done += received[key.data].startswith(b"HTTP/1.1 200") and b"data: [DONE]" in received[key.data]
        peak_threads = max(peak_threads, server.status_field("Threads"))
    elapsed = time.time() - start
    server.stop()
    print(f"{n} concurrent streams: {done} ended with [DONE] in {elapsed:.1f} s; server threads at most {peak_threads}")
    return 0 if done == n and peak_threads < 32 else 1


if __name__ == "__main__":
    sys.exit(main())

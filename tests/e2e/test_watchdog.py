"""The engine watchdog: a step that runs past --stall-timeout makes /health
and /ready answer 503 "stalled" with the reason, a metric and a log line,
while they keep answering quickly (they never wait on the engine thread);
when the step ends they are 200 again. With --exit-on-stall the process
exits with code 4 for its supervisor. The stall is a real one: a 4,000-token
prefill of a random-weight model in one step, several times the 0.5 s stall
timeout even on the fastest kernels measured (2,000 tokens of 6 layers had
come down to 0.8 s, a stall too short for the watchdog's 250 ms looks to be
sure of seeing it). The timeouts here only bound the test against a hang."""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from server_process import ServerProcess

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_model import write_model  # noqa: E402

PROMPT = [1] + [3 + (i * 37) % 500 for i in range(4000)]


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    return write_model(str(tmp_path_factory.mktemp("slow") / "slow.gguf"), n_embd=512, n_ff=1536, n_head=8, n_head_kv=8,
                       n_layer=12, n_ctx=4096, dtype="f32")


def get(url):
    started = time.time()
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read()), time.time() - started
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), time.time() - started


def complete_in_background(server):
    def run():
        request = urllib.request.Request(server.base + "/v1/completions", method="POST",
                                         data=json.dumps({"prompt": PROMPT, "max_tokens": 2}).encode())
        try:
            urllib.request.urlopen(request, timeout=120).read()
        except OSError:
            pass  # --exit-on-stall: the server goes away mid-request
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_stalled_step_is_reported_and_health_keeps_answering(slow_model):
    server = ServerProcess("--ctx-size", "4096", "--max-num-batched-tokens", "4096", "--stall-timeout", "0.5", model=slow_model)
    try:
        assert get(server.base + "/health")[0] == 200
        thread = complete_in_background(server)
        seen, refused = [], None
        while thread.is_alive():
            seen.append(get(server.base + "/health"))
            if seen[-1][0] == 503 and refused is None:
                # Not ready while stalled: a new request is refused rather than queued behind the stall.
                request = urllib.request.Request(server.base + "/v1/completions", method="POST",
                                                 data=json.dumps({"prompt": "hi", "max_tokens": 1}).encode())
                try:
                    urllib.request.urlopen(request, timeout=10)
                    refused = (200, "")
                except urllib.error.HTTPError as e:
                    refused = (e.code, json.loads(e.read())["error"]["message"], e.headers.get("Retry-After"))
            time.sleep(0.05)
        thread.join()
        assert refused and refused[0] == 503 and "stalled" in refused[1] and refused[2], refused
        stalled = [body for status, body, _ in seen if status == 503]
        assert stalled, "the multi-second step was never reported"
        assert all(b["status"] == "stalled" and "without finishing a step" in b["reason"] for b in stalled)
        slowest = max(latency for _, _, latency in seen)
        assert slowest < 1.0, "health waited on the engine"  # a bound against waiting on the step, not a speed check
        print(f"\n/health: {len(seen)} probes through a {len(stalled) * 0.05:.1f}+ s stall, slowest {slowest * 1e3:.1f} ms")
        assert get(server.base + "/health")[0] == 200 and get(server.base + "/ready")[0] == 200
        deadline = time.time() + 5  # the watchdog looks every 250 ms; this only bounds the wait
        while "engine progressing again" not in server.output() and time.time() < deadline:
            time.sleep(0.05)
        log = server.output()
        assert "engine stalled" in log and "engine progressing again" in log
    finally:
        server.stop()


def test_exit_on_stall_ends_the_process(slow_model):
    server = ServerProcess("--ctx-size", "4096", "--max-num-batched-tokens", "4096", "--stall-timeout", "0.5", "--exit-on-stall",
                           model=slow_model)
    try:
        thread = complete_in_background(server)
        assert server.process.wait(timeout=60) == 4
        thread.join()
        assert "--exit-on-stall" in server.output()
    finally:
        if server.process.poll() is None:
            server.stop()

"""The engine profiler: `dsinfer serve --trace FILE` writes every step of a
batched run as a Chrome trace (JSON array of "X" events); the file parses as
JSON, every op lies inside its step, and the ops' durations add up to the
steps' within 5% (what no op covers is the loop's own bookkeeping between
spans). POST /admin/trace records the next N steps on demand; /metrics carries
the per-op totals. The timeouts only bound the test against a hang."""

import json
import threading
import time
import urllib.error
import urllib.request

from server_process import ServerProcess

ADMIN = {"Authorization": "Bearer admin-key-1"}


def complete(server, n=4, max_tokens=24):
    def one():
        request = urllib.request.Request(server.base + "/v1/completions", method="POST",
                                         data=json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens,
                                                          "ignore_eos": True}).encode())
        urllib.request.urlopen(request, timeout=60).read()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def check_trace(events, batched=True):
    steps = [e for e in events if e.get("cat") == "step"]
    ops = [e for e in events if e.get("cat") == "op"]
    assert steps and ops
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in steps + ops)
    if batched:
        assert max(s["args"]["sequences"] for s in steps) > 1, "no step was batched"
    names = {e["name"] for e in ops}
    for expected in ("schedule", "batch", "attention", "rms_norm", "sample", "deliver"):
        assert expected in names, (expected, names)
    assert any(name.startswith("matmul ") for name in names), names
    assert any(e["name"] == "layer dense" for e in events)
    # Each op inside a step; their sum equals the steps' within 5%.
    bounds = sorted((s["ts"], s["ts"] + s["dur"]) for s in steps)
    for op in ops:
        assert any(begin - 1e-3 <= op["ts"] and op["ts"] + op["dur"] <= end + 1e-3 for begin, end in bounds), op
    step_total, op_total = sum(s["dur"] for s in steps), sum(o["dur"] for o in ops)
    assert abs(op_total - step_total) <= 0.05 * step_total, (op_total, step_total)
    return steps, op_total / step_total


def test_trace_file_of_a_batched_run(tmp_path):
    path = str(tmp_path / "trace.json")
    server = ServerProcess("--trace", path, "--ctx-size", "256")
    try:
        complete(server)
        request = urllib.request.Request(server.base + "/metrics")
        metrics = urllib.request.urlopen(request, timeout=10).read().decode()
        assert 'dsinfer:op_seconds_total{op="attention"}' in metrics
        traced = next(float(line.split()[1]) for line in metrics.splitlines() if line.startswith("dsinfer:traced_steps_total "))
        assert traced > 0
    finally:
        server.stop()  # a clean exit closes the array
    with open(path) as f:
        events = json.load(f)
    steps, coverage = check_trace(events)
    print(f"\n{len(steps)} steps traced; the ops cover {coverage:.1%} of the step time")


def test_admin_trace_records_the_next_steps(tmp_path):
    admin_keys = tmp_path / "admin.txt"
    admin_keys.write_text("admin-key-1 ops\n")
    path = str(tmp_path / "trace.json")
    server = ServerProcess("--admin-keys", str(admin_keys), "--ctx-size", "256")

    def post(body):
        request = urllib.request.Request(server.base + "/admin/trace", method="POST", headers=ADMIN, data=json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
    try:
        assert post({"path": path, "steps": 0})[0] == 400
        assert post({"path": path, "steps": 5, "extra": 1})[0] == 400
        status, answer = post({"path": path, "steps": 5})
        assert status == 200 and answer["steps"] == 5, answer
        assert post({"path": path, "steps": 5})[0] == 409  # one at a time: the first waits for the next step
        complete(server)
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(path) as f:
                text = f.read()
            if text.endswith("]\n"):
                break
            time.sleep(0.05)
        events = json.loads(text)
        steps, _ = check_trace(events, batched=False)  # the first five steps may come before the others join
        assert len(steps) == 5
        assert post({"path": path, "steps": 1})[0] == 200  # done: another may start
    finally:
        server.stop()

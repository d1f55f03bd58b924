"""Hot model swap through the admin API, under load: 16 streaming clients run
for the whole test while version A (a random-weight Llama) is swapped for
version B (a scripted model whose every reply is one known sentence). No
request fails; every response names the version that served it (header and
system_fingerprint); requests that began before the swap finish on A, those
after it run on B; A's weights and KV pool are freed once its last request
has ended (resident memory falls by at least A's file, which every forward
reads whole, so all of it was resident). A swap to a corrupt file, or to one
that cannot fit beside A, leaves A serving with a clear error. The timeouts
only bound the test against a hang."""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from scripted_model import write_scripted_model
from server_process import ServerProcess

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_model import write_model  # noqa: E402

ADMIN = {"Authorization": "Bearer admin-key-1"}
TENANT = {"Authorization": "Bearer sk-alpha"}
SCRIPT = ["Version", " B", " answers", " this", "."]
B_TEXT = "".join(SCRIPT)
N_CLIENTS = 16


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("swap")
    a = write_model(str(root / "a.gguf"), n_embd=512, n_ff=2048, n_head=8, n_head_kv=8, n_layer=4, n_ctx=512)
    b = write_scripted_model(str(root / "b.gguf"), SCRIPT, "{{ messages[0]['content'] }}")
    corrupt = root / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + os.urandom(4096))
    admin_keys = root / "admin.txt"
    admin_keys.write_text("admin-key-1 ops\n")
    keys = root / "keys.txt"
    keys.write_text("sk-alpha alpha\n")
    return {"a": a, "b": b, "corrupt": str(corrupt), "admin_keys": str(admin_keys), "keys": str(keys)}


def call(server, method, path, body=None, headers=ADMIN, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def stream_once(server, record, max_tokens):
    """One streamed completion; appends what the client saw."""
    started = time.time()
    request = urllib.request.Request(server.base + "/v1/completions", method="POST", headers=TENANT,
                                     data=json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                                                      "temperature": 0, "ignore_eos": True}).encode())
    entry = {"started": started, "ok": False}
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            entry["version"] = r.headers.get("X-Model-Version")
            text, fingerprints, done, ttft = "", set(), False, None
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                fingerprints.add(chunk["system_fingerprint"])
                if ttft is None:
                    ttft = time.time() - started
                text += chunk["choices"][0]["text"]
            entry.update(ok=done and r.status == 200, text=text, fingerprints=fingerprints, ttft=ttft)
    except (OSError, AssertionError) as e:
        entry["error"] = repr(e)
    entry["ended"] = time.time()
    record.append(entry)


def clients(server, stop):
    record = []
    def loop(i):
        # Lengths differ per client, so that requests start and end at scattered times.
        while not stop.is_set():
            stream_once(server, record, 100 + 6 * i)  # at most 190: B's byte-level prompt is 26 tokens of the 256
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(N_CLIENTS)]
    for t in threads:
        t.start()
    return record, threads


def versions(server):
    status, listed, _ = call(server, "GET", "/admin/models")
    assert status == 200
    return {v["version"]: v for v in listed["data"]}


def test_hot_swap_under_load(models):
    server = ServerProcess("--api-keys", models["keys"], "--admin-keys", models["admin_keys"], "--model-version", "A",
                           "--ctx-size", "256", "--max-num-seqs", "16", "--max-in-flight", "64", "--kv-cache-memory", "64M",
                           "--rate", "1000", "--burst", "1000",
                           model=models["a"])
    stop = threading.Event()
    threads = []
    try:
        # The admin API takes admin keys only.
        assert call(server, "GET", "/admin/models", headers=TENANT)[0] == 401
        assert call(server, "POST", "/admin/models", {"path": models["b"], "version": "B"}, headers=TENANT)[0] == 401
        record, threads = clients(server, stop)
        server.wait_for_in_flight(N_CLIENTS)
        time.sleep(2.0)  # TTFT under steady load, before any swap

        status, answer, _ = call(server, "POST", "/admin/models", {"path": models["corrupt"], "version": "bad"})
        assert status == 422 and answer["serving"] == "A" and "goes on serving" in answer["error"]["message"], answer
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        status, answer, _ = call(server, "POST", "/admin/models",
                                 {"path": models["b"], "version": "B", "kv_cache_memory": str(2 * available)})
        assert status == 507 and answer["error"]["code"] == "insufficient_memory" and answer["serving"] == "A", answer
        assert "drain_first" in answer["error"]["message"] and answer["error"]["needed_bytes"] > available
        status, answer, _ = call(server, "POST", "/admin/models", {"path": models["b"], "version": "B", "bogus_option": 1})
        assert status == 400 and "bogus_option" in answer["error"]["message"]
        assert set(versions(server)) == {"A"}

        before = versions(server)["A"]
        swap_started = time.time()
        status, answer, _ = call(server, "POST", "/admin/models",
                                 {"path": models["b"], "version": "B", "check": {"prompt": "hello", "expected_output": B_TEXT}})
        swap_ended = time.time()
        assert status == 200 and answer["version"] == "B" and answer["previous"] == "A", answer
        both = versions(server)
        rss_both = server.rss_kib() * 1024
        assert both["B"]["state"] == "serving" and both["A"]["state"] == "retiring"
        time.sleep(2.0)  # B under the same load
        stop.set()
        for t in threads:
            t.join(timeout=120)
        threads = []
        deadline = time.time() + 60
        while "A" in versions(server) and time.time() < deadline:
            time.sleep(0.1)
        after = versions(server)
        rss_after = server.rss_kib() * 1024
        log = server.output()
        access = [line for line in server.access_log() if line["path"] == "/v1/completions"]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        server.stop()

    failed = [e for e in record if not e["ok"]]
    assert not failed, failed[:3]
    for e in record:
        assert e["version"] in ("A", "B") and e["fingerprints"] == {e["version"]}, e
        if e["version"] == "B":
            assert e["text"] == B_TEXT, e
        else:
            assert B_TEXT not in e["text"], e
    assert all(e["version"] == "A" for e in record if e["started"] < swap_started)
    assert all(e["version"] == "B" for e in record if e["started"] > swap_ended)
    straddling = [e for e in record if e["version"] == "A" and e["ended"] > swap_ended]
    assert straddling, "no request on A was still running when the swap ended"
    assert set(after) == {"B"}, "A was not released after its last request"
    released = rss_both - rss_after
    assert released >= 0.8 * before["weights_file_bytes"], (rss_both, rss_after, before)
    assert "version 'A' released after its last request" in log
    assert access and all(line["version"] in ("A", "B") for line in access)

    ttft_before = [e["ttft"] for e in record if e["started"] < swap_started]
    ttft_during = [e["ttft"] for e in record if swap_started - 2 <= e["started"] <= swap_ended + 2]
    print(f"\nswap A -> B: {swap_ended - swap_started:.2f} s (load {answer['load_seconds']:.2f} s: {answer['load_phases']}); "
          f"{len(straddling)} requests finished on A after it; max TTFT before {max(ttft_before) * 1e3:.0f} ms, "
          f"around the swap {max(ttft_during, default=0) * 1e3:.0f} ms ({len(ttft_during)} requests); {len(record)} requests, none failed; "
          f"A's KV pool {before['kv_pool_bytes'] >> 20} MiB and weights {before['weights_file_bytes'] >> 20} MiB freed: "
          f"resident {rss_both >> 20} -> {rss_after >> 20} MiB")


def test_drain_first_swap_states_its_window(models):
    server = ServerProcess("--admin-keys", models["admin_keys"], "--model-version", "A", "--ctx-size", "256",
                           "--kv-cache-memory", "16M", model=models["a"])
    try:
        status, answer, _ = call(server, "POST", "/admin/models", {"path": models["b"], "version": "B", "mode": "drain_first"},
                                 headers={})
        assert status == 401
        status, answer, _ = call(server, "POST", "/admin/models", {"path": models["b"], "version": "B", "mode": "drain_first"})
        assert status == 200 and answer["mode"] == "drain_first" and answer["unavailable_seconds"] > 0, answer
        assert set(versions(server)) == {"B"}
        status, reply, headers = call(server, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 16}, headers={})
        assert status == 200 and reply["choices"][0]["text"] == B_TEXT and headers["X-Model-Version"] == "B"
        # A failed drain-first swap loads the old version again.
        status, answer, _ = call(server, "POST", "/admin/models", {"path": models["corrupt"], "version": "C", "mode": "drain_first"})
        assert status == 422 and answer["serving"] == "B", answer
        status, answer, _ = call(server, "POST", "/admin/models",
                                 {"path": models["a"], "version": "A2", "mode": "drain_first", "check": {"prompt": "x", "expected_output": "nope"}})
        assert status == 422 and "check failed" in answer["error"]["message"] and "loaded again" in answer["error"]["message"], answer
        assert set(versions(server)) == {"B"}
        assert call(server, "GET", "/ready", headers={})[0] == 200
    finally:
        server.stop()


def test_admin_api_is_off_without_admin_keys(models):
    server = ServerProcess("--ctx-size", "256", model=models["b"])
    try:
        status, answer, _ = call(server, "GET", "/admin/models", headers={})
        assert status == 403 and "--admin-keys" in answer["error"]["message"]
    finally:
        server.stop()

"""`dsinfer router` in front of three `dsinfer serve` children: requests pass
through (streams stay streams); kill -9 of one instance under a streaming
load fails no request that had not started streaming (those are retried on
another instance), ends the streams it was serving with an error event, gets
it ejected, restarted and readmitted when ready; an operator drains and
resumes an instance; prefix affinity keeps each conversation on one instance
and is measured against random routing in the same run (prefix-cache hit
rate). The timeouts only bound the test against a hang; the ejection time is
printed, not asserted."""

import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from router_process import ADMIN, Router
from server_process import DSINFER, STORIES

def child(id):
    return {"id": id, "version": "v1", "model": STORIES, "args": ["--ctx-size", "256"]}


def stream(base, record):
    started = time.time()
    request = urllib.request.Request(base + "/v1/completions", method="POST",
                                     data=json.dumps({"prompt": "Once upon a time", "max_tokens": 96, "stream": True,
                                                      "ignore_eos": True}).encode())
    entry = {"started": started, "chunks": 0, "done": False, "error": None}
    record.append(entry)  # at once: the test watches streams in flight
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            entry["instance"] = r.headers.get("X-Dsinfer-Instance")
            for line in r:
                line = line.decode().strip()
                if line == "data: [DONE]":
                    entry["done"] = True
                    break
                if line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        entry["error"] = chunk["error"]["message"]
                    else:
                        entry["chunks"] += 1
    except (OSError, ValueError) as e:
        entry["error"] = repr(e)


def test_kill_9_of_an_instance_under_streaming_load(tmp_path):
    keys = tmp_path / "instance-admin.txt"
    keys.write_text("instance-key ops\n")
    router = Router(tmp_path, [dict(child(i), args=["--ctx-size", "256", "--admin-keys", str(keys)]) for i in ("a", "b", "c")])
    stop, record, threads = threading.Event(), [], []
    try:
        # 'b' paced at 10 ms a step (far under the latency rule's 250 ms margin), so that a stream it has begun is
        # still running when the kill lands: unpaced, the tiny model can finish all 96 tokens before it does.
        debug_hook(router, "b", {"step_delay_ms": 10})
        victim = router.instances()["b"]
        def loop():
            while not stop.is_set():
                stream(router.base, record)
        threads = [threading.Thread(target=loop) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(2)
        deadline = time.time() + 30
        # Killed while a stream it serves has begun (one only queued there is retried elsewhere).
        while not any(e.get("instance") == "b" and 0 < e["chunks"] < 48 and not e["done"] and not e["error"] for e in list(record)):
            assert time.time() < deadline, "'b' took no stream"
            time.sleep(0.01)
        predecessor = router.instances()["b"]
        assert predecessor["latency_ms"] is not None, predecessor  # the router has probed it under the load
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.time()
        while router.instances()["b"]["state"] == "healthy":
            assert time.time() - killed < 10, "never ejected"
            time.sleep(0.02)
        ejected_after = time.time() - killed
        while not (router.instances()["b"]["restarts"] >= 1 and router.instances()["b"]["state"] == "healthy"):
            assert time.time() - killed < 60, "never readmitted: " + json.dumps(router.instances()["b"])
            time.sleep(0.05)
        readmitted_after = time.time() - killed
        # The new process is judged on its own latency samples, not its predecessor's (which could eject it).
        assert router.instances()["b"]["latency_ms"] != predecessor["latency_ms"], (predecessor, router.instances()["b"])
        while not any(e.get("instance") == "b" and e["started"] > killed + readmitted_after for e in list(record)):
            assert time.time() - killed < 60, "the restarted instance took no traffic"
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        threads = []
        assert router.instances()["b"]["pid"] != victim["pid"]
        with urllib.request.urlopen(router.base + "/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert 'dsinfer_router:instance_restarts_total{instance="b",version="v1"} 1' in metrics, metrics
        assert 'dsinfer_router:instance_up{instance="b",version="v1"} 1' in metrics, (json.dumps(router.instances()["b"]), router.output()[-4000:])
        assert 'dsinfer_router:requests_total{instance="b",status="502"}' in metrics  # the streams it had begun
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        router.stop()
    failed = [e for e in record if not e["done"] or e["error"]]
    # What failed was a stream the killed instance had begun: nothing that had not started failed.
    assert all(e.get("instance") == "b" and e["chunks"] > 0 and e["error"] and e["started"] < killed for e in failed), failed
    print(f"\nkill -9 of 'b' among 3 instances, 8 streaming clients: ejected after {ejected_after * 1e3:.0f} ms, ready again "
          f"after {readmitted_after:.2f} s; {len(record)} requests, {len(failed)} failed, each a stream 'b' had begun "
          f"({sum(e['chunks'] for e in failed)} chunks delivered before the error event)")


def test_config_errors_name_the_key(tmp_path):
    config = tmp_path / "bad.json"
    for body, expected in [({"instances": []}, "'instances' must be a non-empty array"),
                           ({"instances": [child("a")], "canary": {}}, "'canary'"),
                           ({"instances": [child("a")], "lisen": "x"}, "unknown key 'lisen'"),
                           ({"instances": [{"id": "a", "version": "v", "url": "http://127.0.0.1:1", "model": "m"}]}, "exactly one of"),
                           ({"instances": [dict(child("a"), args=["--port", "1"])]}, "the router sets it"),
                           ({"instances": [dict(child("a"), kv_disk_dir="/tmp/kv")]}, "'kv_disk_dir' is for a fronted 'url'")]:
        config.write_text(json.dumps(body))
        result = subprocess.run([DSINFER, "router", "--config", str(config)], capture_output=True, text=True, timeout=30)
        assert result.returncode != 0 and expected in result.stderr, (body, result.stderr)


def complete(base):
    request = urllib.request.Request(base + "/v1/completions", method="POST", data=json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
    with urllib.request.urlopen(request, timeout=30) as r:
        r.read()
        return r.headers["X-Dsinfer-Instance"]


def test_an_instance_drains_and_resumes(tmp_path):
    router = Router(tmp_path, [child("a"), child("b")])
    try:
        def admin(path):
            request = urllib.request.Request(router.base + path, method="POST", headers=ADMIN, data=b"")
            try:
                with urllib.request.urlopen(request, timeout=5) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        assert admin("/admin/instances/a/drain") == 200
        assert admin("/admin/instances/nope/drain") == 404
        assert router.instances()["a"]["draining"]
        assert {complete(router.base) for _ in range(6)} == {"b"}
        assert admin("/admin/instances/a/resume") == 200
        assert "a" in {complete(router.base) for _ in range(6)}  # ties go to the first listed
    finally:
        router.stop()


def test_a_prefix_on_a_shared_disk_tier_goes_to_an_instance_of_that_tier(tmp_path):
    """'a' and 'b' share a disk tier, 'c' has none and is listed first (ties go
    to it). A long prompt computed on 'a', then 'a' drained: the prompt goes to
    'b', which reads the prefix back from the tier 'a' wrote; a new prompt goes
    to 'c'."""
    tier = tmp_path / "kv"
    shared = ["--ctx-size", "1024", "--kv-disk-dir", str(tier), "--kv-disk-bytes", "16MiB"]
    router = Router(tmp_path, [dict(child("c"), args=["--ctx-size", "1024"]), dict(child("a"), args=shared),
                               dict(child("b"), args=["--kv-disk-dir=" + str(tier) + "/"] + shared[:2])])
    prompt = " ".join(f"Clause {i}: the tenant keeps the garden and the lion sleeps." for i in range(12))

    def admin(path):
        request = urllib.request.Request(router.base + path, method="POST", headers=ADMIN, data=b"")
        with urllib.request.urlopen(request, timeout=5) as r:
            assert r.status == 200

    def send(text):
        request = urllib.request.Request(router.base + "/v1/completions", method="POST",
                                         data=json.dumps({"prompt": text, "max_tokens": 2, "temperature": 0}).encode())
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.headers["X-Dsinfer-Instance"], json.loads(r.read())["usage"]

    try:
        for id in ("c", "b"):
            admin(f"/admin/instances/{id}/drain")
        instance, usage = send(prompt)
        assert instance == "a" and usage["prompt_tokens"] > 64
        for id in ("c", "b"):
            admin(f"/admin/instances/{id}/resume")
        admin("/admin/instances/a/drain")
        deadline = time.time() + 30  # 'a' writes its pages in the background
        while len([n for n in os.listdir(tier) if n.endswith(".kvpage")]) < usage["prompt_tokens"] // 16 and time.time() < deadline:
            time.sleep(0.05)
        instance, again = send(prompt)
        assert instance == "b", router.output()
        assert again["prompt_tokens_details"]["cached_tokens"] >= 64, again  # read back from what 'a' wrote
        assert send("A new story about a dragon and a boat.")[0] == "c"
    finally:
        router.stop()


def converse(base, n_conversations=8, n_turns=10):
    """Each conversation on its own thread, turn after turn: (instances its turns went to, cached and prompt tokens)."""
    results = [None] * n_conversations

    def run(c):
        messages = [{"role": "system", "content": f"Conversation {c}: you are a storyteller who remembers everything said so far."}]
        instances, cached, prompt = [], 0, 0
        for turn in range(n_turns):
            messages.append({"role": "user", "content": f"Tell me part {turn} of story {c}."})
            request = urllib.request.Request(base + "/v1/chat/completions", method="POST",
                                             data=json.dumps({"messages": messages, "max_tokens": 6, "temperature": 0}).encode())
            with urllib.request.urlopen(request, timeout=60) as r:
                reply = json.loads(r.read())
                instances.append(r.headers["X-Dsinfer-Instance"])
            messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
            if turn > 0:  # the first turn has nothing to find
                cached += reply["usage"]["prompt_tokens_details"]["cached_tokens"]
                prompt += reply["usage"]["prompt_tokens"]
        results[c] = (instances, cached, prompt)
    threads = [threading.Thread(target=run, args=(c,)) for c in range(n_conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_prefix_affinity_keeps_a_conversation_on_one_instance(tmp_path):
    instances = [dict(child(i), args=["--ctx-size", "2048", "--chat-template", "chatml"]) for i in ("a", "b", "c")]
    rates = {}
    for routing in ("prefix_affinity", "random"):
        (tmp_path / routing).mkdir()
        router = Router(tmp_path / routing, instances, routing=routing)
        try:
            results = converse(router.base)
        finally:
            router.stop()
        rates[routing] = sum(r[1] for r in results) / sum(r[2] for r in results)
        if routing == "prefix_affinity":
            for turns, _, _ in results:
                assert len(set(turns)) == 1, turns  # every turn where the first went
            spread = {turns[0] for turns, _, _ in results}
            assert len(spread) > 1, "every conversation on one instance: affinity without load balance"
        else:
            assert any(len(set(turns)) > 1 for turns, _, _ in results)  # the baseline does scatter them
    print(f"\n8 conversations x 10 turns over 3 instances: prefix-cache hit rate {rates['prefix_affinity']:.1%} with prefix "
          f"affinity, {rates['random']:.1%} with random routing")
    assert rates["prefix_affinity"] > rates["random"]


def test_a_slow_instance_is_ejected_by_latency_and_readmitted(tmp_path):
    keys = tmp_path / "instance-admin.txt"
    keys.write_text("instance-key ops\n")
    args = ["--ctx-size", "256", "--admin-keys", str(keys)]
    router = Router(tmp_path, [dict(child(i), args=args) for i in ("a", "b", "c")])
    not_ready = []
    stop = threading.Event()

    def watch_ready():
        while not stop.is_set():
            try:
                urllib.request.urlopen(router.base + "/ready", timeout=5).read()
            except OSError as e:
                not_ready.append(repr(e))
            time.sleep(0.05)
    watcher = threading.Thread(target=watch_ready)
    watcher.start()

    def slow_b(milliseconds):
        debug_hook(router, "b", {"step_delay_ms": milliseconds})
    try:
        time.sleep(2)  # latency samples of the healthy pool
        slow_b(800)
        started = time.time()
        while router.instances()["b"]["state"] == "healthy":
            assert time.time() - started < 60, "the slow instance was never ejected"
            time.sleep(0.1)
        ejected_after = time.time() - started
        assert "latency" in router.instances()["b"]["last_error"]
        time.sleep(3)  # still slow: it stays out
        assert router.instances()["b"]["state"] == "ejected"
        slow_b(0)
        recovered = time.time()
        while router.instances()["b"]["state"] != "healthy":
            assert time.time() - recovered < 60, "the recovered instance was never readmitted"
            time.sleep(0.1)
        readmitted_after = time.time() - recovered
    finally:
        stop.set()
        watcher.join()
        router.stop()
    assert not not_ready, not_ready[:3]
    print(f"\nan 800 ms step delay on 'b': ejected by the latency rule after {ejected_after:.1f} s, readmitted "
          f"{readmitted_after:.1f} s after it recovered; the router was ready throughout")


def debug_hook(router, id, body):
    """serve's test hook (POST /admin/debug) on one instance."""
    request = urllib.request.Request(router.instances()[id]["url"] + "/admin/debug", method="POST",
                                     headers={"Authorization": "Bearer instance-key"}, data=json.dumps(body).encode())
    assert urllib.request.urlopen(request, timeout=10).status == 200


def test_an_instance_whose_requests_fail_is_ejected_and_readmitted_when_it_recovers(tmp_path):
    keys = tmp_path / "instance-admin.txt"
    keys.write_text("instance-key ops\n")
    router = Router(tmp_path, [dict(child(i), args=["--ctx-size", "256", "--admin-keys", str(keys)]) for i in ("a", "b")],
                    routing="random")
    try:
        debug_hook(router, "b", {"fail_steps": True})  # /health and /ready still pass; every generation fails
        statuses = []
        while router.instances()["b"]["state"] == "healthy":
            assert len(statuses) < 200, "the failing instance was never ejected"
            request = urllib.request.Request(router.base + "/v1/completions", method="POST",
                                             data=json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
            try:
                with urllib.request.urlopen(request, timeout=30) as r:
                    statuses.append((r.status, r.headers["X-Dsinfer-Instance"]))
            except urllib.error.HTTPError as e:
                statuses.append((e.code, e.headers.get("X-Dsinfer-Instance")))
        assert "passive: 5 of its last" in router.instances()["b"]["last_error"]
        failed = [s for s in statuses if s[0] != 200]
        assert len(failed) == 5 and all(s[0] == 500 for s in failed), statuses  # each of them b's engine error
        for _ in range(10):  # out of the pool: every request succeeds on a
            assert complete(router.base) == "a"
        time.sleep(2)
        assert router.instances()["b"]["state"] == "ejected", "readmitted while its completions still fail"
        debug_hook(router, "b", {"fail_steps": False})
        recovered = time.time()
        while router.instances()["b"]["state"] != "healthy":
            assert time.time() - recovered < 60, "the recovered instance was never readmitted"
            time.sleep(0.1)
        print(f"\nfailing engine on 'b': ejected after {len(failed)} failed of {len(statuses)} requests, readmitted "
              f"{time.time() - recovered:.1f} s after it recovered")
    finally:
        router.stop()


def test_keys_are_checked_and_the_tenant_reaches_the_instance(tmp_path, keys_file):
    router = Router(tmp_path, [child("a"), child("b")], api_keys=keys_file)
    try:
        def complete_as(key):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            request = urllib.request.Request(router.base + "/v1/completions", method="POST", headers=headers,
                                             data=json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
            try:
                with urllib.request.urlopen(request, timeout=30) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        assert complete_as(None) == 401 and complete_as("sk-wrong") == 401
        assert complete_as("sk-alpha") == 200
        time.sleep(1.5)  # a latency probe round, with the router's own key
        assert all(i["latency_ms"] is not None and i["latency_ms"] < 5000 for i in router.instances().values())
        log = router.output()
    finally:
        router.stop()
    lines = [json.loads(line.split("access ", 1)[1]) for line in log.splitlines() if line.startswith("[info] access ")]
    # The instance's own line (its completion id, not the router's instance name) knows the tenant.
    assert any(l["tenant"] == "alpha" and l.get("id", "").startswith("cmpl-") for l in lines)


def test_children_do_not_outlive_a_killed_router(tmp_path):
    router = Router(tmp_path, [child("a"), child("b")])
    pids = [i["pid"] for i in router.instances().values()]
    router.process.kill()
    router.process.wait(timeout=30)
    router.log.close()
    deadline = time.time() + 30  # each drains (nothing in flight) and exits
    while any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z" for pid in pids):
        assert time.time() < deadline, "a child outlived the router"
        time.sleep(0.05)

"""The router's canary release, end to end, on two `dsinfer serve` children:
stable (v1, stories260K) and the canary (v2).

- An identical canary (the same file) advances 1% -> 10% -> 50% -> 100% by
  itself; the audit holds exactly one row per canary request and per shadow
  copy (every stable request while the release runs, shadow_fraction 1) and
  one per decision, each request's row found by the id its client got back.
- A broken canary (a scripted model that answers one fixed sentence) is rolled
  back within the first stage, and every request that was not routed to the
  canary was answered by stable.
- An operator's rollback through `dsinfer canary`, kept across a restart of
  the router (the state is read back from the audit).

Latency is not what these tests judge: both versions share two cores with
each other and the test, so the config gives a latency slack of 1 s (the
latency thresholds are tested by the policy's unit test). The timeouts only
bound the test against a hang."""

import json
import os
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request

from router_process import ADMIN, Router
from scripted_model import write_scripted_model
from server_process import DSINFER, STORIES

MIN_SAMPLES = 6
PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went", "One day, a bird", "The sun was"]


def instance(id, version, model):
    return {"id": id, "version": version, "model": model, "args": ["--ctx-size", "256"]}


def canary_config(tmp_path, **canary):
    release = {"stable": "v1", "canary": "v2", "stages": [1, 10, 50, 100], "min_samples": MIN_SAMPLES,
               "shadow_fraction": 1.0, "thresholds": {"latency_slack_ms": 1000}}
    release.update(canary)
    return {"canary": release, "audit": {"path": str(tmp_path / "audit.db"), "inputs": "all"}}


def complete(router, i, headers=None, stream=False):
    """One greedy completion: (status, served version, request id, text)."""
    request_id = f"req-{i}-{time.monotonic_ns()}"
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 12, "temperature": 0, "stream": stream}
    request = urllib.request.Request(router.base + "/v1/completions", method="POST", data=json.dumps(body).encode(),
                                     headers={"X-Request-Id": request_id, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            raw = r.read().decode()
            if stream:
                text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in raw.splitlines()
                               if line.startswith("data: {"))
            else:
                text = json.loads(raw)["choices"][0]["text"]
            return r.status, r.headers.get("X-Model-Version"), r.headers.get("X-Request-Id"), text
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Model-Version"), e.headers.get("X-Request-Id"), e.read().decode()


def complete_retrying_503(router, i, tries=10):
    for _ in range(tries - 1):
        answer = complete(router, i)
        if answer[0] != 503:
            return answer
        time.sleep(1)
    return complete(router, i)


def canary_status(router):
    request = urllib.request.Request(router.base + "/admin/canary", headers=ADMIN)
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


def audit_rows(path, request_id):
    with sqlite3.connect(path, timeout=10) as db:  # WAL: read beside the router's writes
        return db.execute("SELECT kind, stable_version, canary_version, stable_output, canary_output, exact_match, input"
                          " FROM requests WHERE request_id = ?", (request_id,)).fetchall()


def wait_for_row(path, request_id):
    deadline = time.time() + 30
    while time.time() < deadline:
        rows = audit_rows(path, request_id)
        if rows:
            return rows
        time.sleep(0.02)
    raise AssertionError(f"no audit row for {request_id}")


def run_release(router, audit, limit):
    """Sequential requests while the release runs, each one's row awaited
    before the next (so each is known to belong to the stage it ran in).
    Returns [(state before, status, version, request id, text, rows)]."""
    seen = []
    for i in range(limit):
        state = canary_status(router)["state"]
        if state != "running":
            break
        status, version, request_id, text = complete(router, i, stream=i % 2 == 1)
        assert status == 200, text
        seen.append((status, version, request_id, text, wait_for_row(audit, request_id)))
    return seen


def test_an_identical_canary_promotes_itself_and_the_audit_counts_every_request(tmp_path):
    router = Router(tmp_path, [instance("stable", "v1", STORIES), instance("canary", "v2", STORIES)],
                    extra=canary_config(tmp_path))
    audit = str(tmp_path / "audit.db")
    try:
        # Dyed traffic: the header sends a request to the canary whatever the stage; a bad value is refused by name.
        status, version, dyed_id, _ = complete(router, 0, headers={"X-Canary": "1"})
        assert (status, version) == (200, "v2")
        assert [r[0] for r in wait_for_row(audit, dyed_id)] == ["canary"]
        status, _, _, body = complete(router, 0, headers={"X-Canary": "yes"})
        assert status == 400 and "X-Canary" in body

        seen = run_release(router, audit, limit=400)
        final = canary_status(router)
        assert final["state"] == "promoted", json.dumps(final, indent=1)
        decisions = [(d["action"], d["from_percent"], d["to_percent"], d["by"]) for d in final["decisions"]]
        assert decisions == [("start", 0, 1, "config"), ("advance", 1, 10, "policy"), ("advance", 10, 50, "policy"),
                             ("promote", 50, 100, "policy")]
        for _, version, request_id, text, rows in seen:
            assert len(rows) == 1, rows  # one row per request
            kind, stable_version, canary_version, stable_output, canary_output, exact, stored_input = rows[0]
            if version == "v2":  # routed to the canary
                assert (kind, canary_version, canary_output) == ("canary", "v2", text)
            else:  # stable answered; its shadow copy went to the canary
                assert (kind, stable_version, canary_version, stable_output, exact) == ("shadow", "v1", "v2", text, 1)
            assert json.loads(stored_input)["prompt"] in PROMPTS  # "inputs": "all"
        n_canary = 1 + sum(1 for s in seen if s[1] == "v2")
        n_shadow = sum(1 for s in seen if s[1] == "v1")
        assert final["audit"]["canary_requests"] == n_canary and final["audit"]["shadow_requests"] == n_shadow
        with urllib.request.urlopen(router.base + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for line in ('dsinfer_router:canary_state{state="promoted"} 1', 'dsinfer_router:canary_stage_percent{stable="v1",canary="v2"} 100',
                     f'dsinfer_router:canary_audited_requests_total{{kind="canary"}} {n_canary}',
                     f'dsinfer_router:canary_audited_requests_total{{kind="shadow"}} {n_shadow}'):
            assert line in metrics, (line, metrics)
        # Promoted: every request goes to the canary and none is audited.
        # A 503 (no healthy instance: on a loaded machine a health check may
        # have timed out) is retried after its Retry-After, as a client would.
        after = [complete_retrying_503(router, i) for i in range(3)]
        assert all(a[:2] == (200, "v2") for a in after), after
        time.sleep(0.5)
        with sqlite3.connect(audit) as db:
            assert db.execute("SELECT count(*) FROM requests").fetchone()[0] == n_canary + n_shadow
            assert db.execute("SELECT count(*) FROM requests WHERE kind = 'canary'").fetchone()[0] == n_canary
            assert db.execute("SELECT count(*) FROM decisions").fetchone()[0] == 4
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        print(f"\nidentical canary: promoted after {len(seen)} requests ({n_canary} canary, {n_shadow} shadowed)")
    finally:
        router.stop()


def test_a_broken_canary_is_rolled_back_in_the_first_stage(tmp_path):
    broken = write_scripted_model(str(tmp_path / "broken.gguf"), ["Not", " the", " same", "."], "{{ messages[0]['content'] }}")
    router = Router(tmp_path, [instance("stable", "v1", STORIES), instance("canary", "v2", broken)],
                    extra=canary_config(tmp_path))
    audit = str(tmp_path / "audit.db")
    try:
        # Only generation takes part in the release: the rest stays on stable, unaudited, unless dyed.
        for dye, version in ((None, "v1"), (None, "v1"), (None, "v1"), ("1", "v2")):
            request = urllib.request.Request(router.base + "/v1/models", headers={"X-Canary": dye} if dye else {})
            with urllib.request.urlopen(request, timeout=10) as r:
                assert r.headers["X-Model-Version"] == version
        seen = run_release(router, audit, limit=200)
        final = canary_status(router)
        assert final["state"] == "rolled_back", json.dumps(final, indent=1)
        last = final["decisions"][-1]
        assert (last["action"], last["from_percent"], last["by"]) == ("rollback", 1, "policy")
        assert any("exact match" in reason for reason in last["reasons"]), last["reasons"]
        assert len(seen) <= 3 * MIN_SAMPLES  # within the first stage's samples (a few at 1% may be the canary's)
        for _, version, _, text, rows in seen:
            assert version == ("v2" if rows[0][0] == "canary" else "v1")  # stable served every request not sent to the canary
        # Rolled back: even a dyed request goes to stable.
        after = [complete(router, i, headers={"X-Canary": "1"} if i == 0 else None) for i in range(4)]
        assert all(a[:2] == (200, "v1") for a in after), after
        print(f"\nbroken canary: rolled back after {len(seen)} requests: {last['reasons']}")
    finally:
        router.stop()


def test_an_operator_rolls_back_with_the_cli_and_a_restart_keeps_it(tmp_path):
    instances = [instance("stable", "v1", STORIES), instance("canary", "v2", STORIES)]
    config = canary_config(tmp_path, min_samples=1000)  # the policy holds: only the operator decides
    router = Router(tmp_path, instances, extra=config)
    env = dict(os.environ, DSINFER_ADMIN_KEY="admin-key-1")
    canary = [DSINFER, "canary", "--router", router.base]
    try:
        shown = subprocess.run(canary + ["status"], env=env, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert "v1 -> v2: running at 1%" in shown.stdout, shown.stdout
        rolled = subprocess.run(canary + ["rollback", "--json"], env=env, capture_output=True, text=True, timeout=30)
        assert rolled.returncode == 0, rolled.stderr
        assert json.loads(rolled.stdout)["state"] == "rolled_back"
        again = subprocess.run(canary + ["promote"], env=env, capture_output=True, text=True, timeout=30)
        assert again.returncode == 1 and "409" in again.stderr and "ended" in again.stderr
        no_key = subprocess.run(canary + ["status"], env=dict(os.environ, DSINFER_ADMIN_KEY="wrong"), capture_output=True, text=True,
                                timeout=30)
        assert no_key.returncode == 1 and "401" in no_key.stderr
    finally:
        router.stop()
    router = Router(tmp_path, instances, extra=config)
    try:
        status = canary_status(router)
        assert status["state"] == "rolled_back"
        assert status["decisions"][-1]["by"] == "operator:ops"
        assert complete(router, 0, headers={"X-Canary": "1"})[1] == "v1"
    finally:
        router.stop()

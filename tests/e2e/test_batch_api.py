"""OpenAI's Files and Batch APIs with the official `openai` client against
`dsinfer serve --store-dir`: a batch's lines answered once each, with an
output and an error file (malformed lines and failed requests in the latter,
the rest run); files listed, read and deleted; tenants kept apart; fields
refused by name; cancel and the completion window; lines run below online
requests; and a batch resumed after SIGKILL without running a finished line
again."""

import json
import os
import signal
import sqlite3
import time
import urllib.error
import urllib.request

import openai
import pytest

from server_process import ServerProcess

ADMIN = "adm-batch"


def client_for(server, key="sk-alpha"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0)


def line(custom_id, content, max_tokens=8, **extra):
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "stories260K", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                     "temperature": 0, **extra}}


def jsonl(lines):
    return "".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines).encode()


def upload(client, lines):
    return client.files.create(file=("input.jsonl", jsonl(lines), "application/jsonl"), purpose="batch")


def wait_for(client, batch_id, statuses, seconds=120):
    deadline = time.time() + seconds  # guards against a hang only
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        assert time.time() < deadline, f"batch still {batch.status} after {seconds} s: {batch}"
        time.sleep(0.1)


def records(client, file_id):
    return [json.loads(l) for l in client.files.content(file_id).text.splitlines()] if file_id else []


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("batch")
    keys = directory / "keys.txt"
    keys.write_text("sk-alpha alpha\nsk-beta beta\n")
    admin = directory / "admin.txt"
    admin.write_text(f"{ADMIN} tester\n")
    server = ServerProcess("--chat-template", "chatml", "--ctx-size", "1024", "--api-keys", str(keys), "--admin-keys", str(admin),
                           "--store-dir", str(directory / "store"), "--max-body-bytes", "200000", "--max-num-seqs", "2",
                           "--batch-lines-in-flight", "2")
    yield server, directory
    server.stop()


def test_a_batch_answers_every_line_once_with_output_and_error_files(files):
    server, _ = files
    client = client_for(server)
    lines = [line(f"ok-{i}", f"Story number {i}") for i in range(4)]
    lines += ["{not json", {"custom_id": "extra", "method": "POST", "url": "/v1/chat/completions", "body": {}, "priority": 1},
              line("ok-0", "a repeated custom_id"), line("bad-temperature", "x", temperature="hot"),
              {"custom_id": "wrong-url", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}]
    uploaded = upload(client, lines)
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines)) and uploaded.filename == "input.jsonl"
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"job": "nightly"})
    assert batch.status == "in_progress" and batch.metadata == {"job": "nightly"} and batch.request_counts.total == 9
    batch = wait_for(client, batch.id, {"completed"})
    assert (batch.request_counts.completed, batch.request_counts.failed) == (4, 5)
    assert batch.completed_at >= batch.created_at and batch.expires_at == batch.created_at + 24 * 3600

    output = records(client, batch.output_file_id)
    assert sorted(r["custom_id"] for r in output) == [f"ok-{i}" for i in range(4)]
    for r in output:
        assert r["response"]["status_code"] == 200 and r["error"] is None and r["id"].startswith("batch_req_")
        i = int(r["custom_id"].split("-")[1])
        # The same request online gives the same reply (greedy).
        online = client.chat.completions.create(**lines[i]["body"])
        assert r["response"]["body"]["choices"][0]["message"]["content"] == online.choices[0].message.content
        assert r["response"]["body"]["usage"]["completion_tokens"] == online.usage.completion_tokens
    errors = {r["custom_id"]: r for r in records(client, batch.error_file_id)}
    assert len(errors) == 5  # the repeated custom_id's record names that id
    assert "line 5: not valid JSON" in errors[None]["error"]["message"]
    assert "unknown field 'priority'" in errors["extra"]["error"]["message"]
    assert "not unique" in errors["ok-0"]["error"]["message"]
    assert errors["bad-temperature"]["response"]["status_code"] == 400
    assert "temperature" in errors["bad-temperature"]["error"]["message"]
    assert "/v1/chat/completions" in errors["wrong-url"]["error"]["message"]
    # Each line ran once: one access-log record per line id.
    ran = [r["request_id"] for r in server.access_log()
           if r["request_id"].startswith("batch_req_" + batch.id[len("batch_"):] + "_") and r["status"] != 503]
    assert sorted(ran) == sorted(set(ran)) and len(ran) == 5  # four answered, one refused at run time (temperature)


def test_files_are_listed_read_and_deleted(files):
    server, _ = files
    client = client_for(server)
    first, second = upload(client, [line("a", "x")]), upload(client, [line("b", "y")])
    assert client.files.retrieve(first.id).id == first.id
    assert client.files.content(first.id).text == jsonl([line("a", "x")]).decode()
    listed = client.files.list(purpose="batch", limit=1)
    assert [f.id for f in listed.data] == [second.id] and listed.has_more
    after = client.files.list(purpose="batch", limit=1, after=second.id)
    assert [f.id for f in after.data] == [first.id]
    assert client.files.delete(first.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(first.id)
    with pytest.raises(openai.BadRequestError, match="purpose 'fine-tune'"):
        client.files.create(file=("x.jsonl", b"{}\n", "application/jsonl"), purpose="fine-tune")
    with pytest.raises(openai.APIStatusError) as too_big:
        client.files.create(file=("big.jsonl", b"x" * 300000, "application/jsonl"), purpose="batch")
    assert too_big.value.status_code == 413


def test_tenants_are_kept_apart(files):
    server, _ = files
    alpha, beta = client_for(server), client_for(server, "sk-beta")
    uploaded = upload(alpha, [line("a", "x", max_tokens=400, ignore_eos=True)])
    batch = alpha.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    for attempt in (lambda: beta.files.retrieve(uploaded.id), lambda: beta.files.content(uploaded.id),
                    lambda: beta.files.delete(uploaded.id), lambda: beta.batches.retrieve(batch.id),
                    lambda: beta.batches.cancel(batch.id),
                    lambda: beta.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert uploaded.id not in [f.id for f in beta.files.list().data]
    assert batch.id not in [b.id for b in beta.batches.list().data]
    assert batch.id in [b.id for b in alpha.batches.list().data]
    alpha.batches.cancel(batch.id)
    wait_for(alpha, batch.id, {"cancelled"})


def test_bad_requests_are_refused_by_name(files):
    server, _ = files
    client = client_for(server)
    uploaded = upload(client, [line("a", "x")])
    with pytest.raises(openai.BadRequestError, match="'priority'"):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h",
                              extra_body={"priority": "high"})
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="48h")
    with pytest.raises(openai.BadRequestError, match="endpoint '/v1/messages'"):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/messages", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="'order'"):
        client.batches.list(extra_query={"order": "asc"})
    empty = upload(client, ["", "  "])
    with pytest.raises(openai.BadRequestError, match="holds no request"):
        client.batches.create(input_file_id=empty.id, endpoint="/v1/chat/completions", completion_window="24h")
    request = urllib.request.Request(server.base + "/v1/files", method="POST", data=b"{}",
                                     headers={"Authorization": "Bearer sk-alpha", "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as not_multipart:
        urllib.request.urlopen(request, timeout=10)
    assert not_multipart.value.code == 400 and b"multipart/form-data" in not_multipart.value.read()


def test_online_requests_go_before_batch_lines(files):
    """Both engine slots run batch lines; an online request takes one at once
    (a batch line is preempted and resumes), so it ends while no line has."""
    server, _ = files
    client = client_for(server)
    server.debug({"step_delay_ms": 10}, ADMIN)
    try:
        lines = [line(f"long-{i}", f"Long story {i}", max_tokens=300, ignore_eos=True) for i in range(2)]
        batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/chat/completions", completion_window="24h")
        deadline = time.time() + 30
        while server.metric("dsinfer:num_requests_running") < 2:
            assert time.time() < deadline, "the batch lines did not start"
            time.sleep(0.01)
        online = client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                                temperature=0)
        assert online.usage.completion_tokens == 4
        assert client.batches.retrieve(batch.id).request_counts.completed == 0
        done = wait_for(client, batch.id, {"completed"})
        assert done.request_counts.completed == 2
        assert all(r["response"]["body"]["usage"]["completion_tokens"] == 300 for r in records(client, done.output_file_id))
    finally:
        server.debug({"step_delay_ms": 0}, ADMIN)


def test_cancel_and_the_completion_window(files):
    server, _ = files
    client = client_for(server)
    server.debug({"step_delay_ms": 5}, ADMIN)
    try:
        lines = [line(f"l-{i}", f"Tale {i}", max_tokens=200, ignore_eos=True) for i in range(8)]
        cancelled = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/chat/completions",
                                          completion_window="24h")
        assert client.batches.cancel(cancelled.id).status in ("cancelling", "cancelled")
        cancelled = wait_for(client, cancelled.id, {"cancelled"})
        assert cancelled.cancelled_at and cancelled.request_counts.completed < 8
        with pytest.raises(openai.APIStatusError) as again:
            client.batches.cancel(cancelled.id)
        assert again.value.status_code == 409
        expiring = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/chat/completions",
                                         completion_window="2s")
        expired = wait_for(client, expiring.id, {"expired"})
        assert expired.expired_at and expired.request_counts.total == 8
        assert expired.request_counts.completed + expired.request_counts.failed == 8
        errors = records(client, expired.error_file_id)
        assert errors and all(r["error"]["code"] == "batch_expired" for r in errors)
        answered = {r["custom_id"] for r in records(client, expired.output_file_id)} | {r["custom_id"] for r in errors}
        assert answered == {f"l-{i}" for i in range(8)}
    finally:
        server.debug({"step_delay_ms": 0}, ADMIN)


def test_a_batch_resumes_after_sigkill_without_running_a_finished_line_again(tmp_path):
    admin = tmp_path / "admin.txt"
    admin.write_text(f"{ADMIN} tester\n")
    store = tmp_path / "store"
    args = ("--chat-template", "chatml", "--ctx-size", "1024", "--store-dir", str(store), "--batch-lines-in-flight", "2",
            "--admin-keys", str(admin))
    first = ServerProcess(*args)
    try:
        first.debug({"step_delay_ms": 10}, ADMIN)
        client = client_for(first, "unused")
        lines = [line(f"k-{i}", f"Fable {i}", max_tokens=24) for i in range(12)]
        batch = client.batches.create(input_file_id=upload(client, lines).id, endpoint="/v1/chat/completions", completion_window="24h")
        deadline = time.time() + 60
        while client.batches.retrieve(batch.id).request_counts.completed < 4:
            assert time.time() < deadline, "the batch did not progress"
            time.sleep(0.02)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    finally:
        first.stop()
    with sqlite3.connect(store / "batches.sqlite") as db:
        finished = {row[0] for row in db.execute("SELECT idx FROM batch_lines WHERE batch_id = ? AND result IS NOT NULL", (batch.id,))}
    assert 4 <= len(finished) < 12
    second = ServerProcess(*args)
    try:
        client = client_for(second, "unused")
        done = wait_for(client, batch.id, {"completed"})
        assert (done.request_counts.completed, done.request_counts.failed) == (12, 0)
        output = records(client, done.output_file_id)
        assert sorted(r["custom_id"] for r in output) == sorted(f"k-{i}" for i in range(12))
        rerun = {int(r["request_id"].rsplit("_", 1)[1]) for r in second.access_log() if r["client"] == "batch"}
        assert rerun == set(range(12)) - finished, "exactly the lines without a result ran after the restart"
        assert not os.listdir(store / "files") or all(not name.endswith(".tmp") for name in os.listdir(store / "files"))
    finally:
        second.stop()


def test_a_tenant_cannot_store_past_its_quota(tmp_path):
    """--store-tenant-max-bytes bounds what one tenant stores (files, and the
    lines a batch copies from its file): past it an upload or a new batch is a
    413 naming the quota, other tenants carry on, and deleting makes room."""
    keys = tmp_path / "keys.txt"
    keys.write_text("sk-alpha alpha\nsk-beta beta\n")
    server = ServerProcess("--chat-template", "chatml", "--ctx-size", "512", "--api-keys", str(keys), "--store-dir", str(tmp_path / "store"),
                           "--store-tenant-max-bytes", "6KiB")
    try:
        alpha, beta = client_for(server), client_for(server, "sk-beta")
        lines = [line(f"q{i}", "Tell me a story about a cat. " * 4) for i in range(9)]  # about 2.7 KB: two fit in 6 KiB, three do not
        size = len(jsonl(lines))
        assert 2000 < size < 3000
        first = upload(alpha, lines)
        second = upload(alpha, lines)
        with pytest.raises(openai.APIStatusError) as refused:
            upload(alpha, lines)
        assert refused.value.status_code == 413 and refused.value.body["code"] == "storage_quota_exceeded", refused.value.body
        assert "--store-tenant-max-bytes" in refused.value.body["message"]
        upload(beta, lines)  # another tenant's room is its own
        # A batch stores its file's lines again: with two files held there is no room for it.
        with pytest.raises(openai.APIStatusError) as refused:
            alpha.batches.create(input_file_id=first.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert refused.value.status_code == 413
        alpha.files.delete(second.id)
        batch = alpha.batches.create(input_file_id=first.id, endpoint="/v1/chat/completions", completion_window="24h")
        alpha.batches.cancel(batch.id)
    finally:
        server.stop()

"""The access log: one line per request whatever its outcome, with the
request id the client sent (or one the server made) echoed back; never the
key, never the prompt unless asked. /metrics behind the key. The drain
timeout ends open streams with an error event, a line each and exit 3."""

import http.client
import json
import re
import threading
import time

from server_process import ServerProcess

PROMPT = "Once upon a time"


def request(server, method, path, body=None, key="sk-alpha", request_id=None, stream=False):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if request_id:
        headers["X-Request-Id"] = request_id
    connection.request(method, path, body if isinstance(body, (bytes, type(None))) else json.dumps(body), headers)
    response = connection.getresponse()
    if stream:
        return connection, response
    return response.status, response.getheader("X-Request-Id"), response.read()


def test_one_line_per_request_with_its_id(keys_file):
    s = ServerProcess("--api-keys", keys_file, "--tenant-rate", "0.001", "--tenant-burst", "4", "--burst", "100", "--max-in-flight", "1",
                      "--max-body-bytes", "65536", "--ctx-size", "512")
    try:
        sent = {}  # request id -> status

        def send(request_id, expected, method, path, body=None, key="sk-alpha"):
            status, echoed, _ = request(s, method, path, body, key, request_id)
            assert (status, echoed) == (expected, request_id), (request_id, status, echoed)
            sent[request_id] = status

        send("ok-1", 200, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
        send("bad-temperature", 400, "POST", "/v1/completions", {"prompt": PROMPT, "temperature": 7})
        send("wrong-key", 401, "POST", "/v1/completions", {"prompt": PROMPT}, key="sk-wrong")
        send("no-such-path", 404, "GET", "/v1/nothing")
        send("too-large", 413, "POST", "/v1/completions", {"prompt": "x" * 70000})
        for i in range(4):  # beta's burst of 4, then its own bucket is empty
            send(f"beta-{i}", 200, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, key="sk-beta")
        send("beta-limited", 429, "POST", "/v1/completions", {"prompt": PROMPT}, key="sk-beta")
        connection, held = request(s, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 400, "stream": True, "ignore_eos": True},
                                   request_id="held-stream", stream=True)
        held.read(64)  # streaming has begun: the one slot in flight is taken
        send("no-slot", 503, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
        connection.close()
        sent["held-stream"] = 499  # the client left: logged as 499 client_gone, as nginx does
        # An id that is not 1-128 printable characters is replaced by one of the server's.
        status, echoed, _ = request(s, "GET", "/health", request_id="not valid")
        assert status == 200 and re.fullmatch(r"[0-9a-f]{16}", echoed)

        deadline = time.time() + 5
        while not any(line["request_id"] == "held-stream" for line in s.access_log()):
            assert time.time() < deadline
            time.sleep(0.05)
        lines = s.access_log()
        by_id = {}
        for line in lines:
            by_id.setdefault(line["request_id"], []).append(line)
        for request_id, status in sent.items():
            assert [line["status"] for line in by_id.get(request_id, [])] == [status], (request_id, by_id.get(request_id))
        statuses = sorted({line["status"] for line in lines})
        print(f"  {len(lines)} access-log lines for {len(sent) + 1} requests and the start-up /ready polls; statuses {statuses}")
        assert {200, 400, 401, 404, 413, 429, 503} <= set(statuses)
        for line in lines:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"]) and line["client"] == "127.0.0.1"
        assert by_id["wrong-key"][0]["tenant"] == "-" and by_id["beta-0"][0]["tenant"] == "beta"
        assert by_id["beta-limited"][0]["reason"] == "tenant_rate_limit"
        assert by_id["ok-1"][0]["output_tokens"] == 4 and by_id["held-stream"][0]["reason"] == "client_gone"
        log = s.output()
        assert "sk-alpha" not in log and "sk-beta" not in log  # never a key
        assert not any(PROMPT in json.dumps(line) for line in lines)  # no prompt without --log-prompts
    finally:
        s.stop()


def test_metrics_need_a_key_unless_public(keys_file):
    s = ServerProcess("--api-keys", keys_file)
    try:
        assert request(s, "GET", "/metrics", key=None)[0] == 401
        assert request(s, "GET", "/metrics", key="sk-wrong")[0] == 401
        assert request(s, "GET", "/metrics")[0] == 200
    finally:
        s.stop()
    s = ServerProcess("--api-keys", keys_file, "--metrics-public")
    try:
        assert request(s, "GET", "/metrics", key=None)[0] == 200
    finally:
        s.stop()


def test_drain_timeout_ends_every_stream_with_an_error_and_done(keys_file):
    s = ServerProcess("--api-keys", keys_file, "--drain-timeout", "0", "--ctx-size", "512")
    endings = []

    def stream_one(i):
        connection, response = request(s, "POST", "/v1/completions",
                                       {"prompt": PROMPT, "max_tokens": 500, "stream": True, "temperature": 0, "ignore_eos": True},
                                       request_id=f"drained-{i}", stream=True)
        events = [line for line in response.read().decode().split("\n") if line.startswith("data: ")]
        endings.append(events[-2:])

    threads = [threading.Thread(target=stream_one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    s.wait_for_in_flight(8)
    s.terminate()
    for t in threads:
        t.join(timeout=30)
    code = s.process.wait(timeout=30)
    lines = [line for line in s.access_log() if line["request_id"].startswith("drained-")]
    s.stop()
    print(f"  exit {code}; {len(endings)} streams ended with {endings[0] if endings else None}; "
          f"{sum(line['reason'] == 'drain_timeout' for line in lines)} logged as drain_timeout")
    assert code == 3
    assert len(endings) == 8
    for last_two in endings:
        assert json.loads(last_two[0][len("data: "):])["error"]["code"] == "drain_timeout" and last_two[1] == "data: [DONE]"
    assert sorted(line["reason"] for line in lines) == ["drain_timeout"] * 8

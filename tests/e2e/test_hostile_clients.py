"""Clients that attack the server the cheap ways a public endpoint meets
every day, on loopback only and bounded in count and time. Each case prints
its figure. While they run, a probe from another loopback address (so that
the per-address cap it is testing does not apply to it) asks /health every
20 ms on a kept-alive connection: its p99 must stay under 100 ms."""

import contextlib
import http.client
import json
import resource
import socket
import threading
import time

import pytest

from server_process import ServerProcess

PROBE_ADDRESS = "127.0.0.2"
HEAD_TIMEOUT = 2
BODY_TIMEOUT = 3


class HealthProbe:
    """GET /health every 20 ms from PROBE_ADDRESS; latencies in ms."""

    def __init__(self, port):
        self.port, self.latencies, self.failures = port, [], 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        connection = None
        while not self.stopping.is_set():
            start = time.perf_counter()
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5, source_address=(PROBE_ADDRESS, 0))
                connection.request("GET", "/health")
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                self.latencies.append((time.perf_counter() - start) * 1000)
            except (OSError, AssertionError, http.client.HTTPException):
                self.failures += 1
                connection = None
            self.stopping.wait(0.02)

    def p99(self):
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("inf")


@contextlib.contextmanager
def probing(server, case):
    probe = HealthProbe(server.port)
    probe.thread.start()
    try:
        yield probe
    finally:
        probe.stopping.set()
        probe.thread.join()
    print(f"  {case}: /health {len(probe.latencies)} probes, p99 {probe.p99():.1f} ms, max "
          f"{max(probe.latencies, default=0):.1f} ms, failures {probe.failures}")
    assert probe.failures == 0 and probe.p99() < 100, f"{case}: /health p99 {probe.p99():.1f} ms, {probe.failures} failures"


def is_closed(sock):
    """Whether the server has closed this (non-blocking) socket."""
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def open_idle_connections(server, n):
    """n connections that never send a byte (this process's file limit raised to hold them)."""
    raise_own_file_limit(n + 200)
    sockets = []
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", server.port))
        sockets.append(sock)
    return sockets


def server_cpu_share(server, seconds):
    """The share of one core the server uses over the next `seconds`."""
    cpu_before, wall_before = server.cpu_seconds(), time.time()
    time.sleep(seconds)
    return (server.cpu_seconds() - cpu_before) / (time.time() - wall_before)


def raise_own_file_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n), hard))


@pytest.fixture(scope="module")
def hostile_server(keys_file):
    """ulimit -n 256 and short deadlines, so every case ends within seconds."""
    s = ServerProcess("--api-keys", keys_file, "--client-header-timeout", str(HEAD_TIMEOUT), "--client-body-timeout",
                      str(BODY_TIMEOUT), "--keepalive-timeout", "5", "--send-timeout", "5", "--ctx-size", "512", nofile=256)
    yield s
    s.stop()


def completion(server, key="sk-alpha", **body):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 4, **body}),
                       {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read()


def wait_until(predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_pipelining_without_reading_costs_bounded_memory(hostile_server):
    s = hostile_server
    before = s.rss_kib()
    request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
    with probing(s, "20,000 pipelined requests, never read"):
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.setblocking(False)
        data, sent = request * 20000, 0
        deadline = time.time() + 5
        while sent < len(data) and time.time() < deadline:
            try:
                sent += sock.send(data[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        time.sleep(1.0)
        grown = (s.rss_kib() - before) / 1024
        print(f"  sent {sent // len(request)} of 20,000 requests before the server stopped reading; RSS +{grown:.1f} MiB")
        sock.close()
    assert grown < 64
    assert wait_until(lambda: s.metric("dsinfer:http_connections_open") <= 1, 10)  # the probe's connection is gone too


def test_idle_connections_under_a_low_file_limit_are_closed_by_their_deadline(hostile_server):
    s = hostile_server
    with probing(s, "2,000 idle connections (ulimit -n 256)"):
        sockets = open_idle_connections(s, 2000)
        time.sleep(0.5)
        cpu_share = server_cpu_share(s, HEAD_TIMEOUT - 0.5)  # all wait for their head deadline now
        all_closed = wait_until(lambda: all(is_closed(x) for x in sockets), HEAD_TIMEOUT + 3)
        still_open = sum(not is_closed(x) for x in sockets)
    for sock in sockets:
        sock.close()
    print(f"  {s.metric('dsinfer:http_connections_refused'):.0f} refused at accept (over the caps); server CPU while they "
          f"waited {100 * cpu_share:.1f}% of a core; still open after the deadline: {still_open}")
    assert all_closed, f"{still_open} connections outlived their deadline"
    assert cpu_share < 0.10
    assert completion(s)[0] == 200


def test_slowloris_heads_end_at_the_head_deadline(hostile_server):
    s = hostile_server
    sockets = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(100)]
    start = time.time()
    with probing(s, "100 slowloris heads"):
        for sock in sockets:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            sock.setblocking(False)
        closed_at = {}
        while len(closed_at) < len(sockets) and time.time() - start < HEAD_TIMEOUT + 4:
            for i, sock in enumerate(sockets):
                if i in closed_at:
                    continue
                try:
                    sock.send(b"X")  # one byte of a header line now and then
                except OSError:
                    pass
                if is_closed(sock):
                    closed_at[i] = time.time() - start
            time.sleep(0.3)
    for sock in sockets:
        sock.close()
    print(f"  closed {len(closed_at)} of 100, the last {max(closed_at.values(), default=0):.1f} s after they began "
          f"(head deadline {HEAD_TIMEOUT} s)")
    assert len(closed_at) == 100 and max(closed_at.values()) < HEAD_TIMEOUT + 2


def test_half_sent_bodies_end_at_the_body_deadline(hostile_server):
    s = hostile_server
    before = s.rss_kib()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
            b"Content-Type: application/json\r\nContent-Length: 8000000\r\n\r\n")
    sockets = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(40)]
    start = time.time()
    cut_while_sending = 0
    with probing(s, "40 half-sent 8 MB bodies"):
        for sock in sockets:
            try:
                sock.sendall(head + b"x" * 4000000)
            except (BrokenPipeError, ConnectionResetError):
                cut_while_sending += 1  # on a slow machine its deadline came while the others were still sending: the case under test
            sock.setblocking(False)
        held = (s.rss_kib() - before) / 1024
        all_closed = wait_until(lambda: all(is_closed(x) for x in sockets), BODY_TIMEOUT + 3)
        elapsed = time.time() - start
    for sock in sockets:
        sock.close()
    print(f"  40 x 4 MB held: RSS +{held:.0f} MiB; all closed {elapsed:.1f} s after they began (body deadline {BODY_TIMEOUT} s), "
          f"{cut_while_sending} of them while the test was still sending")
    assert all_closed

    # Without a key the body is never read: 401 at once.
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(head.replace(b"Bearer sk-alpha", b"Bearer sk-wrong"))
    sock.settimeout(5)
    assert sock.recv(4096).startswith(b"HTTP/1.1 401")
    sock.close()


def test_huge_prompts_and_nesting_are_refused_without_stalling_health(hostile_server):
    s = hostile_server
    prompt_body = json.dumps({"prompt": "x" * 8_000_000, "max_tokens": 4}).encode()
    nesting_body = b"[" * 8_000_000
    results = []

    def post(body):
        start = time.time()
        connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        connection.request("POST", "/v1/completions", body, {"Authorization": "Bearer sk-alpha", "Content-Type": "application/json"})
        response = connection.getresponse()
        results.append((response.status, json.loads(response.read())["error"].get("code"), time.time() - start))

    before = s.rss_kib()
    with probing(s, "four 8 MB prompts and 8 MB of nesting"):
        threads = [threading.Thread(target=post, args=(prompt_body,)) for _ in range(4)]
        threads.append(threading.Thread(target=post, args=(nesting_body,)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(f"  answers {[(status, code) for status, code, _ in results]}, slowest {max(t for _, _, t in results):.2f} s, "
          f"RSS +{(s.rss_kib() - before) / 1024:.0f} MiB after")
    assert sorted(status for status, _, _ in results) == [400] * 5
    assert sum(code == "context_length_exceeded" for _, code, _ in results) == 4


def test_one_tenant_flooding_leaves_the_other_its_share(keys_file):
    """Default limits (nothing but the keys file): alpha floods from 8 threads,
    beta sends one request at a time; beta must get at least 90% through."""
    s = ServerProcess("--api-keys", keys_file, "--ctx-size", "512")
    stop = threading.Event()
    flood = {"sent": 0, "ok": 0, "tenant_429": 0}

    def flooder():
        connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 2})
        while not stop.is_set():
            try:
                connection.request("POST", "/v1/completions", body, {"Authorization": "Bearer sk-alpha"})
                response = connection.getresponse()
                text = response.read()
            except (OSError, http.client.HTTPException):
                connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
                continue
            flood["sent"] += 1
            flood["ok"] += response.status == 200
            flood["tenant_429"] += response.status == 429 and b"tenant 'alpha'" in text

    try:
        threads = [threading.Thread(target=flooder) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        beta = [completion(s, key="sk-beta")[0] for _ in range(40) if not time.sleep(0.1)]
        stop.set()
        for t in threads:
            t.join()
    finally:
        s.stop()
    share = beta.count(200) / len(beta)
    print(f"  alpha sent {flood['sent']}, {flood['ok']} through, {flood['tenant_429']} refused by its own bucket; "
          f"beta {beta.count(200)} of {len(beta)} through ({100 * share:.0f}%)")
    assert flood["tenant_429"] > 0 and share >= 0.9


def test_a_client_sending_on_reading_its_answer_finds_the_slot_free():
    """One slot in flight; each request goes the moment the last answer's final
    byte is read, streamed or whole. The slot (and the pages) must be free by
    then: CI once saw a 503 here when the server released them after writing."""
    s = ServerProcess("--max-in-flight", "1", "--rate", "100000", "--burst", "100000", "--tenant-rate", "100000",
                      "--tenant-burst", "100000", "--ctx-size", "512")
    refused = []
    try:
        for i in range(300):
            status, text = completion(s, max_tokens=1, stream=i % 2 == 1)
            if status != 200:
                refused.append((i, status, text[:120]))
    finally:
        s.stop()
    assert refused == []


@pytest.fixture
def slow_server(keys_file, tmp_path):
    """A server of its own whose every engine step first waits 50 ms (the admin
    debug hook): a 400-token generation runs for 20 s or more on any machine,
    whatever ran before it."""
    admin_keys = tmp_path / "admin-keys.txt"
    admin_keys.write_text("sk-ops ops\n")
    s = ServerProcess("--api-keys", keys_file, "--admin-keys", str(admin_keys), "--ctx-size", "512")
    s.debug({"step_delay_ms": 50}, key="sk-ops")
    yield s
    s.stop()


def test_a_client_leaving_behind_a_pipelined_request_is_noticed(slow_server):
    s = slow_server
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    # Both waits only guard against a hang: the generation cannot end by itself
    # within 20 s, and the access log below says why it ended.
    assert wait_until(lambda: s.metric("dsinfer:num_requests_in_flight") == 1, 60)
    start = time.time()
    sock.close()
    assert wait_until(lambda: s.metric("dsinfer:num_requests_in_flight") == 0 and s.metric("dsinfer:kv_pages_held") == 0, 60)
    print(f"  the generation ahead of a pipelined request ended {time.time() - start:.2f} s after its client left")
    assert any(line["reason"] == "client_gone" and line["path"] == "/v1/completions" for line in s.access_log())


def test_out_of_descriptors_accept_backs_off_instead_of_spinning(keys_file):
    """Caps set above the file limit on purpose: accept runs out of descriptors.
    The server must wait (not spin a core) until the deadlines free some."""
    s = ServerProcess("--api-keys", keys_file, "--client-header-timeout", str(HEAD_TIMEOUT), "--max-connections", "1000",
                      "--max-connections-per-address", "1000", nofile=256)
    try:
        sockets = open_idle_connections(s, 400)
        time.sleep(0.3)
        cpu_share = server_cpu_share(s, HEAD_TIMEOUT - 0.5)
        closed = wait_until(lambda: all(is_closed(x) for x in sockets), 3 * HEAD_TIMEOUT + 5)
        for sock in sockets:
            sock.close()
        backoffs = s.metric("dsinfer:http_accept_backoffs")
        print(f"  400 connections against ulimit -n 256: {backoffs:.0f} accept back-offs, server CPU while out of "
              f"descriptors {100 * cpu_share:.1f}% of a core, all closed: {closed}")
        assert backoffs > 0 and cpu_share < 0.10 and closed
        assert completion(s)[0] == 200
    finally:
        s.stop()


def test_an_endless_chunk_header_is_refused_with_bounded_memory(hostile_server):
    s = hostile_server
    before = s.rss_kib()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n1;")
    sock.settimeout(5)
    sent, start = 0, time.time()
    with contextlib.suppress(OSError):
        while sent < 64 << 20 and time.time() - start < 10:
            sent += sock.send(b"e" * 65536)  # a chunk extension that never ends
    grown = (s.rss_kib() - before) / 1024
    reply = sock.recv(64)
    sock.close()
    print(f"  endless chunk extension: refused after {sent / 2**20:.1f} MiB sent; RSS +{grown:.1f} MiB; {reply[:24]!r}")
    assert reply.startswith(b"HTTP/1.1 400") and grown < 16

"""The official `openai` package against a real `dsinfer serve`: every
endpoint, streamed and not, and every error status mapped to the exception
class the client raises for it."""

import json
import socket
import time
import urllib.request

import openai
import pytest

from conftest import KEYS
from server_process import ServerProcess

PROMPT = "Once upon a time"


def client(server, key="sk-alpha"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=60)


def test_models_health_ready_metrics(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["stories260K"]
    for path in ("/health", "/ready"):
        with urllib.request.urlopen(server.base + path) as r:
            assert r.status == 200
    assert server.metric("dsinfer:kv_pages_total") > 0


def test_completion_streamed_equals_whole(server):
    c = client(server)
    whole = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=24, temperature=0)
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 24
    assert whole.usage.prompt_tokens == 5  # BOS + 4 tokens
    assert whole.usage.total_tokens == 29
    text = ""
    usage = None
    for chunk in c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                      stream_options={"include_usage": True}):
        if chunk.choices:
            text += chunk.choices[0].text
        if chunk.usage:
            usage = chunk.usage
    assert text == whole.choices[0].text
    assert usage.completion_tokens == 24
    # The second identical prompt found its first page in the prefix cache.
    again = c.completions.create(model="stories260K", prompt=PROMPT * 6, max_tokens=2, temperature=0)
    again = c.completions.create(model="stories260K", prompt=PROMPT * 6, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


def test_chat_streamed_and_whole_with_reasoning_split(server):
    c = client(server)
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me one."}]
    whole = c.chat.completions.create(model="stories260K", messages=messages, max_tokens=20, temperature=0)
    message = whole.choices[0].message
    # R1's generation prompt opens <think>; this model never closes it, so all of it is reasoning.
    reasoning = message.model_extra["reasoning_content"]
    assert reasoning and message.content == ""
    streamed_reasoning, streamed_content, roles = "", "", []
    for chunk in c.chat.completions.create(model="stories260K", messages=messages, max_tokens=20, temperature=0, stream=True):
        delta = chunk.choices[0].delta
        roles.append(delta.role)
        streamed_content += delta.content or ""
        streamed_reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
    assert roles[0] == "assistant"
    assert streamed_reasoning == reasoning and streamed_content == ""


def test_stop_strings(server):
    c = client(server)
    full = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=40, temperature=0).choices[0].text
    assert " Lily" in full
    stopped = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=40, temperature=0, stop=[" Lily", "zzz"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == full[: full.index(" Lily")]


def test_seed_reproducibility(server):
    c = client(server)
    texts = [c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=30, temperature=1.0, seed=s).choices[0].text
             for s in (42, 42, 43)]
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


def test_logprobs(server):
    c = client(server)
    r = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=8, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 8 and "".join(lp.tokens) == r.choices[0].text
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and len(top) == 3
        assert abs(max(top.values()) - chosen) < 1e-4  # greedy: the chosen token is the most likely
    chat = c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                     temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 5 and all(len(t.top_logprobs) == 2 for t in content)


def test_error_statuses_raise_the_matching_exceptions(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", temperature=7)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", n=17)  # at most 16 choices
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=600)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.AuthenticationError):
        client(server, key="sk-wrong").completions.create(prompt=PROMPT, model="stories260K")
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(prompt=PROMPT, model="gpt-4o")
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.APIStatusError) as e:
        c.completions.create(prompt="x" * 70000, model="stories260K")
    assert e.value.status_code == 413
    # Raw HTTP: invalid JSON and an unknown path.
    for path, body, status in (("/v1/completions", b"{oops", 400), ("/v2/nothing", b"{}", 404)):
        request = urllib.request.Request(server.base + path, data=body, headers={"Authorization": "Bearer sk-alpha"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request)
        assert e.value.code == status
        assert "message" in json.loads(e.value.read())["error"]


def test_rate_limit_429_and_overload_503(keys_file):
    s = ServerProcess("--api-keys", keys_file, "--tenant-rate", "0.2", "--tenant-burst", "2", "--max-in-flight", "1")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="sk-beta", max_retries=0)
        # One long request holds the only in-flight slot; the next gets 503 at once.
        stream = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=400, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        next(iter(stream))
        with pytest.raises(openai.InternalServerError) as e:
            c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4)
        assert e.value.status_code == 503 and e.value.response.headers["retry-after"]
        stream.close()
        with pytest.raises(openai.RateLimitError) as e:  # the tenant's burst of 2 is spent
            c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4)
        assert int(e.value.response.headers["retry-after"]) >= 1
        # Another tenant has its own bucket.
        other = openai.OpenAI(base_url=s.base + "/v1", api_key="sk-alpha", max_retries=0)
        deadline = time.time() + 5
        while True:  # the slot frees within a step of the disconnect
            try:
                other.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4)
                break
            except openai.InternalServerError:
                assert time.time() < deadline
                time.sleep(0.05)
    finally:
        s.stop()


def test_fifty_disconnects_leave_no_page_held(server):
    sockets = []
    body = json.dumps({"model": "stories260K", "prompt": PROMPT, "max_tokens": 400, "stream": True, "ignore_eos": True}).encode()
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alpha\r\n"
                     b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        sockets.append(sock)
    for sock in sockets:
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # streaming has begun
    for sock in sockets:
        sock.close()
    # A guard against a hang, not a time limit: the pages go within a step of
    # each disconnect, and the time it took is printed.
    start = deadline = time.time()
    deadline += 60
    while server.metric("dsinfer:kv_pages_held") > 0 or server.metric("dsinfer:num_requests_in_flight") > 0:
        assert time.time() < deadline, "pages still held 60 s after the clients left"
        time.sleep(0.02)
    print(f"  50 disconnects: every page free {time.time() - start:.2f} s after the last client left")


def test_drain_on_sigterm(keys_file, tmp_path):
    import threading
    admin = tmp_path / "admin.txt"
    admin.write_text("adm-drain tester\n")
    s = ServerProcess("--api-keys", keys_file, "--tenant-rate", "100", "--admin-keys", str(admin))
    # Every step waits 10 ms, so each stream lasts seconds: all 8 are still open when the
    # server is told to stop, however slow or loaded the machine (unslowed, a stream could
    # end before the last one started).
    s.debug({"step_delay_ms": 10}, "adm-drain")
    c = openai.OpenAI(base_url=s.base + "/v1", api_key="sk-alpha", max_retries=0, timeout=60)
    results, errors = [], []

    def stream_one():
        try:
            finish = None
            for chunk in c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=300, temperature=0, stream=True):
                finish = chunk.choices[0].finish_reason if chunk.choices else finish
            results.append(finish)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=stream_one) for _ in range(8)]
    for t in threads:
        t.start()
    s.wait_for_in_flight(8)
    s.terminate()
    time.sleep(0.05)
    with pytest.raises((openai.InternalServerError, openai.APIConnectionError)) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4)
    if isinstance(e.value, openai.InternalServerError):
        assert e.value.status_code == 503
    for t in threads:
        t.join()
    assert s.process.wait(timeout=30) == 0
    assert errors == []
    assert len(results) == 8 and set(results) <= {"stop", "length"}
    s.stop()


def test_a_prompt_that_can_never_fit_gets_400_not_503():
    # A pool of 8 pages of 16 tokens (10 KiB each for stories260K in f16): the context
    # is cut to 128 tokens, and a 120-token prompt needs all 8 pages plus the reserve.
    s = ServerProcess("--kv-cache-memory", str(8 * 10240))
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(prompt=[1] * 120, model="stories260K", max_tokens=1)
        assert e.value.code == "context_length_exceeded" and "never fit" in e.value.message
        assert c.completions.create(prompt=[1] * 40, model="stories260K", max_tokens=4).usage.completion_tokens == 4
    finally:
        s.stop()


def test_unknown_and_unimplemented_fields_are_refused_by_name(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4, extra_body={"max_tokns": 5})
    assert e.value.body["param"] == "max_tokns"
    for field, value in (("suffix", "x"), ("best_of", 2)):
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=4, extra_body={field: value})
        assert e.value.body["param"] == field and "not supported" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "hi"}], response_format={"type": "yaml"})
    assert e.value.body["param"] == "response_format" and "yaml" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:  # echo is the completions endpoint's
        c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "hi"}], extra_body={"echo": True})
    assert e.value.body["param"] == "echo"


def test_logit_bias_bans_a_token(server):
    """' the' (id 265, from `dsinfer tokenize`) is the commonest word of these stories;
    at -100 it never appears in 1,000 sampled tokens."""
    import subprocess
    from server_process import DSINFER, STORIES
    pieces = subprocess.run([DSINFER, "tokenize", "-m", STORIES, "--no-bos", "--pieces", " the"], capture_output=True,
                            text=True, check=True).stdout.split("\n")
    the = int([line for line in pieces if "' the'" in line][0].split()[0])
    c = client(server)
    free = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=250, temperature=1, seed=3, logprobs=0)
    assert " the" in free.choices[0].logprobs.tokens
    sampled = []
    for seed in range(4):
        out = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=250, temperature=1, seed=seed, logprobs=0,
                                   logit_bias={str(the): -100})
        sampled += out.choices[0].logprobs.tokens
    assert len(sampled) == 1000 and " the" not in sampled
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(prompt=PROMPT, model="stories260K", logit_bias={"999999": 1})
    assert e.value.body["param"] == "logit_bias"


def post_json(server, path, body, key="sk-alpha"):
    request = urllib.request.Request(server.base + path, data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tokenize_detokenize_model_by_id_and_version(server):
    status, tokens = post_json(server, "/tokenize", {"prompt": PROMPT, "return_token_strs": True})
    assert status == 200 and tokens["count"] == len(tokens["tokens"]) == 5 and tokens["max_model_len"] == 512
    assert tokens["token_strs"][0] == "<s>"
    # The count is what a completion of the same prompt reports.
    usage = client(server).completions.create(prompt=PROMPT, model="stories260K", max_tokens=1).usage
    assert usage.prompt_tokens == tokens["count"]
    status, text = post_json(server, "/detokenize", {"tokens": tokens["tokens"][1:]})
    assert status == 200 and text["prompt"].strip() == PROMPT
    status, chat = post_json(server, "/tokenize", {"messages": [{"role": "user", "content": "Tell me one."}]})
    chat_usage = client(server).chat.completions.create(model="stories260K", max_tokens=1,
                                                        messages=[{"role": "user", "content": "Tell me one."}]).usage
    assert status == 200 and chat["count"] == chat_usage.prompt_tokens
    assert post_json(server, "/detokenize", {"tokens": [10**6]})[0] == 400
    assert post_json(server, "/tokenize", {"prompt": PROMPT}, key="sk-wrong")[0] == 401
    assert client(server).models.retrieve("stories260K").id == "stories260K"
    with pytest.raises(openai.NotFoundError):
        client(server).models.retrieve("gpt-4o")
    with urllib.request.urlopen(server.base + "/version") as r:
        assert json.loads(r.read())["version"]


def test_n_choices_are_reproducible_per_seed(server):
    c = client(server)
    ask = dict(prompt=PROMPT * 4, model="stories260K", max_tokens=12, temperature=1, seed=11, n=4)
    first = c.completions.create(**ask)
    again = c.completions.create(**ask)
    texts = [ch.text for ch in sorted(first.choices, key=lambda ch: ch.index)]
    assert [ch.index for ch in first.choices] == [0, 1, 2, 3] and len(set(texts)) > 1
    assert texts == [ch.text for ch in sorted(again.choices, key=lambda ch: ch.index)]
    assert first.usage.completion_tokens == 48 and first.usage.prompt_tokens == again.usage.prompt_tokens
    # Choice i samples with seed + i: choice 1 of seed 11 is choice 0 of seed 12.
    single = c.completions.create(**dict(ask, n=1, seed=12))
    assert single.choices[0].text == texts[1]
    # Streamed: the same texts, each chunk tagged with its choice.
    streamed = ["", "", "", ""]
    for chunk in c.completions.create(**ask, stream=True):
        for ch in chunk.choices:
            streamed[ch.index] += ch.text
    assert streamed == texts
    chat = c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}], n=2, max_tokens=5, seed=1)
    assert len(chat.choices) == 2
    # Choices 1-3 start once choice 0 has computed the prompt: each finds its full pages cached.
    hits = server.metric("dsinfer:prefix_cache_hits")
    fresh = c.completions.create(prompt="The dog ran " * 8, model="stories260K", max_tokens=4, n=4, seed=1)
    assert fresh.usage.prompt_tokens >= 16
    assert server.metric("dsinfer:prefix_cache_hits") - hits >= 3 * 16


def test_stop_token_ids_end_the_reply_before_the_token(server):
    c = client(server)
    full = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=40, temperature=0, logprobs=0)
    tokens = full.choices[0].logprobs.tokens
    # SPM puts the space in front itself: "Lily" becomes the one token "▁Lily".
    status, the = post_json(server, "/tokenize", {"prompt": "Lily", "add_special_tokens": False})
    assert status == 200 and len(the["tokens"]) == 1 and " Lily" in tokens
    stopped = c.completions.create(prompt=PROMPT, model="stories260K", max_tokens=40, temperature=0,
                                   extra_body={"stop_token_ids": the["tokens"]})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == "".join(tokens[: tokens.index(" Lily")])

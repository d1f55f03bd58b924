"""OpenAI's Responses API (POST /v1/responses, GET and DELETE
/v1/responses/{id}, GET /v1/responses/{id}/input_items) with the official
`openai` client against `dsinfer serve --store-dir`: output_text and usage,
previous_response_id (across a restart too), Responses' stream events,
function calls and their outputs (a scripted model writes Hermes' calls
under Qwen2.5's template), reasoning items under an R1 template, text.format,
tenants kept apart, and a store killed mid-write that loses nothing it
answered for."""

import concurrent.futures
import json
import os
import re
import signal
import sqlite3
import time
import urllib.error
import urllib.request

import openai
import pytest

from scripted_model import serve_scripted
from server_process import ServerProcess

WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def client_for(server, key="sk-alpha"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("sk-alpha alpha\nsk-beta beta\n")
    return str(path)


@pytest.fixture(scope="module")
def stored(keys, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("store"))
    server = ServerProcess("--chat-template", "chatml", "--ctx-size", "2048", "--api-keys", keys, "--store-dir", store)
    yield server, store
    server.stop()


def test_a_response_its_retrieval_and_its_input_items(stored):
    server, _ = stored
    client = client_for(server)
    response = client.responses.create(model="stories260K", input="Once upon a time", instructions="Tell a story.",
                                       max_output_tokens=16, temperature=0, metadata={"case": "one"})
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 16 and response.output_text
    assert response.instructions == "Tell a story." and response.metadata == {"case": "one"}
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.id == response.id
    items = list(client.responses.input_items.list(response.id))
    assert len(items) == 1 and items[0].role == "user" and items[0].content[0].text == "Once upon a time"
    # A turn on top of it sees its history: more prompt, and the same text as a request that spells the history out.
    follow = client.responses.create(model="stories260K", input="And then?", previous_response_id=response.id, max_output_tokens=8,
                                     temperature=0)
    assert follow.previous_response_id == response.id
    spelled = client.responses.create(model="stories260K", max_output_tokens=8, temperature=0, store=False, input=[
        {"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": response.output_text},
        {"role": "user", "content": "And then?"}])
    assert follow.output_text == spelled.output_text
    assert follow.usage.input_tokens == spelled.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(spelled.id)  # store: false keeps nothing
    client.responses.delete(follow.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(follow.id)


def test_streaming_events_and_the_same_text(stored):
    server, _ = stored
    client = client_for(server)
    ask = dict(model="stories260K", input="Hello", max_output_tokens=12, temperature=0, store=False)
    whole = client.responses.create(**ask)
    events = list(client.responses.create(stream=True, **ask))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].response.output_text == whole.output_text


def test_text_format_json_schema(stored):
    server, _ = stored
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"],
              "additionalProperties": False}
    response = client_for(server).responses.create(model="stories260K", input="JSON", max_output_tokens=60, store=False,
                                                   text={"format": {"type": "json_schema", "name": "r", "schema": schema}})
    assert response.status == "completed" and 0 <= json.loads(response.output_text)["n"] <= 99


def test_a_tenant_sees_only_its_own_responses(stored):
    server, _ = stored
    alpha, beta = client_for(server), client_for(server, "sk-beta")
    mine = alpha.responses.create(model="stories260K", input="Secret", max_output_tokens=4, temperature=0)
    for attempt in (lambda: beta.responses.retrieve(mine.id), lambda: list(beta.responses.input_items.list(mine.id)),
                    lambda: beta.responses.delete(mine.id),
                    lambda: beta.responses.create(model="stories260K", input="x", max_output_tokens=2, previous_response_id=mine.id)):
        with pytest.raises(openai.NotFoundError) as error:
            attempt()
        assert "Secret" not in str(error.value.body)
    assert alpha.responses.retrieve(mine.id).id == mine.id  # still there: beta's delete touched nothing


def test_what_is_not_done_is_refused_by_name(stored):
    server, _ = stored
    client = client_for(server)
    for kwargs, word in [(dict(tools=[{"type": "web_search"}]), "web_search"),
                         (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]), "input_image"),
                         (dict(input=[{"type": "computer_call_output", "call_id": "c", "output": {}}]), "computer_call_output"),
                         (dict(background=True), "background"), (dict(truncation="auto"), "truncation"),
                         (dict(extra_body={"bogus": 1}), "bogus"), (dict(reasoning={"summary": "auto"}), "reasoning.summary")]:
        with pytest.raises(openai.BadRequestError) as error:
            client.responses.create(**{"model": "stories260K", "input": "x", "max_output_tokens": 2, **kwargs})
        assert word in str(error.value), (word, str(error.value))
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="stories260K", input="x", max_output_tokens=2, previous_response_id="resp_missing")


def test_without_a_store_dir_nothing_is_stored(tmp_path):
    server = ServerProcess("--chat-template", "chatml")
    try:
        client = client_for(server, "none")
        response = client.responses.create(model="stories260K", input="x", max_output_tokens=2)
        assert response.store is False
        with pytest.raises(openai.BadRequestError) as error:
            client.responses.create(model="stories260K", input="x", max_output_tokens=2, store=True)
        assert "--store-dir" in str(error.value)
    finally:
        server.stop()


def test_previous_response_id_across_a_restart_and_a_kill_mid_write(keys, tmp_path):
    store = str(tmp_path / "store")
    server = ServerProcess("--chat-template", "chatml", "--api-keys", keys, "--store-dir", store)
    first = client_for(server).responses.create(model="stories260K", input="Once upon a time", max_output_tokens=8, temperature=0)
    answered = []

    def one(i):
        try:
            answered.append(client_for(server).responses.create(model="stories260K", input=f"Story {i}", max_output_tokens=4).id)
        except openai.APIError:
            pass  # cut by the kill

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, i) for i in range(200)]
        deadline = time.time() + 120  # guards against a hang only
        while len(answered) < 20 and time.time() < deadline:
            time.sleep(0.01)
        os.kill(server.process.pid, signal.SIGKILL)  # mid-write: requests in flight, rows being committed
        concurrent.futures.wait(futures, timeout=60)
    server.process.wait(timeout=10)
    server.log.close()
    with sqlite3.connect(os.path.join(store, "responses.sqlite")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    restarted = ServerProcess("--chat-template", "chatml", "--api-keys", keys, "--store-dir", store)
    try:
        client = client_for(restarted)
        for response_id in answered:  # every response a client was given survived
            assert client.responses.retrieve(response_id).id == response_id
        follow = client.responses.create(model="stories260K", input="And then?", previous_response_id=first.id, max_output_tokens=4,
                                         temperature=0)
        assert follow.previous_response_id == first.id and follow.usage.input_tokens > first.usage.input_tokens
    finally:
        restarted.stop()


@pytest.fixture(scope="module")
def hermes(tmp_path_factory):
    pieces = ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "\n</tool_call>"]
    server = serve_scripted(tmp_path_factory.mktemp("hermes"), "Qwen-Qwen2.5-7B-Instruct.jinja", pieces, "scripted",
                            "--store-dir", str(tmp_path_factory.mktemp("hermes-store")))
    yield client_for(server, "none")
    server.stop()


def test_function_calls_and_their_outputs(hermes):
    ask = dict(model="scripted", max_output_tokens=64, temperature=0, tools=[WEATHER])
    response = hermes.responses.create(input="Weather in Paris?", **ask)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"} and call.call_id.startswith("call_")
    events = list(hermes.responses.create(input="Weather in Paris?", stream=True, **ask))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
    # The output goes back as a function_call_output, on top of the stored turn.
    answer = hermes.responses.create(previous_response_id=response.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees, sunny"}], **ask)
    assert answer.usage.input_tokens > response.usage.input_tokens + 5
    forced = hermes.responses.create(input="Weather?", tool_choice={"type": "function", "name": "get_weather"}, **ask)
    assert [item.type for item in forced.output] == ["function_call"]


@pytest.fixture(scope="module")
def r1(tmp_path_factory):
    server = serve_scripted(tmp_path_factory.mktemp("r1"), "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                            ["Let me think", "</think>", "\n\n", "It is 4."], "r1")
    yield client_for(server, "none")
    server.stop()


def test_reasoning_items_from_an_r1_template(r1):
    think = {"reasoning": {"effort": "medium"}}  # the template's thinking switch: on
    response = r1.responses.create(model="r1", input="2+2?", max_output_tokens=32, temperature=0, **think)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[0].content[0].text == "Let me think" and response.output_text == "It is 4."
    events = list(r1.responses.create(model="r1", input="2+2?", max_output_tokens=32, temperature=0, stream=True, **think))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Let me think"
    # A reasoning item in the input goes back to the template as the turn's reasoning.
    again = r1.responses.create(model="r1", max_output_tokens=32, temperature=0, **think, input=[
        {"role": "user", "content": "2+2?"}, response.output[0].model_dump(exclude_none=True), response.output[1].model_dump(exclude_none=True),
        {"role": "user", "content": "3+3?"}])
    assert again.status == "completed"


def test_a_request_cut_by_its_timeout_ends_in_each_apis_own_error(tmp_path):
    """--request-timeout ends a slow stream mid-way: Responses' stream ends with response.failed, Anthropic's
    with `event: error`, chat completions' with an error chunk and [DONE]; not streamed, each API's error body."""
    admin = tmp_path / "admin.txt"
    admin.write_text("sk-admin operator\n")
    server = ServerProcess("--chat-template", "chatml", "--request-timeout", "1", "--admin-keys", str(admin))
    try:
        server.debug({"step_delay_ms": 50}, "sk-admin")  # 64 tokens take 3 s: past the timeout
        cases = {"/v1/responses": {"model": "stories260K", "input": "Hi", "max_output_tokens": 64, "stream": True},
                 "/v1/messages": {"model": "stories260K", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}}
        endings = {}
        for path, body in cases.items():
            request = urllib.request.Request(server.base + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                endings[path] = re.findall(r"event: ([\w.]+)\ndata: (.*)\n\n", response.read().decode())[-1]
        name, data = endings["/v1/responses"]
        assert name == "response.failed" and json.loads(data)["response"]["status"] == "failed"
        assert "request-timeout" in json.loads(data)["response"]["error"]["message"]
        name, data = endings["/v1/messages"]
        assert name == "error" and json.loads(data)["error"]["type"] == "overloaded_error"
        for path, body in cases.items():
            request = urllib.request.Request(server.base + path, data=json.dumps(dict(body, stream=False)).encode(),
                                             headers={"content-type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(request, timeout=30)
            reply = json.loads(error.value.read())
            assert error.value.code == 503
            assert (reply["error"]["type"] == "overloaded_error") if path == "/v1/messages" else (reply["error"]["code"] == "timeout")
    finally:
        server.stop()

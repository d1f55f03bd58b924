"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
with the official `anthropic` client against `dsinfer serve`: messages,
streaming with Anthropic's event sequence, stop sequences, tools with a
tool_result turn (a scripted model writes the call in Hermes' format under
Qwen2.5's real template), thinking blocks under an R1 template, structured
output, count_tokens, keys as x-api-key, and errors as the client's exception
classes with Anthropic's error body. The SDK (2.17) has no temperature
parameter: greedy decoding is asked for through extra_body, as the API still takes it."""

import json
import re
import urllib.error
import urllib.request

import anthropic
import pytest

from scripted_model import serve_scripted
from server_process import ServerProcess

GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("sk-alpha alpha\n")
    server = ServerProcess("--chat-template", "chatml", "--ctx-size", "2048", "--api-keys", str(keys))
    yield server, anthropic.Anthropic(base_url=server.base, api_key="sk-alpha", max_retries=0)
    server.stop()


def text_of(message):
    return "".join(block.text for block in message.content if block.type == "text")


def test_a_message_and_its_usage(stories):
    server, client = stories
    message = client.messages.create(model="stories260K", max_tokens=12, system="Tell a story.", extra_body=GREEDY,
                                      messages=[{"role": "user", "content": "Once upon a time"}], metadata={"user_id": "user-7"})
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == "stories260K"
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 12
    counted = client.messages.count_tokens(model="stories260K", system="Tell a story.",
                                           messages=[{"role": "user", "content": "Once upon a time"}])
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == counted.input_tokens
    assert '"user":"user-7"' in server.output() and '"tenant":"alpha"' in server.output()  # logged, never the tenant


def test_streaming_is_anthropics_event_sequence_and_the_same_text(stories):
    server, client = stories
    ask = dict(model="stories260K", max_tokens=16, extra_body=GREEDY, messages=[{"role": "user", "content": "Hello"}])
    whole = client.messages.create(**ask)
    events = list(client.messages.create(stream=True, **ask))
    types = [e.type for e in events]  # the client leaves out the pings
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types[1] == "content_block_start" and types[-3] == "content_block_stop"
    assert set(types[2:-3]) == {"content_block_delta"}
    assert all(e.delta.type == "text_delta" for e in events[2:-3])
    assert "".join(e.delta.text for e in events[2:-3]) == text_of(whole)
    # On the wire: each event's name beside its data's type, a ping after message_start.
    request = urllib.request.Request(server.base + "/v1/messages", data=json.dumps({k: v for k, v in dict(ask, stream=True, **GREEDY).items() if k != "extra_body"}).encode(),
                                     headers={"x-api-key": "sk-alpha", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        wire = response.read().decode()
    pairs = re.findall(r"event: (\w+)\ndata: (.*)\n\n", wire)
    assert [name for name, _ in pairs][:2] == ["message_start", "ping"]
    assert all(json.loads(data)["type"] == name for name, data in pairs)
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 16
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert text_of(final) == text_of(whole) and final.stop_reason == "max_tokens"


def test_a_stop_sequence_ends_the_reply_and_is_named(stories):
    _, client = stories
    ask = dict(model="stories260K", max_tokens=40, extra_body=GREEDY, messages=[{"role": "user", "content": "Hello"}])
    full = text_of(client.messages.create(**ask))
    stop = full[10:14]
    assert stop.strip(), full
    message = client.messages.create(stop_sequences=[stop, "never appears"], **ask)
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert text_of(message) == full[:full.index(stop)]


def test_structured_output_through_output_config(stories):
    _, client = stories
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"],
              "additionalProperties": False}
    for seed in range(3):
        message = client.messages.create(model="stories260K", max_tokens=60, extra_body={"temperature": 1, "top_k": 40 + seed},
                                          messages=[{"role": "user", "content": "JSON please"}],
                                          output_config={"format": {"type": "json_schema", "schema": schema}})
        assert message.stop_reason == "end_turn"
        assert 1 <= json.loads(text_of(message))["n"] <= 9


def test_errors_are_the_clients_exception_classes_with_anthropics_body(stories):
    server, client = stories
    user = [{"role": "user", "content": "x"}]
    cases = [(dict(messages=user, max_tokens=5, model="stories260K", service_tier="auto"), "service_tier"),
             (dict(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}],
                   max_tokens=5, model="stories260K"), "image"),
             (dict(messages=user, max_tokens=5, model="stories260K", extra_body={"bogus": 1}), "bogus"),
             (dict(messages=user, max_tokens=5, model="stories260K", tools=[{"type": "web_search_20250305", "name": "web_search"}]),
              "web_search_20250305"),
             (dict(messages=user + [{"role": "assistant", "content": "The answer is"}], max_tokens=5, model="stories260K"), "prefill"),
             (dict(messages=user, max_tokens=5, model="stories260K", thinking={"type": "enabled", "budget_tokens": 10}),
              "budget_tokens"),
             (dict(messages=user, max_tokens=5, model="stories260K", extra_body={"temperature": 1.5}), "temperature"),
             (dict(messages=user, max_tokens=5, model="stories260K", thinking={"type": "adaptive", "display": "bogus"}), "display")]
    for kwargs, word in cases:
        with pytest.raises(anthropic.BadRequestError) as error:
            client.messages.create(**kwargs)
        assert word in error.value.message, error.value.message
        assert error.value.body["type"] == "error" and error.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as error:
        client.messages.create(model="claude-nope", max_tokens=5, messages=user)
    assert error.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError) as error:
        anthropic.Anthropic(base_url=server.base, api_key="sk-wrong", max_retries=0).messages.create(
            model="stories260K", max_tokens=5, messages=user)
    assert error.value.body["error"]["type"] == "authentication_error" and "x-api-key" in error.value.message
    with pytest.raises(anthropic.BadRequestError) as error:
        client.messages.create(model="stories260K", max_tokens=5, messages=user, extra_headers={"anthropic-beta": "x-2025-01-01"})
    assert "anthropic-beta" in error.value.message
    with pytest.raises(anthropic.BadRequestError) as error:
        client.messages.create(model="stories260K", max_tokens=5, messages=user, extra_headers={"anthropic-version": "1999-01-01"})
    assert "anthropic-version" in error.value.message


def test_bodies_that_are_no_request_are_refused_in_anthropics_shape(stories):
    server, _ = stories
    for body, words in [(b"{", "not valid JSON"), (b"[1]", "JSON object"), (b"[" * 100 + b"]" * 100, "deeper than 64"),
                        (b'{"model": "m", "max_tokens": 1, "messages": []}', "non-empty"),
                        (b'{"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]}', "user or assistant")]:
        request = urllib.request.Request(server.base + "/v1/messages", data=body, headers={"x-api-key": "sk-alpha"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=10)
        reply = json.loads(error.value.read())
        assert error.value.code == 400 and reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
        assert words in reply["error"]["message"], reply


def test_a_body_too_large_is_refused_in_anthropics_shape(tmp_path):
    server = ServerProcess("--chat-template", "chatml", "--max-body-bytes", "2000")
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key="none", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as error:
            client.messages.create(model="stories260K", max_tokens=5, messages=[{"role": "user", "content": "x" * 5000}])
        assert error.value.status_code == 413 and error.value.body["error"]["type"] == "request_too_large"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hermes(tmp_path_factory):
    """A model that answers every prompt with a call of get_weather in Hermes' format."""
    pieces = ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "\n</tool_call>"]
    server = serve_scripted(tmp_path_factory.mktemp("hermes"), "Qwen-Qwen2.5-7B-Instruct.jinja", pieces, "scripted")
    yield anthropic.Anthropic(base_url=server.base, api_key="none", max_retries=0), "".join(pieces)
    server.stop()


def test_tools_tool_use_and_a_tool_result_turn(hermes):
    client, raw = hermes
    ask = dict(model="scripted", max_tokens=64, extra_body=GREEDY, tools=[WEATHER])
    question = [{"role": "user", "content": "Weather in Paris?"}]
    message = client.messages.create(messages=question, **ask)
    assert message.stop_reason == "tool_use"
    (call,) = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris"} and call.id.startswith("toolu_")
    # Streamed: the call as a tool_use block whose input arrives as input_json_delta.
    events = list(client.messages.create(messages=question, stream=True, **ask))
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    assert len(starts) == 1 and starts[0].content_block.name == "get_weather"
    partial = "".join(e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert [e for e in events if e.type == "message_delta"][0].delta.stop_reason == "tool_use"
    # The result goes back as a tool_result; the template renders it (the prompt grows by it).
    turn = question + [{"role": "assistant", "content": message.content},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 degrees, sunny"}]}]
    before = client.messages.count_tokens(model="scripted", messages=question, tools=[WEATHER]).input_tokens
    after = client.messages.count_tokens(model="scripted", messages=turn, tools=[WEATHER]).input_tokens
    assert after > before + 5
    assert client.messages.create(messages=turn, **ask).stop_reason == "tool_use"  # the scripted model calls again
    # tool_choice none: the model's text is the reply, not parsed; any and tool constrain to a call.
    none = client.messages.create(messages=question, tool_choice={"type": "none"}, **ask)
    assert none.stop_reason == "end_turn" and text_of(none) == raw
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        forced = client.messages.create(messages=question, tool_choice=choice, **ask)
        assert forced.stop_reason == "tool_use", choice
    single = client.messages.create(messages=question, tool_choice={"type": "auto", "disable_parallel_tool_use": True}, **ask)
    assert len([b for b in single.content if b.type == "tool_use"]) == 1


@pytest.fixture(scope="module")
def r1(tmp_path_factory):
    """A model that thinks, closes its thinking and answers, under DeepSeek-R1's template."""
    server = serve_scripted(tmp_path_factory.mktemp("r1"), "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                            ["Let me think", " about it", "</think>", "\n\n", "The answer", " is 4."], "r1")
    yield anthropic.Anthropic(base_url=server.base, api_key="none", max_retries=0)
    server.stop()


def test_thinking_blocks_from_an_r1_template(r1):
    ask = dict(model="r1", max_tokens=1500, extra_body=GREEDY, messages=[{"role": "user", "content": "2+2?"}],
               thinking={"type": "enabled", "budget_tokens": 1024, "display": "summarized"})
    message = r1.messages.create(**ask)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Let me think about it" and message.content[1].text == "The answer is 4."
    events = list(r1.messages.create(stream=True, **ask))
    thinking = "".join(e.delta.thinking for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta")
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert thinking == "Let me think about it" and text == "The answer is 4."
    assert [e.index for e in events if e.type == "content_block_start"] == [0, 1]
    omitted = r1.messages.create(**dict(ask, thinking={"type": "adaptive", "display": "omitted"}))
    assert [(b.type, getattr(b, "thinking", None)) for b in omitted.content] == [("thinking", ""), ("text", None)]
    # A thinking block in the history goes back to the template as the turn's reasoning.
    turn = ask["messages"] + [{"role": "assistant", "content": message.content}, {"role": "user", "content": "And 3+3?"}]
    assert r1.messages.create(**dict(ask, messages=turn)).stop_reason == "end_turn"

"""Structured output with the openai client against a random-weight model:
for 30+ JSON Schemas, response_format json_schema yields text that parses and
validates (jsonschema, with format checking) every time, streamed and not;
llama-server's GBNF `grammar` field constrains the same way; what cannot be
enforced is refused naming the keyword. The schemas bound their strings and
arrays, so that a model choosing at random still reaches the end."""

import json
import re

import jsonschema
import openai
import pytest

from server_process import ServerProcess

S = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"name": S}, "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False},
    {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False},
    {"type": "null"},
    {"enum": ["red", "green", "blue"]},
    {"enum": [1, "two", None, True, {"k": [3]}]},
    {"const": {"version": 2, "tags": ["a", "b"]}},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer"}, "nick": S},
                                               "required": ["id", "nick"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
    {"anyOf": [S, {"type": "integer"}]},
    {"oneOf": [{"type": "boolean"}, {"type": "null"}]},
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                         "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}}, "required": ["a", "b"],
     "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                        "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": ["string", "null"], "maxLength": 4},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": S, "c": {"type": "boolean"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": S}, "required": ["b"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"k": S}, "required": ["k"], "additionalProperties": False}, "maxItems": 2},
    {"type": "array", "prefixItems": [S, {"type": "integer"}], "items": False, "minItems": 2},
    {"type": "string", "minLength": 3, "maxLength": 5},
    {"type": "integer", "enum": [1, 2, 3]},
    {"type": "object", "properties": {"id": {"type": "integer"}, "title": S, "done": {"type": "boolean"},
                                      "score": {"type": "number"}, "tag": {"enum": ["x", "y"]}},
     "required": ["id", "title", "done", "score", "tag"], "additionalProperties": False},
    {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "maxItems": 2},
    {"allOf": [{"type": "object", "properties": {"q": S}, "required": ["q"], "additionalProperties": False}]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"when": {"type": "string", "format": "time"}, "code": {"type": "string", "pattern": "^x+$", "title": "x"}},
     "required": ["when", "code"], "additionalProperties": False, "description": "annotations constrain nothing"},
    {"type": "boolean"},
]


@pytest.fixture(scope="module")
def client():
    server = ServerProcess("--chat-template", "chatml", "--ctx-size", "2048")
    yield openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
    server.stop()


def ask(client, schema, seed, stream=False):
    kwargs = dict(model="stories260K", max_tokens=1500, temperature=1.0, seed=seed,
                  messages=[{"role": "user", "content": "Reply in JSON."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}})
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        return choice.message.content, choice.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    return text, finish


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_output_validates_against_the_schema(client, index):
    schema = SCHEMAS[index]
    assert len(SCHEMAS) >= 30
    for seed, stream in ((index, False), (1000 + index, True), (2000 + index, False)):
        text, finish = ask(client, schema, seed, stream)
        assert finish == "stop", f"seed {seed}: {finish}: {text!r}"
        value = json.loads(text)
        # Draft 2020-12's own format checkers (date-time and time need rfc3339-validator, installed with the tests).
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


# The bounds, lengths, patterns, property counts and formats of JSON Schema
# the grammar enforces, each sampled hundreds of times (n=16 a request).
KEYWORD_SCHEMAS = [
    {"type": "integer", "minimum": -50, "maximum": 1234},
    {"type": "integer", "exclusiveMinimum": 7, "exclusiveMaximum": 300},
    {"type": "integer", "minimum": 100},
    {"type": "number", "minimum": -2.5, "maximum": 3.75},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "exclusiveMaximum": -0.125},
    {"type": "string", "minLength": 2, "maxLength": 4},
    {"type": "string", "pattern": "^[a-f0-9]{2,4}-[^a-c\\d]\\D.$"},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}, "c": {"type": "null"}},
     "minProperties": 1, "maxProperties": 2, "additionalProperties": False},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "uri"},
    {"type": "string", "format": "hostname"},
    {"type": "string", "format": "ipv4"},
]
SAMPLES_PER_SCHEMA = 208


@pytest.mark.parametrize("index", range(len(KEYWORD_SCHEMAS)))
def test_keywords_hold_over_hundreds_of_samples(client, index):
    schema = KEYWORD_SCHEMAS[index]
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    assert {"email", "uri", "hostname", "ipv4"} <= set(checker.checkers), "a format checker is missing: install fqdn, rfc3986-validator"
    validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
    samples = 0
    for seed in range(SAMPLES_PER_SCHEMA // 16):
        reply = client.chat.completions.create(
            model="stories260K", max_tokens=400, temperature=1.0, seed=10_000 * index + seed, n=16,
            messages=[{"role": "user", "content": "Reply in JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}})
        for choice in reply.choices:
            assert choice.finish_reason == "stop", choice.message.content
            errors = list(validator.iter_errors(json.loads(choice.message.content)))
            assert not errors, f"{choice.message.content!r}: {errors[0].message}"
            samples += 1
    assert samples == SAMPLES_PER_SCHEMA


def test_gbnf_grammar_field(client):
    for seed in range(5):
        reply = client.completions.create(model="stories260K", prompt="Answer:", max_tokens=50, seed=seed, temperature=1.0,
                                          extra_body={"grammar": 'root ::= ("yes" | "no") ", " [0-9]{1,3} "."'})
        assert re.fullmatch(r"(yes|no), [0-9]{1,3}\.", reply.choices[0].text), reply.choices[0].text
        assert reply.choices[0].finish_reason == "stop"


def test_what_cannot_be_enforced_is_refused(client):
    cases = [({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "integer", "multipleOf": 3}}}, "multipleOf"),
             ({"type": "yaml"}, "yaml"),
             ({"type": "json_schema", "json_schema": {"schema": {}}}, "name"),
             ({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "string", "format": "ipv6"}}}, "ipv6")]
    for response_format, word in cases:
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model="stories260K", max_tokens=5, messages=[{"role": "user", "content": "x"}],
                                           response_format=response_format)
        assert word in str(error.value) and "response_format" in str(error.value)
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model="stories260K", prompt="x", max_tokens=5, extra_body={"grammar": "root ::= missing"})
    assert "missing" in str(error.value)
    with pytest.raises(openai.BadRequestError) as error:  # a constrained reply ends where its grammar does
        client.completions.create(model="stories260K", prompt="x", max_tokens=5,
                                  extra_body={"grammar": 'root ::= "yes"', "ignore_eos": True})
    assert "ignore_eos" in str(error.value)


def test_add_generation_prompt_reaches_the_template(client):
    """vLLM's extension: false leaves the assistant turn unopened (ChatML: no '<|im_start|>assistant\\n')."""
    usage = {}
    for flag in (True, False):
        reply = client.chat.completions.create(model="stories260K", max_tokens=1, messages=[{"role": "user", "content": "Hi"}],
                                               extra_body={"add_generation_prompt": flag})
        usage[flag] = reply.usage.prompt_tokens
    assert usage[False] < usage[True]


def test_a_reasoning_model_thinks_freely_and_answers_constrained(tmp_path):
    """Under an R1 template with thinking on (its enable_thinking switch, through chat_template_kwargs)
    the prompt opens <think>: the constraint starts after </think>. A scripted
    model (scripted_model.py) reasons, closes the section and answers; the answer is the constrained part."""
    import os
    from scripted_model import write_scripted_model
    from server_process import ROOT
    template = open(os.path.join(ROOT, "..", "shared", "fixtures", "chat-templates",
                                 "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"), encoding="utf-8").read()
    pieces = ["Let me think", "</think>", "\n\n", '{"a": 1}']
    server = ServerProcess("--served-model-name", "r1", model=write_scripted_model(str(tmp_path / "r1.gguf"), pieces, template))
    try:
        r1 = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
        reply = r1.chat.completions.create(model="r1", max_tokens=32, temperature=0, messages=[{"role": "user", "content": "a?"}],
                                           response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
                                           extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        message = reply.choices[0].message
        assert getattr(message, "reasoning_content", None) == "Let me think"
        assert json.loads(message.content) == {"a": 1}
        assert reply.choices[0].finish_reason == "stop"
    finally:
        server.stop()

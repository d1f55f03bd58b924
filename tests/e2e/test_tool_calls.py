"""Tool calling through the server with the official openai client: for each
format the mission's models (and their neighbours) write, a scripted model
(scripted_model.py) emits a tool call in that format under the model's real
chat template, and the reply must carry it as OpenAI tool_calls, streamed
and not; without tools, or with tool_choice none, the same text is content."""

import json
import os

import openai
import pytest

from scripted_model import write_scripted_model
from server_process import ServerProcess, ROOT

TEMPLATES = os.path.join(ROOT, "..", "shared", "fixtures", "chat-templates")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ARGUMENTS = '{"city":"Paris"}'

# format: (the model's chat template, the pieces the model emits, the arguments as the parser reports them)
FORMATS = {
    "deepseek-r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                    ["</think>", "\n\n", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>",
                     "get_weather\n```json\n", ARGUMENTS, "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"], ARGUMENTS),
    "deepseek-v3.1": ("deepseek-ai-DeepSeek-V3.1.jinja",
                      ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "get_weather", "<｜tool▁sep｜>", ARGUMENTS,
                       "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"], ARGUMENTS),
    "deepseek-v3.2": ("deepseek-ai-DeepSeek-V3.2.jinja",
                      ["<｜DSML｜function_calls>\n", '<｜DSML｜invoke name="get_weather">\n', '<｜DSML｜parameter name="city" string="true">',
                       "Paris", "</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n", "</｜DSML｜function_calls>"], ARGUMENTS),
    "deepseek-v4": ("corpus/deepseek-ai-DeepSeek-V4.jinja",
                    ["<｜DSML｜tool_calls>\n", '<｜DSML｜invoke name="get_weather">\n', '<｜DSML｜parameter name="city" string="true">',
                     "Paris", "</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n", "</｜DSML｜tool_calls>"], ARGUMENTS),
    "hermes": ("Qwen-Qwen2.5-7B-Instruct.jinja",
               ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}', "\n</tool_call>"], ARGUMENTS),
    "llama3-json": ("meta-llama-Llama-3.1-8B-Instruct.jinja", ['{"name": "get_weather", ', '"parameters": {"city": "Paris"}}'],
                    ARGUMENTS),
}


@pytest.fixture(scope="module", params=sorted(FORMATS))
def scripted(request, tmp_path_factory):
    template, pieces, arguments = FORMATS[request.param]
    source = open(os.path.join(TEMPLATES, template), encoding="utf-8").read()
    path = write_scripted_model(str(tmp_path_factory.mktemp("scripted") / "model.gguf"), pieces, source)
    server = ServerProcess("--ctx-size", "2048", "--served-model-name", "scripted", model=path)
    assert f"tool calls: {request.param}" in server.output(), "the format is recognised from the model's own template"
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
    yield request.param, client, "".join(pieces), arguments
    server.stop()


def ask(client, **kwargs):
    return client.chat.completions.create(model="scripted", max_tokens=64, temperature=0,
                                          messages=[{"role": "user", "content": "Weather in Paris?"}], **kwargs)


def test_a_call_in_the_models_format_becomes_tool_calls(scripted):
    name, client, _, arguments = scripted
    reply = ask(client, tools=[WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", name
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == json.loads(arguments)


def test_streamed_calls_arrive_as_tool_call_deltas(scripted):
    name, client, _, arguments = scripted
    calls, content, finish = {}, "", None
    for chunk in ask(client, tools=[WEATHER], stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
            entry["name"] += d.function.name or ""
            entry["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls", name
    assert content.strip() == ""
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == json.loads(arguments)


def test_without_tools_or_with_tool_choice_none_the_text_is_content(scripted):
    name, client, text, _ = scripted
    for kwargs in ({}, {"tools": [WEATHER], "tool_choice": "none"}):
        choice = ask(client, **kwargs).choices[0]
        assert choice.finish_reason == "stop"
        assert not choice.message.tool_calls
        shown = (choice.message.content or "")
        if name == "deepseek-r1":  # the template opened <think>: the scripted "</think>\n\n" closes it
            shown = "</think>" + (getattr(choice.message, "reasoning_content", None) or "") + "\n\n" + shown.lstrip("\n")
        assert shown.replace("\n", "") == text.replace("\n", ""), kwargs


def test_required_and_named_tool_choice_keep_the_models_call(scripted):
    """The scripted call is valid under the constraint, so it comes through unchanged."""
    _, client, _, arguments = scripted
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = ask(client, tools=[WEATHER], tool_choice=choice).choices[0]
        assert reply.finish_reason == "tool_calls", choice
        assert [c.function.name for c in reply.message.tool_calls] == ["get_weather"]
        assert json.loads(reply.message.tool_calls[0].function.arguments) == json.loads(arguments)


SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string", "maxLength": 12}, "limit": {"type": "integer"},
                                     "lang": {"enum": ["en", "zh"]}},
    "required": ["query", "lang"], "additionalProperties": False}}}
BOUNDED_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"],
    "additionalProperties": False}}}


@pytest.fixture(scope="module", params=["Qwen-Qwen2.5-7B-Instruct.jinja", "deepseek-ai-DeepSeek-V3.2.jinja"])
def random_model(request):
    """stories260K (random for this purpose) under the Qwen2.5 template (hermes) or V3.2's (DSML: every
    argument here has a schema beyond a plain string, so each is written as JSON with string="false"):
    only the constraint makes it call."""
    server = ServerProcess("--chat-template", os.path.join(TEMPLATES, request.param), "--ctx-size", "2048")
    yield openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
    server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_constrained_calls_from_a_random_model_validate(random_model, stream):
    import jsonschema
    tools = [BOUNDED_WEATHER, SEARCH]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for seed in range(6):
        choice = "required" if seed % 2 == 0 else {"type": "function", "function": {"name": "search"}}
        kwargs = dict(model="stories260K", max_tokens=800, temperature=1.0, seed=seed, tools=tools, tool_choice=choice,
                      parallel_tool_calls=False, messages=[{"role": "user", "content": "Go."}])
        if stream:
            calls, finish = {}, None
            for chunk in random_model.chat.completions.create(stream=True, **kwargs):
                for d in chunk.choices[0].delta.tool_calls or []:
                    entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
                    entry["name"] += d.function.name or ""
                    entry["arguments"] += d.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            made = [(c["name"], c["arguments"]) for c in calls.values()]
        else:
            reply = random_model.chat.completions.create(**kwargs).choices[0]
            finish = reply.finish_reason
            made = [(c.function.name, c.function.arguments) for c in reply.message.tool_calls or []]
        assert finish == "tool_calls", (seed, made)
        assert len(made) == 1
        name, arguments = made[0]
        if isinstance(choice, dict):
            assert name == "search"
        jsonschema.validate(json.loads(arguments), schemas[name])


@pytest.mark.parametrize("template,section", [("deepseek-ai-DeepSeek-V3.2.jinja", "function_calls"),
                                              ("corpus/deepseek-ai-DeepSeek-V4.jinja", "tool_calls")])
def test_thinking_mode_splits_reasoning_before_a_dsml_call(template, section, tmp_path):
    """V3.2 and V4 in thinking mode (chat_template_kwargs thinking: the generation prompt ends with
    <think>): the reasoning comes back as reasoning_content and the DSML call after it as tool_calls;
    in non-thinking mode the prompt closes the block itself (and the scripted model, which continues
    from the prompt's last token, goes on from its </think>): nothing is reasoning."""
    pieces = ["The user wants weather.", "</think>", f"<｜DSML｜{section}>\n", '<｜DSML｜invoke name="get_weather">\n',
              '<｜DSML｜parameter name="city" string="true">', "Paris", "</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n",
              f"</｜DSML｜{section}>"]
    source = open(os.path.join(TEMPLATES, template), encoding="utf-8").read()
    server = ServerProcess("--ctx-size", "2048", "--served-model-name", "scripted",
                           model=write_scripted_model(str(tmp_path / "model.gguf"), pieces, source))
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        for stream in (False, True):
            kwargs = dict(tools=[WEATHER], extra_body={"chat_template_kwargs": {"thinking": True}})
            if stream:
                reasoning, calls, finish = "", {}, None
                for chunk in ask(client, stream=True, **kwargs):
                    delta = chunk.choices[0].delta
                    reasoning += getattr(delta, "reasoning_content", None) or ""
                    for d in delta.tool_calls or []:
                        entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
                        entry["name"] += d.function.name or ""
                        entry["arguments"] += d.function.arguments or ""
                    finish = chunk.choices[0].finish_reason or finish
                made = [(c["name"], json.loads(c["arguments"])) for c in calls.values()]
            else:
                choice = ask(client, **kwargs).choices[0]
                reasoning, finish = choice.message.reasoning_content, choice.finish_reason
                made = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
            assert reasoning == "The user wants weather.", stream
            assert finish == "tool_calls" and made == [("get_weather", {"city": "Paris"})], stream
        plain = ask(client, tools=[WEATHER], extra_body={"chat_template_kwargs": {"thinking": False}}).choices[0]
        assert not getattr(plain.message, "reasoning_content", None)
        assert [(c.function.name, json.loads(c.function.arguments)) for c in plain.message.tool_calls] == [("get_weather", {"city": "Paris"})]
    finally:
        server.stop()

"""dsinfer's Jinja interpreter renders every real chat template in
../shared/fixtures/chat-templates byte for byte as Python jinja2 does with
transformers' settings (jinja_reference.py), over conversations that exercise
what the templates branch on: a system message or none, several turns, tools
offered, tool calls and their results in the history, reasoning in an
assistant turn, the generation prompt on and off, thinking on and off. Where
jinja2 raises (a template refusing a conversation), dsinfer must refuse too."""

import glob
import json
import os
from datetime import datetime

import pytest

from conftest import FIXTURES
import jinja_reference

TEMPLATES = sorted(glob.glob(os.path.join(FIXTURES, "chat-templates", "*.jinja")) +
                   glob.glob(os.path.join(FIXTURES, "chat-templates", "corpus", "*.jinja")))

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Searches the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                   "required": ["query"]}}}
CALL = {"id": "a1b2c3d4e", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    "multi_turn": [
        {"role": "system", "content": "Be kind. "}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "  Tell me about 深度求索.\n"}],
    "reasoning_in_history": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nthe user greets\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"}],
    "tools_offered": [{"role": "user", "content": "Weather in Paris?"}],
    "tool_round_trip": [
        {"role": "system", "content": "Use tools when they help."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 °C."},
        {"role": "user", "content": "Thanks"}],
    "parallel_calls": [
        {"role": "user", "content": "Weather in Paris and news?"},
        {"role": "assistant", "content": "", "tool_calls": [
            CALL, {"id": "f5g6h7i8j", "type": "function",
                   "function": {"name": "search", "arguments": {"query": "news", "limit": 3}}}]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "f5g6h7i8j", "name": "search", "content": "nothing new"}],
    # What escaping and number formatting must survive: quotes, backslashes,
    # markup characters, non-ASCII, nested arguments with floats, booleans and null.
    "awkward_text": [
        {"role": "system", "content": ""},
        {"role": "user", "content": "Say \"hi\" & <b>'bye'</b>\\ \u00e9\u6df1\U0001F600\ttab\n\nnext"},
        {"role": "assistant", "content": "", "reasoning_content": "weighing options",
         "tool_calls": [{"id": "k1l2m3n4o", "type": "function", "function": {"name": "search", "arguments": {
             "query": "a \"quoted\" query", "limit": 2, "ratio": 0.25, "big": 1e21, "tiny": 1.5e-7,
             "flags": [True, False, None], "nested": {"z": 1, "a": [1.0, -0.0]}}}}]},
        {"role": "tool", "tool_call_id": "k1l2m3n4o", "name": "search", "content": "[]"},
        {"role": "user", "content": "  trailing spaces  "}],
}
# Templates jinja2 itself cannot render from an OpenAI-shaped request, and why.
UNRENDERABLE = {
    "fireworks-ai-llama-3-firefunction-v2.jinja":
        "needs a `functions` variable (the tools as JSON text) that no chat request carries",
}
WITH_TOOLS = {"tools_offered", "tool_round_trip", "parallel_calls", "awkward_text"}
THINKING = {"default": {}, "thinking_on": {"enable_thinking": True, "thinking": True},
            "thinking_off": {"enable_thinking": False, "thinking": False}}


def contexts():
    for conversation, messages in CONVERSATIONS.items():
        for thinking, kwargs in THINKING.items():
            for generation_prompt in (True, False):
                context = {"messages": messages, "add_generation_prompt": generation_prompt,
                           "bos_token": "<s>", "eos_token": "</s>", **kwargs}
                if conversation in WITH_TOOLS:
                    context["tools"] = [WEATHER_TOOL, SEARCH_TOOL]
                yield f"{conversation}/{thinking}/{'gen' if generation_prompt else 'nogen'}", context


CASES = list(contexts())


def render_ours(dsinfer, tmp_path, template):
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([context for _, context in CASES]))
    return json.loads(dsinfer("template", "--chat-template", template, "--contexts", cases).stdout)


@pytest.mark.parametrize("template", TEMPLATES, ids=os.path.basename)
def test_renders_as_jinja2(dsinfer, tmp_path, template):
    source = open(template, encoding="utf-8").read()
    for attempt in range(2):  # strftime_now: render again if the date turned between the two renderings
        day = datetime.now().date()
        expected = [jinja_reference.render(source, context) for _, context in CASES]
        ours = render_ours(dsinfer, tmp_path, template)
        if datetime.now().date() == day:
            break
    mismatches = []
    for (name, _), want, got in zip(CASES, expected, ours):
        if isinstance(want, tuple):
            if "error" not in got:
                mismatches.append(f"{name}: jinja2 raised {want[1]!r}, dsinfer rendered {got['prompt'][:200]!r}")
        elif got.get("prompt") != want:
            mismatches.append(f"{name}: expected {want[:300]!r}\n   got {got}")
    assert not mismatches, f"{len(mismatches)} of {len(CASES)} renderings differ:\n" + "\n".join(mismatches[:5])


def test_python_renders_most_cases():
    """The conversations are ones the templates accept: a case list that every
    template refused would compare nothing but errors."""
    for template in TEMPLATES:
        if os.path.basename(template) in UNRENDERABLE:
            continue
        source = open(template, encoding="utf-8").read()
        rendered = [jinja_reference.render(source, context) for _, context in CASES]
        ok = sum(not isinstance(r, tuple) for r in rendered)
        assert ok >= len(CASES) // 3, f"{os.path.basename(template)}: jinja2 renders only {ok} of {len(CASES)}"

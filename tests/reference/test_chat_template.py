"""dsinfer's built-in chat formats (for files that carry no template) render
exactly what the models' own Jinja templates (../shared/fixtures/chat-templates)
render with transformers' settings, for plain conversations."""

import json
import os

import pytest

import jinja_reference
from conftest import FIXTURES

TEMPLATES = {
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("deepseek-r1", "<｜begin▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseek-r1", "<｜begin▁of▁sentence｜>"),
    "Qwen-Qwen2.5-7B-Instruct": ("chatml", ""),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3", "<|begin_of_text|>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    [{"role": "system", "content": "Be kind. "}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "<think>\nthe user greets\n</think>\n\nHello, how can I help?"},
     {"role": "user", "content": "  Tell me about 深度求索.\n"}],
]


def render_jinja(name, messages, bos, add_generation_prompt):
    source = open(os.path.join(FIXTURES, "chat-templates", name + ".jinja"), encoding="utf-8").read()
    # enable_thinking=True keeps the R1 templates' reasoning opener as the released models use it.
    return jinja_reference.render(source, dict(messages=messages, bos_token=bos, add_generation_prompt=add_generation_prompt,
                                               enable_thinking=True))


@pytest.mark.parametrize("template_name", sorted(TEMPLATES))
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_native_rendering_matches_jinja(dsinfer, tmp_path, template_name, conversation, add_generation_prompt):
    format_name, bos = TEMPLATES[template_name]
    messages = CONVERSATIONS[conversation]
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    args = ["template", "--chat-template", format_name, "--messages", path, "--bos", bos]
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    ours = dsinfer(*args).stdout.decode()
    assert ours == render_jinja(template_name, messages, bos, add_generation_prompt)

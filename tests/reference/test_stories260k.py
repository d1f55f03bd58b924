"""A real trained model: greedy generation must produce llama.cpp's tokens."""

import os

from conftest import FIXTURES
from llama_reference import llama_cpp_greedy

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")


def test_greedy_tokens_match_llama_cpp(dsinfer):
    n_predict = 64
    prompt_tokens, expected = llama_cpp_greedy(STORIES, "Once upon a time", n_predict)
    result = dsinfer("run", "-m", STORIES, "-p", "Once upon a time", "-n", n_predict, "--temp", 0,
                     "--show-token-ids")
    lines = [l for l in result.stderr.decode().splitlines() if l.startswith("token ids:")]
    assert len(lines) == 1, result.stderr.decode()
    ours = [int(t) for t in lines[0].split(":")[1].split()]
    assert ours[: len(prompt_tokens)] == prompt_tokens
    assert ours[len(prompt_tokens):] == expected
    assert result.stdout.decode().startswith("Once upon a time, there was a little girl")

"""/v1/completions with echo and logprobs (what lm-evaluation-harness sends for
loglikelihood: max_tokens 0) scores every prompt token as llama.cpp's own
teacher-forced logits do, on the same file, and agrees on each position's most
likely token. F32 stories260K: both engines compute in f32, so the
log-probabilities agree to the logits' 1e-3 (test_logits_vs_llama_cpp.py)."""

import json
import os
import sys
import urllib.request

import numpy as np
import openai

from conftest import FIXTURES
from llama_reference import llama_cpp_logits

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))
from server_process import ServerProcess  # noqa: E402

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_echo_scores_the_prompt_as_llama_cpp():
    server = ServerProcess("--ctx-size", "256", "--kv-cache-dtype", "f32")
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        request = urllib.request.Request(server.base + "/tokenize", method="POST", data=json.dumps(
            {"prompt": "Once upon a time, there was a little girl named Lily. She loved"}).encode())
        with urllib.request.urlopen(request, timeout=10) as r:
            tokens = json.loads(r.read())["tokens"]
        for max_tokens in (0, 3):
            reply = client.completions.create(model="stories260K", prompt=tokens, max_tokens=max_tokens, echo=True,
                                              logprobs=1, temperature=0)
            lp = reply.choices[0].logprobs
            assert lp.token_logprobs[0] is None and len(lp.token_logprobs) == len(tokens) + max_tokens
            assert reply.usage.completion_tokens == max_tokens
        reference = log_softmax(llama_cpp_logits(STORIES, tokens))
        ours = np.array(lp.token_logprobs[1:len(tokens)], dtype=np.float64)
        theirs = np.array([reference[i - 1, tokens[i]] for i in range(1, len(tokens))])
        error = np.abs(ours - theirs).max()
        print(f"echo logprobs: max abs difference {error:.2e} over {len(ours)} prompt tokens")
        assert error <= 1e-3
        # Top-1 agreement: with logprobs=1 our single alternative is the most
        # likely token; it is the prompt's own token exactly where llama.cpp's argmax is.
        for i in range(1, len(tokens)):
            best = max(lp.top_logprobs[i].values())
            assert abs(best - reference[i - 1].max()) <= 1e-3
            if reference[i - 1].argmax() == tokens[i]:
                assert abs(best - lp.token_logprobs[i]) <= 1e-6, i
            else:
                assert best > lp.token_logprobs[i], i
    finally:
        server.stop()

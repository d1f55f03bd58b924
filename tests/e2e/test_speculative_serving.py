"""`dsinfer serve --speculative-ngram N`: the replies are the ones plain decoding gives (greedy, seeded
sampling, streamed, with stop strings and logprobs), and /metrics counts the draft tokens verified and
accepted."""

import openai
import pytest

from server_process import ServerProcess

# Text that quotes itself, as the summarise/quote requests speculation is for.
PROMPT = ("Once upon a time there was a little girl named Lily. She loved to play in the park. " * 3 +
          "Once upon a time there was a little")
REQUESTS = [dict(max_tokens=48, temperature=0), dict(max_tokens=40, temperature=0.9, seed=7),
            dict(max_tokens=40, temperature=0, stop=["park"]), dict(max_tokens=16, temperature=0, logprobs=3)]


@pytest.fixture(scope="module")
def servers():
    plain, speculative = ServerProcess("--ctx-size", "512"), ServerProcess("--ctx-size", "512", "--speculative-ngram", "4")
    yield plain, speculative
    plain.stop()
    speculative.stop()


def complete(server, **fields):
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=60)
    reply = c.completions.create(model="stories260K", prompt=PROMPT, **fields).choices[0]
    return reply.text, reply.finish_reason, reply.logprobs and reply.logprobs.top_logprobs


@pytest.mark.parametrize("fields", REQUESTS, ids=["greedy", "seeded", "stop", "logprobs"])
def test_replies_equal_plain_decoding(servers, fields):
    plain, speculative = servers
    assert complete(speculative, **fields) == complete(plain, **fields)


def test_streamed_equals_whole(servers):
    speculative = servers[1]
    c = openai.OpenAI(base_url=speculative.base + "/v1", api_key="none", max_retries=0, timeout=60)
    streamed = "".join(chunk.choices[0].text for chunk in c.completions.create(
        model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0, stream=True) if chunk.choices)
    assert streamed == complete(speculative, max_tokens=48, temperature=0)[0]


def test_metrics_count_drafts(servers):
    plain, speculative = servers
    complete(speculative, max_tokens=48, temperature=0)
    drafted, accepted = speculative.metric("dsinfer:spec_draft_tokens"), speculative.metric("dsinfer:spec_accepted_tokens")
    assert drafted > 0 and 0 < accepted <= drafted
    assert plain.metric("dsinfer:spec_draft_tokens") == 0


def test_out_of_range_is_refused():
    with pytest.raises(RuntimeError, match="--speculative-ngram must be 0..16"):
        ServerProcess("--speculative-ngram", "17")

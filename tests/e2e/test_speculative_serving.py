"""`dsinfer serve --speculative-ngram N`, `--draft-model FILE` and `--speculative-mtp N`: the replies are
the ones plain decoding gives (greedy, seeded sampling, streamed, with stop strings and logprobs), and
/metrics counts the draft tokens verified and accepted; `dsinfer run --draft-model` prints plain
decoding's text; a draft model with another vocabulary is refused, and so is --speculative-mtp for a
model without a multi-token-prediction layer."""

import os
import subprocess
import sys

import openai
import pytest

from server_process import DSINFER, STORIES, ServerProcess

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from make_deepseek2 import write_deepseek2  # noqa: E402
from make_model import FIXTURES, write_model  # noqa: E402

# Text that quotes itself, as the summarise/quote requests speculation is for.
PROMPT = ("Once upon a time there was a little girl named Lily. She loved to play in the park. " * 3 +
          "Once upon a time there was a little")
REQUESTS = [dict(max_tokens=48, temperature=0), dict(max_tokens=40, temperature=0.9, seed=7),
            dict(max_tokens=40, temperature=0, stop=["park"]), dict(max_tokens=16, temperature=0, logprobs=3)]


@pytest.fixture(scope="module")
def servers():
    plain, speculative = ServerProcess("--ctx-size", "512"), ServerProcess("--ctx-size", "512", "--speculative-ngram", "4")
    # The model as its own draft: the draft model's whole path (its cache, catch-up, proposals) at no download.
    drafted = ServerProcess("--ctx-size", "512", "--draft-model", STORIES, "--draft-tokens", "4")
    yield plain, speculative, drafted
    for s in (plain, speculative, drafted):
        s.stop()


def complete(server, **fields):
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=60)
    reply = c.completions.create(model="stories260K", prompt=PROMPT, **fields).choices[0]
    return reply.text, reply.finish_reason, reply.logprobs and reply.logprobs.top_logprobs


@pytest.mark.parametrize("drafter", [1, 2], ids=["ngram", "draft_model"])
@pytest.mark.parametrize("fields", REQUESTS, ids=["greedy", "seeded", "stop", "logprobs"])
def test_replies_equal_plain_decoding(servers, fields, drafter):
    assert complete(servers[drafter], **fields) == complete(servers[0], **fields)


def test_streamed_equals_whole(servers):
    speculative = servers[1]
    c = openai.OpenAI(base_url=speculative.base + "/v1", api_key="none", max_retries=0, timeout=60)
    streamed = "".join(chunk.choices[0].text for chunk in c.completions.create(
        model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0, stream=True) if chunk.choices)
    assert streamed == complete(speculative, max_tokens=48, temperature=0)[0]


def test_metrics_count_drafts(servers):
    plain, speculative, drafted = servers
    for server in (speculative, drafted):
        complete(server, max_tokens=48, temperature=0)
        drafts = server.metric("dsinfer:spec_drafts")
        verified, accepted = server.metric("dsinfer:spec_draft_tokens"), server.metric("dsinfer:spec_accepted_tokens")
        assert verified > 0 and 0 < accepted <= verified
        # Each draft holds one to four tokens (both servers draft up to 4).
        assert 0 < drafts <= verified <= 4 * drafts
    assert plain.metric("dsinfer:spec_draft_tokens") == 0 and plain.metric("dsinfer:spec_drafts") == 0


def run(*args):
    return subprocess.run([DSINFER, "run", "-m", STORIES, "-p", PROMPT, "-n", "48", "--temp", "0", *args],
                          capture_output=True, text=True, timeout=120)


def test_run_with_a_draft_model_prints_plain_decodings_text():
    plain, drafted = run(), run("--draft-model", STORIES, "--draft-tokens", "5")
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout
    # Its own draft: every greedy draft token is kept (the forward is batch-invariant).
    line = next(l for l in drafted.stderr.splitlines() if l.startswith("speculative decoding (draft model)"))
    verified, accepted = [int(w) for w in line.split(":")[1].split() if w.isdigit()][:2]
    assert verified > 0 and accepted == verified, line


def test_a_draft_model_of_another_vocabulary_is_refused(tmp_path):
    other = write_model(str(tmp_path / "other_vocab.gguf"), n_embd=64, n_ff=128, n_layer=1,
                        vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-llama-spm.gguf"))
    result = run("--draft-model", other)
    assert result.returncode == 1 and "must share the vocabulary" in result.stderr, result.stderr
    with pytest.raises(RuntimeError, match="must share the vocabulary"):
        ServerProcess("--draft-model", other)
    both = run("--draft-model", STORIES, "--speculative-ngram", "4")
    assert both.returncode == 1 and "drafters: give one" in both.stderr


def test_multi_token_prediction_serves_plain_decodings_replies(tmp_path):
    """A DeepSeek-V3.2-shaped random model with its NextN layer, served plainly and drafting with the layer,
    8 requests at once: the same replies, greedy and seeded; /metrics counts the layer's drafts (its random
    weights draft what the model rarely takes: acceptance is not asserted here)."""
    from concurrent.futures import ThreadPoolExecutor
    path = write_deepseek2(str(tmp_path / "v32_nextn.gguf"), shape="v3", layout="split", seed=3, n_ctx=1024,
                           indexer=(16, 64, 64), nextn=True)
    plain, mtp = ServerProcess("--ctx-size", "512", model=path), ServerProcess("--ctx-size", "512", "--speculative-mtp", "3",
                                                                            "--draft-p-min", "0", model=path)
    try:
        def replies(server):
            c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=60)
            ask = lambda i: c.completions.create(model="v32_nextn", prompt=PROMPT[: 40 + 7 * i], max_tokens=32, seed=i,
                                                 temperature=0 if i % 2 else 0.8).choices[0].text
            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(ask, range(8)))
        assert replies(mtp) == replies(plain)
        verified, accepted = mtp.metric("dsinfer:spec_draft_tokens"), mtp.metric("dsinfer:spec_accepted_tokens")
        assert verified > 0 and 0 <= accepted <= verified
    finally:
        plain.stop()
        mtp.stop()
    with pytest.raises(RuntimeError, match="multi-token prediction: the model has no such layer"):
        ServerProcess("--speculative-mtp", "2")


def test_out_of_range_is_refused():
    with pytest.raises(RuntimeError, match="--speculative-ngram must be 0..16"):
        ServerProcess("--speculative-ngram", "17")

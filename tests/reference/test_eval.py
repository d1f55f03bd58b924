"""`dsinfer eval`: its perplexity against one computed here from llama.cpp's logits on the same tokens,
and its KL divergence and top-1 agreement against the same figures computed here from the logits
`dsinfer logits` gives for the model and the reference (the chunking, the scored half, the percentile)."""

import json
import os

import numpy as np

from conftest import FIXTURES, ROOT
from llama_reference import llama_cpp_logits
from make_model import quantize_with_llama_cpp, write_model

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")
ENGLISH = os.path.join(ROOT, "tests", "data", "eval", "english.txt")
CHUNK = 128


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def chunks(dsinfer):
    """The chunks eval makes: BOS, then CHUNK - 1 tokens of the text, the remainder dropped."""
    text = open(ENGLISH, encoding="utf-8").read()
    ids = [int(t) for t in dsinfer("tokenize", "-m", STORIES, "--no-bos", text).stdout.decode().split()]
    per = CHUNK - 1
    return [[1] + ids[c * per:(c + 1) * per] for c in range(len(ids) // per)]


def scored(logits, tokens):
    """log-probabilities at the second half's positions, and the tokens they predict."""
    first = len(tokens) // 2
    return log_softmax(logits[first:len(tokens) - 1]), np.array(tokens[first + 1:])


def dsinfer_logits(dsinfer, tmp_path, model, tokens):
    out = tmp_path / "logits.npy"
    dsinfer("logits", "-m", model, "--tokens", ",".join(map(str, tokens)), "--out", out)
    return np.load(out)


def eval_json(dsinfer, *args):
    return json.loads(dsinfer("eval", "-m", *args, "--text", ENGLISH, "--ctx-size", CHUNK, "--json").stdout)


def test_perplexity_matches_llama_cpp(dsinfer):
    ours = eval_json(dsinfer, STORIES, "--kv-cache-dtype", "f32")
    nll, bound = [], 0.0
    for tokens in chunks(dsinfer):
        reference = llama_cpp_logits(STORIES, tokens, kv="f32")
        logp, targets = scored(reference, tokens)
        nll.extend(-logp[np.arange(len(targets)), targets])
        # F32 logits agree with llama.cpp's within 1e-3 of their largest magnitude (test_logits_vs_llama_cpp);
        # a shift of every logit by at most d moves each log-probability, so log-perplexity, by at most 2d.
        bound = max(bound, 2 * 1e-3 * float(np.abs(reference).max()))
    assert ours["tokens"] == len(nll) > 100
    assert abs(np.log(ours["perplexity"]) - np.mean(nll)) <= bound
    assert ours["kl_mean"] is None and ours["top1_agreement"] is None


def test_kl_and_top1_against_a_reference(dsinfer, tmp_path):
    quantized = str(tmp_path / "stories_q4_0.gguf")
    quantize_with_llama_cpp(STORIES, quantized, "LLAMA_FTYPE_MOSTLY_Q4_0")
    ours = eval_json(dsinfer, quantized, "--ref", STORIES)
    kl, same, nll = [], [], []
    for tokens in chunks(dsinfer):
        p, targets = scored(dsinfer_logits(dsinfer, tmp_path, STORIES, tokens), tokens)
        q, _ = scored(dsinfer_logits(dsinfer, tmp_path, quantized, tokens), tokens)
        kl.extend((np.exp(p) * (p - q)).sum(axis=-1))
        same.extend(p.argmax(axis=-1) == q.argmax(axis=-1))
        nll.extend(-q[np.arange(len(targets)), targets])
    kl = np.maximum(np.array(kl), 0.0)
    assert ours["tokens"] == len(kl)
    # The same float logits on both sides, reduced in double in a different order: ~1e-15 apart.
    assert abs(ours["kl_mean"] - float(np.mean(kl))) <= 1e-9
    assert abs(ours["kl_p99"] - float(np.sort(kl)[int(np.ceil(0.99 * len(kl))) - 1])) <= 1e-9
    assert abs(ours["kl_max"] - float(kl.max())) <= 1e-9
    assert round(ours["top1_agreement"] * len(kl)) == int(np.sum(same))
    assert abs(np.log(ours["perplexity"]) - np.mean(nll)) <= 1e-9
    assert ours["kl_mean"] > 0 and ours["top1_agreement"] < 1  # the Q4_0 copy is not the original


def test_a_model_against_itself_agrees_exactly(dsinfer):
    ours = eval_json(dsinfer, STORIES, "--ref", STORIES)
    assert ours["kl_max"] == 0 and ours["top1_agreement"] == 1
    assert ours["perplexity"] == ours["ref_perplexity"]


def test_jsonl_text_and_bad_lines(dsinfer, tmp_path):
    good = tmp_path / "set.jsonl"
    good.write_text(json.dumps({"text": "Once upon a time, there was a cat."}) + "\n\n" + json.dumps("The cat sat.") + "\n")
    assert json.loads(dsinfer("eval", "-m", STORIES, "--text", good, "--json").stdout)["tokens"] > 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    result = dsinfer("eval", "-m", STORIES, "--text", bad, check=False)
    assert result.returncode == 1 and b"line 2" in result.stderr


def test_reference_with_another_vocabulary_is_refused(dsinfer, tmp_path):
    other = write_model(str(tmp_path / "other.gguf"), n_layer=1, vocab_path=os.path.join(FIXTURES, "vocab", "ggml-vocab-gpt-2.gguf"))
    result = dsinfer("eval", "-m", STORIES, "--ref", other, "--text", ENGLISH, check=False)
    assert result.returncode == 1
    assert b"not the same vocabulary" in result.stderr

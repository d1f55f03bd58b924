"""`dsinfer bench` on one sequence as llama-bench runs it: lists of -p/-n/-d, every test at every
depth, text, markdown and JSON output, and each generation test's share of the bandwidth limit,
with the bytes a token reads computed here from the file itself; with --concurrency and a drafter, the drafts
and the speedup over plain decoding."""

import json
import os
import re

import numpy as np
import pytest

from make_model import FIXTURES, write_model
from fast_gguf_reader import FastGGUFReader

N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_LAYER = 64, 128, 4, 2, 2


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_model(str(tmp_path_factory.mktemp("bench") / "llama.gguf"), n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD,
                       n_head_kv=N_HEAD_KV, n_layer=N_LAYER, n_ctx=256)


def expected_read_bytes(path, context):
    """Every matrix once, of the embedding one row; the f16 cache's keys and values up to `context`."""
    weights = 0
    for t in FastGGUFReader(path).tensors:
        if len(t.shape) != 2:
            continue  # norms: vectors the engine reads too, but not counted as matrices
        n_bytes = int(t.n_bytes)
        weights += n_bytes // int(t.shape[1]) if t.name == "token_embd.weight" else n_bytes
    head_dim = N_EMBD // N_HEAD
    cache = N_LAYER * 2 * N_HEAD_KV * head_dim * 2
    return weights + cache * context


def test_json_has_every_test_at_every_depth_with_its_bandwidth_share(dsinfer, model):
    out = dsinfer("bench", "-m", model, "-p", "8,16", "-n", "4", "-d", "0,32", "-r", "2", "-t", "1", "-o", "json",
                  "--bandwidth", "10").stdout
    tests = json.loads(out)
    assert [t["test"] for t in tests] == ["pp8", "pp16", "tg4", "pp8 @ d32", "pp16 @ d32", "tg4 @ d32"]
    for t in tests:
        assert t["model_type"] == "llama" and t["n_threads"] == 1 and len(t["samples_ts"]) == 2
        assert all(s > 0 for s in t["samples_ts"])
        assert t["avg_ts"] == pytest.approx(np.mean(t["samples_ts"]), rel=1e-9)
        assert t["stddev_ts"] == pytest.approx(np.std(t["samples_ts"]), rel=1e-6, abs=1e-9)
        if t["n_gen"] == 0:
            assert "bandwidth_share" not in t  # prompt processing is compute-bound: no bandwidth limit
            continue
        # Step i of a test at depth d attends to d + i + 1 positions: the mean context is d + (n + 1) / 2.
        want = expected_read_bytes(model, t["n_depth"] + (t["n_gen"] + 1) / 2)
        assert t["read_bytes_per_token"] == pytest.approx(want, rel=1e-12)
        assert t["bandwidth_limit_ts"] == pytest.approx(10e9 / want, rel=1e-12)
        assert t["bandwidth_share"] == pytest.approx(t["avg_ts"] / t["bandwidth_limit_ts"], rel=1e-12)


def test_text_and_markdown_name_the_same_tests(dsinfer, model):
    common = ["bench", "-m", model, "-p", "8", "-n", "2", "-d", "0,16", "-r", "1", "-t", "1", "--bandwidth", "10"]
    text = dsinfer(*common).stdout.decode()
    assert re.search(r"^pp8: [0-9.]+ ± [0-9.]+ tokens/s$", text, re.M), text
    assert re.search(r"^pp8 @ d16: [0-9.]+ ± [0-9.]+ tokens/s$", text, re.M), text
    assert re.search(r"^tg2 @ d16: [0-9.]+ ± [0-9.]+ tokens/s, [0-9]+% of the [0-9.]+ tokens/s that 10.0 GB/s allows", text,
                     re.M), text
    rows = [line for line in dsinfer(*common, "-o", "md").stdout.decode().splitlines() if line.startswith("| llama")]
    assert [row.split("|")[6].strip() for row in rows] == ["pp8", "tg2", "pp8 @ d16", "tg2 @ d16"]
    assert all(row.split("|")[9].strip().endswith("%") for row in rows if "tg" in row)


def test_membw_alone_measures_the_machine(dsinfer):
    out = dsinfer("bench", "--membw", "-t", "1").stdout.decode()
    gbps = float(re.search(r"memory read bandwidth: ([0-9.]+) GB/s \(1 threads", out).group(1))
    assert gbps > 0


@pytest.mark.parametrize("args, message", [
    (["-p", "8,x"], b"-p takes comma-separated token counts"),
    (["-d", "-1"], b"-d takes comma-separated token counts"),
    (["-n", "4,"], b"-n takes comma-separated token counts"),
    (["-o", "xml"], b"-o must be text, md or json, not 'xml'"),
    (["--bandwidth", "0"], b"--bandwidth takes the read bandwidth in GB/s"),
    (["--bandwidth", "10", "--membw"], b"in place of measuring it with --membw"),
    (["--concurrency", "2", "-d", "8"], b"-d does not apply to --concurrency"),
    (["--concurrency", "2", "-n", "8"], b"-n does not apply to --concurrency"),
    (["--prompt-len", "8"], b"--prompt-len does not apply to one sequence"),
    (["-c", "4096"], b"-c does not apply to one sequence (no --concurrency), whose cache holds the longest test"),
])
def test_options_that_do_not_apply_are_refused(dsinfer, model, args, message):
    result = dsinfer("bench", "-m", model, *args, check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_membw_alone_refuses_what_only_a_model_run_reads(dsinfer):
    result = dsinfer("bench", "--membw", "-o", "json", check=False)
    assert result.returncode == 1 and b"-o does not apply to --membw without a model" in result.stderr, result.stderr


def test_concurrency_with_a_drafter_reports_the_drafts_and_the_plain_runs_speedup(dsinfer, tmp_path):
    """Prompt lookup on prompts that quote themselves (stories260K, a trained model, repeats its story): the drafts
    verified, each of one to four tokens, the tokens a drafted step emitted, and the same requests served plainly,
    whose greedy outputs must be the speculative run's."""
    prompts = tmp_path / "prompts.jsonl"
    story = "Once upon a time there was a little girl named Lily. She loved to play in the park. "
    prompts.write_text("".join(json.dumps({"prompt": story * k, "max_tokens": 48}) + "\n" for k in (2, 3, 4)))
    out = dsinfer("bench", "-m", os.path.join(FIXTURES, "models", "stories260K.gguf"), "--concurrency", "2", "--prompts",
                  prompts, "--speculative-ngram", "4").stdout.decode()
    found = re.search(r"speculative decoding \(prompt lookup, up to 4 drafts\): (\d+) draft tokens verified in (\d+) drafts, "
                      r"(\d+) accepted \([0-9.]+%\), ([0-9.]+) tokens per drafted step", out)
    assert found, out
    verified, drafts, accepted, per_step = int(found[1]), int(found[2]), int(found[3]), float(found[4])
    assert 0 < drafts <= verified <= 4 * drafts and 0 < accepted <= verified
    assert per_step == pytest.approx(1 + accepted / drafts, abs=0.005)
    plain = re.search(r"plain decoding of the same requests: output tokens/s ([0-9.]+), .*speedup ([0-9.]+)x "
                      r"\(output tokens/s\); greedy outputs identical: (\w+)", out)
    assert plain and float(plain[1]) > 0 and float(plain[2]) > 0 and plain[3] == "yes", out

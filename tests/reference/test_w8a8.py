"""W8A8 end to end on the real stories260K model: `dsinfer quantize --type W8A8`, with and without calibration,
loads and runs, records its calibration table, and stays within the seeds' KL bar of the original."""

import json
import os

import gguf
import numpy as np
import pytest

from conftest import FIXTURES, ROOT
from fast_gguf_reader import FastGGUFReader

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")
CALIB = os.path.join(ROOT, "tests", "data", "calibration", "mixed.jsonl")
EVAL_SETS = [os.path.join(ROOT, "tests", "data", "eval", name) for name in ("english.txt", "rare_unicode.txt")]
KL_BAR = 0.015  # the seeds' bar: mean KL divergence against the original


def kl_mean(dsinfer, model, text):
    return json.loads(dsinfer("eval", "-m", model, "--ref", STORIES, "--text", text, "--json").stdout)["kl_mean"]


@pytest.mark.parametrize("target, calibration", [("W8A8", []), ("W8A8", ["--calib", CALIB]),
                                                 ("W8A8", ["--calib", CALIB, "--smooth", "0"]), ("W8A8_ASYM", [])],
                         ids=["per-token", "smoothquant", "calibrated-no-smoothing", "asymmetric"])
def test_w8a8_stays_within_the_kl_bar(dsinfer, tmp_path, target, calibration):
    out = str(tmp_path / "w8a8.gguf")
    dsinfer("quantize", "-m", STORIES, "-o", out, "--type", target, *calibration)
    types = {t.name: t.tensor_type for t in FastGGUFReader(out).tensors}
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.I8
    assert types["blk.0.ffn_down.weight_scale"] == gguf.GGMLQuantizationType.F32
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F32  # attention stays in the source's precision
    assert ("blk.0.ffn_down.weight_zero_point" in types) == (target == "W8A8_ASYM")
    for text in EVAL_SETS:
        assert kl_mean(dsinfer, out, text) < KL_BAR, text


def test_calibration_table_is_in_the_file_and_dumped(dsinfer, tmp_path):
    out, dump = str(tmp_path / "w8a8.gguf"), tmp_path / "calibration.tsv"
    dsinfer("quantize", "-m", STORIES, "-o", out, "--type", "W8A8", "--calib", CALIB, "--activation-scales", "minmax",
            "--dump-calibration", dump)
    rows = [line.split("\t") for line in dump.read_text().splitlines()[1:]]
    assert len(rows) == 15  # gate, up and down of 5 layers
    fields = FastGGUFReader(out).fields
    names = fields["dsinfer.calibration.tensors"].contents()
    assert sorted(names) == sorted(r[0] for r in rows)
    absmax, clip = fields["dsinfer.calibration.input_absmax"].contents(), fields["dsinfer.calibration.input_clip"].contents()
    assert all(c == a > 0 for a, c in zip(absmax, clip))  # min-max clips at the largest |x| seen
    assert fields["dsinfer.calibration.activation_scales"].contents() == "minmax"
    tensors = {t.name: t for t in FastGGUFReader(out).tensors}
    for name, c in zip(names, clip):
        assert abs(float(tensors[name + "_input_scale"].data[0]) - c / 127) <= 1e-7 * c
    for text in EVAL_SETS:  # static scales run, if less well than per-token ones on this model
        assert kl_mean(dsinfer, out, text) < 10 * KL_BAR


@pytest.mark.parametrize("args, message", [
    (["--smooth", "0.5"], b"--smooth needs --calib FILE"),
    (["--calib", CALIB, "--activation-scales", "max"], b"--activation-scales must be per-token, minmax, percentile or kl"),
    (["--calib", CALIB, "--smooth", "1.5"], b"--smooth must be in [0, 1)"),
    (["--calib", "/nonexistent.txt"], b"cannot read /nonexistent.txt"),
])
def test_calibration_options_are_checked(dsinfer, tmp_path, args, message):
    result = dsinfer("quantize", "-m", STORIES, "-o", tmp_path / "x.gguf", "--type", "W8A8", *args, check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_w8a8_refused_where_it_cannot_serve(dsinfer, tmp_path):
    policy = tmp_path / "policy.txt"
    policy.write_text("token_embd.weight W8A8\n")
    out = str(tmp_path / "bad.gguf")
    dsinfer("quantize", "-m", STORIES, "-o", out, "--type", "W8A8", "--policy", policy)
    result = dsinfer("run", "-m", out, "-p", "hi", "-n", "1", check=False)
    assert result.returncode == 1 and b"looked up by row" in result.stderr


def rewrite(src, dst, change):
    """A copy of a GGUF file whose tensors pass through change(name, array) -> array, or None to drop one."""
    from make_model import copy_fields
    reader = FastGGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    copy_fields(reader, writer, lambda key: key != "general.architecture")
    for t in reader.tensors:
        data = change(t.name, np.asarray(t.data))
        if data is not None:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


SCALE = "blk.1.ffn_up.weight_scale"
INPUT_SCALE = "blk.1.ffn_up.weight_input_scale"
ZERO_POINT = "blk.1.ffn_up.weight_zero_point"


@pytest.mark.parametrize("change, message", [
    (lambda n, a: None if n == SCALE else a, b"its row scales 'blk.1.ffn_up.weight_scale' are missing"),
    (lambda n, a: a[:-1] if n == SCALE else a, b"must be F32 with one scale per row"),
    (lambda n, a: a.astype(np.float16) if n == SCALE else a, b"must be F32 with one scale per row"),
    (lambda n, a: np.array([-1.0], np.float32) if n == INPUT_SCALE else a, b"must be one positive finite F32 value"),
    (lambda n, a: np.array([np.nan], np.float32) if n == INPUT_SCALE else a, b"must be one positive finite F32 value"),
    (lambda n, a: np.array([0.1, 0.1], np.float32) if n == INPUT_SCALE else a, b"must be one positive finite F32 value"),
    (lambda n, a: a.astype(np.float32) if n == ZERO_POINT else a, b"must be I32 with one zero point per row"),
    (lambda n, a: a[:-1] if n == ZERO_POINT else a, b"must be I32 with one zero point per row"),
    (lambda n, a: np.full_like(a, 300) if n == ZERO_POINT else a, b"holds a zero point outside [-127, 127]"),
], ids=["scale-missing", "scale-short", "scale-f16", "input-scale-negative", "input-scale-nan", "input-scale-two",
        "zero-point-f32", "zero-point-short", "zero-point-range"])
def test_crafted_w8a8_tensors_are_refused(dsinfer, tmp_path, change, message):
    good = str(tmp_path / "good.gguf")
    dsinfer("quantize", "-m", STORIES, "-o", good, "--type", "W8A8_ASYM", "--calib", CALIB, "--activation-scales", "minmax")
    bad = rewrite(good, str(tmp_path / "bad.gguf"), change)
    result = dsinfer("run", "-m", bad, "-p", "hi", "-n", "1", check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr

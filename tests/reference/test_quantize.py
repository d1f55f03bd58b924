"""`dsinfer quantize` against llama.cpp: the files it writes in llama.cpp's types load in llama.cpp and give
dsinfer's logits there; where both quantizers use ggml's reference rounding (the 32-blocks) the bytes are
llama.cpp's own; the K types fit the weights as closely as llama.cpp's quantizer does."""

import os

import gguf
import numpy as np
import pytest

from llama_reference import llama_cpp_logits
from make_model import quantize_with_llama_cpp, write_model
from fast_gguf_reader import FastGGUFReader

TOKENS = [1] + [int(t) for t in np.random.default_rng(1).integers(3, 512, 47)]
# The tolerance of test_logits_vs_llama_cpp for 4- to 8-bit weights, argued there.
QUANT_TOLERANCE = 5e-2
LLAMA_FTYPE = {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q4_K_S": "Q4_K_S",
               "Q5_K_S": "Q5_K_S", "Q6_K": "Q6_K", "Q4_K_M": "Q4_K_M", "Q5_K_M": "Q5_K_M"}


@pytest.fixture(scope="module")
def f16_model(tmp_path_factory):
    return write_model(str(tmp_path_factory.mktemp("quantize") / "f16.gguf"), dtype="f16", seed=3)


def quantize(dsinfer, src, out, target, *extra):
    dsinfer("quantize", "-m", src, "-o", out, "--type", target, *extra)
    return out


def tensors(path):
    return {t.name: t for t in FastGGUFReader(path).tensors}


@pytest.mark.parametrize("target", sorted(LLAMA_FTYPE))
def test_llama_cpp_loads_it_and_agrees(dsinfer, f16_model, tmp_path, target):
    out = quantize(dsinfer, f16_model, str(tmp_path / f"{target}.gguf"), target)
    dsinfer("logits", "-m", out, "--tokens", ",".join(map(str, TOKENS)), "--out", tmp_path / "ours.npy", "--kv-cache-dtype", "f32")
    ours = np.load(tmp_path / "ours.npy")
    ref = llama_cpp_logits(out, TOKENS, kv="f32")
    assert float(np.abs(ours - ref).max() / np.abs(ref).max()) < QUANT_TOLERANCE


@pytest.mark.parametrize("target", sorted(LLAMA_FTYPE))
def test_same_types_as_llama_cpp_and_as_close_to_the_weights(dsinfer, f16_model, tmp_path, target):
    ours = tensors(quantize(dsinfer, f16_model, str(tmp_path / "ours.gguf"), target))
    theirs_path = str(tmp_path / "theirs.gguf")
    quantize_with_llama_cpp(f16_model, theirs_path, "LLAMA_FTYPE_MOSTLY_" + LLAMA_FTYPE[target])
    theirs = tensors(theirs_path)
    source = tensors(f16_model)
    assert set(ours) == set(theirs)
    for name, t in ours.items():
        assert t.tensor_type == theirs[name].tensor_type, f"{name}: {t.tensor_type.name} vs llama.cpp's {theirs[name].tensor_type.name}"
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            continue
        if t.tensor_type in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1,
                             gguf.GGMLQuantizationType.Q5_0, gguf.GGMLQuantizationType.Q5_1):
            # Both round with ggml's reference quantizer (no importance matrix): the same bytes.
            assert np.array_equal(np.asarray(t.data), np.asarray(theirs[name].data)), name
            continue
        # The K types: our least-squares fit against llama.cpp's weighted search. A quality bar, not a
        # rounding bound: the RMS error of the dequantized weights within 5% of llama.cpp's.
        w = gguf.quants.dequantize(source[name].data, source[name].tensor_type)
        ours_err = np.sqrt(np.mean((gguf.quants.dequantize(t.data, t.tensor_type) - w) ** 2))
        theirs_err = np.sqrt(np.mean((gguf.quants.dequantize(theirs[name].data, theirs[name].tensor_type) - w) ** 2))
        assert ours_err <= 1.05 * theirs_err, f"{name} {t.tensor_type.name}: rms {ours_err:.3e} vs llama.cpp {theirs_err:.3e}"


def test_metadata_is_copied_and_the_target_recorded(dsinfer, f16_model, tmp_path):
    out = quantize(dsinfer, f16_model, str(tmp_path / "q.gguf"), "Q4_K_M")
    source, written = FastGGUFReader(f16_model).fields, FastGGUFReader(out).fields
    for key, field in source.items():
        if key.startswith("GGUF.") or key == "general.file_type":
            continue
        assert key in written, key
        assert written[key].contents() == field.contents(), key
    assert written["general.file_type"].contents() == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert written["dsinfer.quantize.target"].contents() == "Q4_K_M"
    info = dsinfer("info", "-m", out).stdout.decode()
    assert "blk.*.ffn_down.weight" in info and "Q6_K x1" in info and "quantized by dsinfer to Q4_K_M" in info


def test_a_policy_file_goes_ahead_of_the_defaults(dsinfer, f16_model, tmp_path):
    policy = tmp_path / "policy.txt"
    policy.write_text("# keep the first block exact\nblk.0.* F16\n*ffn_up* Q8_0\n")
    shown = dsinfer("quantize", "-m", f16_model, "--type", "Q4_0", "--policy", policy, "--show-policy").stdout.decode()
    assert shown.splitlines()[:2] == ["blk.0.* F16", "*ffn_up* Q8_0"]
    out = tensors(quantize(dsinfer, f16_model, str(tmp_path / "p.gguf"), "Q4_0", "--policy", policy))
    assert out["blk.0.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert out["blk.1.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert out["blk.1.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q4_0
    assert out["blk.1.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32  # vectors stay F32


@pytest.mark.parametrize("policy, message", [("blk.* Q3_K\n", b"line 1: unknown type 'Q3_K'"),
                                              ("blk.*\n", b"line 1: expected 'PATTERN TYPE'")])
def test_bad_policy_lines_are_named(dsinfer, f16_model, tmp_path, policy, message):
    path = tmp_path / "bad.txt"
    path.write_text(policy)
    result = dsinfer("quantize", "-m", f16_model, "-o", tmp_path / "x.gguf", "--type", "Q8_0", "--policy", path, check=False)
    assert result.returncode == 1 and message in result.stderr


def test_refusals(dsinfer, f16_model, tmp_path):
    q = quantize(dsinfer, f16_model, str(tmp_path / "q8.gguf"), "Q8_0")
    again = dsinfer("quantize", "-m", q, "-o", tmp_path / "q4.gguf", "--type", "Q4_0", check=False)
    assert again.returncode == 1 and b"already Q8_0" in again.stderr
    unknown = dsinfer("quantize", "-m", f16_model, "-o", tmp_path / "x.gguf", "--type", "Q3_K_L", check=False)
    assert unknown.returncode == 1 and b"unknown quantization type 'Q3_K_L'" in unknown.stderr
    assert not os.path.exists(tmp_path / "x.gguf") and not os.path.exists(tmp_path / "q4.gguf.partial")


def test_mxfp4_experts_are_llama_cpps_bytes(dsinfer, tmp_path):
    """MXFP4_MOE (how V4-Flash's GGUF is quantized): the routed experts to MXFP4
    with llama.cpp's rounding, every other matrix to Q8_0, the router and the
    1-D tensors kept; the types and the bytes of every tensor are llama.cpp's
    quantizer's own, and llama.cpp and dsinfer agree on the result (within the
    Q8_0 bound of test_logits_vs_llama_cpp, over the 48 positions it argues)."""
    from make_deepseek4 import write_deepseek4
    src = write_deepseek4(str(tmp_path / "f32.gguf"), dtype="f32", seed=5, indexer_heads=16, clamp=10.0)
    ours = tensors(quantize(dsinfer, src, str(tmp_path / "ours.gguf"), "MXFP4_MOE"))
    theirs_path = str(tmp_path / "theirs.gguf")
    quantize_with_llama_cpp(src, theirs_path, "LLAMA_FTYPE_MOSTLY_MXFP4_MOE")
    theirs = tensors(theirs_path)
    assert set(ours) == set(theirs)
    assert any(t.tensor_type == gguf.GGMLQuantizationType.MXFP4 for t in ours.values())
    for name, t in ours.items():
        assert t.tensor_type == theirs[name].tensor_type, f"{name}: {t.tensor_type.name} vs llama.cpp's {theirs[name].tensor_type.name}"
        assert np.array_equal(np.asarray(t.data), np.asarray(theirs[name].data)), name
    out = str(tmp_path / "ours.gguf")
    dsinfer("logits", "-m", out, "--tokens", ",".join(map(str, TOKENS)), "--out", tmp_path / "ours.npy", "--kv-cache-dtype", "f32")
    ref = llama_cpp_logits(out, TOKENS, kv="f32")
    assert float(np.abs(np.load(tmp_path / "ours.npy") - ref).max() / np.abs(ref).max()) < QUANT_TOLERANCE

"""The inspection commands: layer dumps, info, tokenize, and their errors."""

import os

import numpy as np

from conftest import FIXTURES

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")


def test_dump_layers_writes_each_layer_output(dsinfer, tmp_path):
    tokens = "1,403,407,261,378"
    dsinfer("logits", "-m", STORIES, "--tokens", tokens, "--out", tmp_path / "logits.npy", "--dump-layers", tmp_path / "layers")
    logits = np.load(tmp_path / "logits.npy")
    assert logits.shape == (5, 512)
    layers = sorted(os.listdir(tmp_path / "layers"))
    assert layers == [f"layer_{i:03d}.npy" for i in range(5)]
    outputs = [np.load(tmp_path / "layers" / name) for name in layers]
    assert all(o.shape == (5, 64) for o in outputs)
    assert not np.allclose(outputs[0], outputs[-1])  # each file holds its own layer


def test_info_reports_architecture_and_memory(dsinfer):
    out = dsinfer("info", "-m", STORIES).stdout.decode()
    assert "architecture: llama" in out
    assert "layers 5, embedding 64, ffn 172, heads 8 (kv 4)" in out
    assert "kv cache per 1K tokens: 0.62 MiB (f16)" in out  # 5 layers x 2 x 32 dims x 2 bytes x 1024


def test_tokenize_prints_ids_and_pieces(dsinfer):
    out = dsinfer("tokenize", "-m", STORIES, "--pieces", "Once upon").stdout.decode().splitlines()
    assert out[0].startswith("1\t")  # BOS
    assert len(out) >= 3


def test_bad_model_file_is_a_clear_error(dsinfer, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    result = dsinfer("run", "-m", bad, "-p", "hi", check=False)
    assert result.returncode == 1
    assert "gguf:" in result.stderr.decode() and str(bad) in result.stderr.decode()
    missing = dsinfer("info", "-m", tmp_path / "none.gguf", check=False)
    assert missing.returncode == 1 and "cannot open" in missing.stderr.decode()


def test_unknown_chat_template_says_how_to_choose(dsinfer):
    result = dsinfer("run", "-m", STORIES, "-p", "hi", "--chat", check=False)
    assert result.returncode == 1
    assert "--chat-template" in result.stderr.decode()

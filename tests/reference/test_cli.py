"""The inspection commands: layer dumps, info, tokenize, and their errors."""

import os
import re

import numpy as np
import pytest

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


def test_a_megabyte_of_text_splits_in_linear_time(tmp_path):
    """A 128K-token prompt is half a megabyte of text. The pre-tokenizer's
    regex matches once per word, and PCRE2 checked the UTF-8 from each match
    to the end of the text, so its time grew with the square of the length:
    2 MB of words took minutes (16,000 words 4.4 s, 4,000 0.37 s). It now
    checks a piece once. The timeout guards against that hang only: the
    split takes about a second."""
    import json
    import subprocess
    from conftest import ROOT
    text = tmp_path / "long.jsonl"
    text.write_text(json.dumps(" ".join(["hello world"] * 180000)) + "\n")
    vocab = os.path.join(FIXTURES, "vocab", "ggml-vocab-deepseek-llm.gguf")
    binary = os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer"))
    out = subprocess.run([binary, "tokenize", "-m", vocab, "--jsonl", str(text)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert json.loads(out)["ids"][:5] == [100000, 31539, 1843, 39280, 1843]  # BOS, "hello", " world", " hello", " world"
    assert len(json.loads(out)["ids"]) == 2 * 180000 + 1


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


def write_metadata_only(path, arch, uints, floats=None, strings=None, bools=None, arrays=None):
    """A GGUF of ARCH's keys (named without the "ARCH." prefix) and no tensors: a real config's shapes for
    `dsinfer info`, without its weights."""
    import gguf
    writer = gguf.GGUFWriter(path, arch)
    p = arch + "."
    for add, values in ((writer.add_uint32, uints), (writer.add_float32, floats), (writer.add_string, strings),
                        (writer.add_bool, bools), (writer.add_array, arrays)):
        for key, value in (values or {}).items():
            add(p + key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def test_info_reports_deepseek_v32s_kv_memory_from_its_real_config(dsinfer, tmp_path):
    """DeepSeek-V3.2's published shapes (../shared/DEEPSEEK-V32-V4.md section 5)
    in a file of metadata alone: 61 layers run (block_count 62 counts the
    multi-token-prediction layer), each caching a latent row of 512 + 64 and an
    indexer key of 128 per token: 61 x (576 + 128) x 2 bytes = 85,888 bytes per
    token in f16, the notes' 85.9 KB; 62 x that row when the multi-token-prediction
    layer drafts, its rows in the same pages."""
    path = str(tmp_path / "v32_config.gguf")
    write_metadata_only(path, "deepseek32", uints={"context_length": 163840, "embedding_length": 7168, "block_count": 62, "feed_forward_length": 18432,
                       "attention.head_count": 128, "attention.head_count_kv": 1, "attention.q_lora_rank": 1536,
                       "attention.kv_lora_rank": 512, "attention.key_length": 576, "attention.value_length": 512,
                       "attention.key_length_mla": 192, "attention.value_length_mla": 128, "rope.dimension_count": 64,
                       "expert_count": 256, "expert_used_count": 8, "expert_shared_count": 1,
                       "expert_feed_forward_length": 2048, "leading_dense_block_count": 3, "expert_gating_func": 2,
                       "expert_group_count": 8, "expert_group_used_count": 4, "nextn_predict_layers": 1,
                       "attention.indexer.head_count": 64, "attention.indexer.key_length": 128,
                       "attention.indexer.top_k": 2048}, floats={"attention.layer_norm_rms_epsilon": 1e-6})
    out = dsinfer("info", "-m", path).stdout.decode()
    assert "kv bytes per token (f16) 85888," in out, out
    assert "an indexer of 64 heads of 128 picks 2048 positions per query" in out
    assert "multi-token prediction: 1 layer after the 61, drafting with --speculative-mtp N; its rows in the same pages " \
           "make them 87296 bytes per token (f16)" in out, out


def test_info_reports_deepseek_v4_flashs_kv_memory_from_its_real_config(dsinfer, tmp_path):
    """DeepSeek-V4-Flash's published shapes (../shared/DEEPSEEK-V32-V4.md
    sections 3 and 5) in a file of metadata alone: 43 layers, two window-only,
    then 21 compressing by 4 and 20 by 128. The notes' arithmetic: compressed
    rows of 21 x (128 + 32) + 20 x 4 = 3,440 elements per token, and per
    sequence a raw window of 43 x 128 x 512 elements and the projections'
    rings, 21 x (1024 + 256) x 2 x 8 + 20 x 512 x 2 x 128 = 3,051,520 floats.
    dsinfer keeps the compressed rows as the notes do and the raw rows and
    ratio-128 projections of the last 128 positions in window pages (its fixed
    state), the ratio-4 projections in a ring of 7 a page (what a step reads
    back), and says what its pages take: 64 tokens for this family, so that a
    ratio-128 row has a slot in each of its block's two pages. Its fixed state,
    f16 in 3 pages of 64 where the notes' rings are f32 and exact, comes to
    1.04 times theirs."""
    path = str(tmp_path / "v4_flash_config.gguf")
    write_metadata_only(path, "deepseek4", uints={"context_length": 1048576, "embedding_length": 4096, "block_count": 43, "attention.head_count": 64,
                       "attention.head_count_kv": 1, "attention.key_length": 512, "attention.value_length": 512,
                       "rope.dimension_count": 64, "attention.q_lora_rank": 1024, "attention.sliding_window": 128,
                       "expert_count": 256, "expert_used_count": 6, "expert_shared_count": 1,
                       "expert_feed_forward_length": 2048, "expert_gating_func": 4, "attention.indexer.head_count": 64,
                       "attention.indexer.key_length": 128, "attention.indexer.top_k": 512,
                       "attention.output_group_count": 8, "attention.output_lora_rank": 1024, "hyper_connection.count": 4,
                       "hyper_connection.sinkhorn_iterations": 20, "hash_layer_count": 3,
                       "rope.scaling.original_context_length": 65536},
                        floats={"attention.layer_norm_rms_epsilon": 1e-6, "expert_weights_scale": 1.5, "swiglu_clamp_exp": 10.0,
                                "attention.compress_rope_freq_base": 160000.0, "hyper_connection.epsilon": 1e-6,
                                "rope.freq_base": 10000.0, "rope.scaling.factor": 16.0},
                        strings={"rope.scaling.type": "yarn"}, bools={"expert_weights_norm": True},
                        arrays={"attention.compress_ratios": [0, 0] + [4, 128] * 20 + [4]})
    out = dsinfer("info", "-m", path).stdout.decode()
    assert "layers: 2 window-only, 21 compressing by 4 (an indexer of 64 heads of 128 picks 512 rows), 20 by 128" in out, out
    # Per token the compressed rows (21 * (512 + 128) / 4 + 20 * 512 / 128), as the notes' compact layout keeps
    # them; the raw rows (43 * 512) and the projections (21 * (2048 + 512) + 20 * 1024) of the last 128 positions
    # only: a decode step reads 128 positions, which span at most 3 window pages of 64 tokens, each holding 64
    # positions of raw rows and ratio-128 projections and the last 7 of the ratio-4 projections.
    assert "compressed rows 3440.0 per token (6880 bytes f16), kept; raw rows 22016 + compressor projections 74240 per " \
           "position, in window pages for the last 128 positions of a sequence only (ratio 4's: a ring of the last 7 a page)" in out, out
    notes_fixed = 2818048 * 2 + 3051520 * 4
    assert "the same 3440.0 per token, plus per sequence 2818048 raw window elements (f16) and 3051520 projection floats (f32) " \
           f"in rings: {notes_fixed / 2**20:.1f} MiB" in out, out
    fixed = 3 * (64 * (22016 + 20 * 1024) + 7 * 21 * (2048 + 512)) * 2
    assert "kv bytes per token (f16): 6880; fixed state per sequence: 3 window pages of 64 tokens (the last 128 positions' " \
           f"windowed rows, a ring of the last ones where fewer are read), {fixed} bytes" in out, out
    # 21 * (512 + 128) * 16 rows per page + 20 * 512 * 1 row per page, in f16, over 64 tokens.
    assert f"in pages of 64 tokens: {(21 * 640 * 16 + 20 * 512) * 2 / 64:.1f} bytes per token (f16)" in out, out


@pytest.mark.parametrize("page_tokens", [None, 16])
def test_run_holds_the_kv_memory_info_figures(dsinfer, tmp_path, page_tokens):
    """`dsinfer run` prints the most KV memory its sequence held beside info's
    arithmetic. On DeepSeek-V4 (make_deepseek4.py: a window of 16, layers
    compressing by 0, 4, 128 and 4) a prompt of some 600 tokens from a file
    holds one page per page of positions and, after each step, never more
    window pages than info's fixed state per sequence: the window pages behind
    the horizon are let go as the prompt's chunks (-b 64) commit, not kept to
    its end. In the family's pages (64 tokens, the ones info's figures assume)
    and in pages of 16."""
    from make_deepseek4 import write_deepseek4
    path = str(tmp_path / "deepseek4.gguf")
    write_deepseek4(path, dtype="f32", seed=1)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(" ".join(["hello world"] * 100))
    info = dsinfer("info", "-m", path).stdout.decode()
    per_sequence, info_page = map(int, re.search(r"fixed state per sequence: (\d+) window pages of (\d+) tokens", info).groups())
    assert info_page == 64, info
    page = page_tokens or info_page
    if page != info_page:  # the horizon of 127 and a decode step's token span this many pages
        per_sequence = (127 + 1 + 2 * page - 2) // page
    extra = ("--kv-page-tokens", str(page_tokens)) if page_tokens else ()
    err = dsinfer("run", "-m", path, "-f", str(prompt), "-n", "4", "--temp", "0", "-b", "64", "--ignore-eos", *extra).stderr.decode()
    held = re.search(rf"kv held at most \(between steps\): (\d+) pages of {page} tokens .* and (\d+) window pages .*; (\d+) positions", err)
    assert held, err
    pages, window_pages, positions = map(int, held.groups())
    assert positions > 500 and pages == (positions + page - 1) // page, err
    assert 0 < window_pages <= per_sequence, (window_pages, per_sequence, err)


def test_rejected_drafts_on_deepseek4_leave_the_text_plain_decodings(dsinfer, tmp_path):
    """DeepSeek-V4's pages keep the ratio-4 projections in rings of 7 rows
    plus one per draft token (KvStream::ring_horizon), which `run` sizes from
    --draft-tokens: a draft model of other weights, whose drafts the model
    rejects, writes rows past what each step keeps, in the model's rings and
    in its own, and the text is plain decoding's (pages of 16: rings of 10)."""
    from make_deepseek4 import write_deepseek4
    model, draft = str(tmp_path / "deepseek4.gguf"), str(tmp_path / "other.gguf")
    write_deepseek4(model, dtype="f32", seed=1)
    write_deepseek4(draft, dtype="f32", seed=2)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(" ".join(["hello world"] * 100))
    run = ("run", "-m", model, "-f", str(prompt), "-n", "32", "--temp", "0", "--ignore-eos", "--kv-page-tokens", "16")
    plain = dsinfer(*run).stdout
    drafted = dsinfer(*run, "--draft-model", draft, "--draft-tokens", "3", "--draft-p-min", "0")
    verified, accepted = map(int, re.search(r"(\d+) draft tokens verified, (\d+) accepted", drafted.stderr.decode()).groups())
    assert verified > accepted + 30, drafted.stderr.decode()
    assert drafted.stdout == plain


def test_info_lists_the_ops_the_forward_calls_per_backend(dsinfer):
    out = dsinfer("info", "-m", STORIES, "--ops").stdout.decode()
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[3:] if line.strip()}
    assert rows["paged_attention"] == ["yes"] and rows["rope_kv_write"] == ["yes"], out
    assert "sparse_attention" not in rows and "moe_experts" not in rows  # a dense Llama calls neither

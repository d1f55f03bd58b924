"""Tensor parallel over MPI (`--tensor-parallel N`, src/parallel/): each rank
holds its part of the heads and of the FFN's width, and the layers' outputs are
summed across ranks in rank order. Against the same model in one process the
only difference is where the sums of the attention output and FFN down
projections are split and added: the weights, and the activation blocks a
quantized matmul multiplies them with, are the same (each rank's columns are
whole blocks). So in f32 the bound is test_trained_models.F32_TOLERANCE, the
one for two engines in f32 summing in another order. Where activations are
quantized to 8 bits, a sum that lands on the other side of a rounding boundary
moves an activation by a code, as between two engines quantizing them: the
bound is QUANT_TOLERANCE. The greedy choice must agree wherever the top logit
leads by more than the bound twice over.

The ranks are started by `dsinfer logits` itself through mpirun (two ranks of
one thread on this machine); the one-process run uses two threads."""

import os
import re
import shutil

import numpy as np
import pytest

from make_model import write_model
import train_models
from test_trained_models import F32_TOLERANCE, QUANT_TOLERANCE, relative_error, text_tokens, trained  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun (scripts/install_deps.sh)")


def logits(dsinfer, model, tokens, out, *extra):
    dsinfer("logits", "-m", model, "--tokens", ",".join(map(str, tokens)), "--out", out, "--kv-cache-dtype", "f32", *extra)
    return np.load(out)


def check_split_equals_whole(dsinfer, model, tokens, tmp_path, tolerance, ranks=2):
    whole = logits(dsinfer, model, tokens, tmp_path / "whole.npy", "-t", "2")
    split = logits(dsinfer, model, tokens, tmp_path / "split.npy", "-t", "1", "--tensor-parallel", str(ranks))
    error = relative_error(split, whole)
    assert error < tolerance, f"{model}: {error:.3g}"
    top2 = np.sort(whole, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * tolerance * np.abs(whole).max()
    assert clear.sum() >= len(clear) // 4, f"{clear.sum()} of {len(clear)} positions decide the comparison"
    assert (split.argmax(-1) == whole.argmax(-1))[clear].all()
    return error, clear.sum()


@pytest.mark.parametrize("target", ["F32", "Q8_0", "Q4_0"])
def test_the_trained_qwen2_split_in_two_equals_it_whole(dsinfer, trained, tmp_path, target):
    """The trained Qwen2 (4 heads of 64, 2 KV heads, FFN 768, the q/k/v biases split with their rows), in
    f32 and in two types of blocks of 32, which each rank's 128 attention and 384 FFN columns hold whole
    (K types' blocks of 256 do not: such a split is refused, below)."""
    model = trained["qwen2"]
    if target != "F32":
        model = str(tmp_path / f"{target}.gguf")
        dsinfer("quantize", "-m", trained["qwen2"], "-o", model, "--type", target)
    tokens = text_tokens(dsinfer, model, 64)
    error, decided = check_split_equals_whole(dsinfer, model, tokens, tmp_path, F32_TOLERANCE if target == "F32" else QUANT_TOLERANCE)
    print(f"qwen2 {target}: tensor parallel 2 against one process: {error:.2e} of the largest logit, top-1 equal at {decided} "
          f"decided positions of {len(tokens)}")


def test_a_llama_split_in_two_and_in_four_equals_it_whole(dsinfer, tmp_path):
    """Llama (no biases), random f32 weights of two layers: 4 query heads over 2 KV heads in two ranks (each
    keeps one KV head and its two query heads), and over 4 KV heads in four."""
    tokens = list(range(1, 200, 3))
    for ranks, n_head_kv in ((2, 2), (4, 4)):
        model = write_model(str(tmp_path / f"llama_kv{n_head_kv}.gguf"), arch="llama", n_head=4, n_head_kv=n_head_kv, seed=3)
        error, decided = check_split_equals_whole(dsinfer, model, tokens, tmp_path, F32_TOLERANCE, ranks)
        print(f"llama, {ranks} ranks: {error:.2e} of the largest logit, top-1 equal at {decided} decided positions of {len(tokens)}")


@pytest.mark.parametrize("shape,layout", [("v2lite", "kv_b"), ("v3", "split")])
@pytest.mark.parametrize("form", ["absorbed", "expanded"])
@pytest.mark.parametrize("experts", ["by width", "whole"])
def test_a_deepseek2_split_in_two_equals_it_whole(dsinfer, tmp_path, shape, layout, form, experts):
    """DeepSeek-V2/V3 (make_deepseek2.py, random f32 weights, three layers: one dense, two of routed and
    shared experts): each rank takes half the heads (their queries, up-projections and output columns; the
    latent each token caches is every head's, so every rank computes and keeps it whole), half the dense
    FFN and the shared experts' width, and half of every routed expert's width or, with --expert-parallel,
    half of the routed experts whole (a token's slots on the other rank's experts add nothing here); the
    routing is computed whole on every rank. V2-Lite's softmax routing over a combined kv_b, and V3's
    grouped sigmoid routing with a query LoRA and the split k_b/v_b, in MLA's absorbed and expanded forms.
    Three layers, because a deeper random model's routing turns on near-ties, which the sums' reordering
    may flip (27 layers of V2-Lite's shape flip one at layer 18)."""
    from make_deepseek2 import write_deepseek2
    model = write_deepseek2(str(tmp_path / f"{shape}.gguf"), shape=shape, layout=layout, n_layer=3)
    tokens = list(range(1, 400, 3))
    whole = logits(dsinfer, model, tokens, tmp_path / "whole.npy", "-t", "2", "--mla-prefill", form)
    extra = ("--expert-parallel", "2") if experts == "whole" else ()
    split = logits(dsinfer, model, tokens, tmp_path / "split.npy", "-t", "1", "--tensor-parallel", "2", "--mla-prefill", form, *extra)
    error = relative_error(split, whole)
    assert error < F32_TOLERANCE, f"{error:.3g}"
    print(f"deepseek2 {shape} {layout} {form}, experts {experts}: tensor parallel 2 against one process: {error:.2e} of the largest logit")


def check_long_split(dsinfer, model, tmp_path, experts, name):
    """600 positions of an f32 MoE model in two ranks, the experts by width or whole, against one process."""
    tokens = [i % 500 + 1 for i in range(0, 1800, 3)]
    whole = logits(dsinfer, model, tokens, tmp_path / "whole.npy", "-t", "2")
    extra = ("--expert-parallel", "2") if experts == "whole" else ()
    split = logits(dsinfer, model, tokens, tmp_path / "split.npy", "-t", "1", "--tensor-parallel", "2", *extra)
    error = relative_error(split, whole)
    assert error < F32_TOLERANCE, f"{error:.3g}"
    print(f"{name}, experts {experts}: tensor parallel 2 against one process: {error:.2e} of the largest logit")


@pytest.mark.parametrize("experts", ["by width", "whole"])
def test_a_deepseek32_split_in_two_equals_it_whole(dsinfer, tmp_path, experts):
    """DeepSeek-V3.2 (three layers of V3's shape with the lightning indexer) splits as V3 does; the indexer
    is whole on every rank, so every rank's heads attend to the positions it picks. Its top-k is 1,024 here,
    above the 600 positions, so that every position is picked on both sides: with fewer, a pick at the
    boundary turns on a near-tie of two scores, which the sums' reordering may flip (top-k 32 flips two rows
    of 600 at the third layer), as it may flip an expert's routing."""
    from make_deepseek2 import write_deepseek2
    model = write_deepseek2(str(tmp_path / "v32.gguf"), shape="v3", layout="split", n_layer=3, n_ctx=1024, indexer=(16, 64, 1024))
    check_long_split(dsinfer, model, tmp_path, experts, "deepseek32")


@pytest.mark.parametrize("experts", ["by width", "whole"])
def test_a_deepseek4_split_in_two_equals_it_whole(dsinfer, tmp_path, experts):
    """DeepSeek-V4 (make_deepseek4's shape: four hyper-connection streams, a window of 16, layers compressing by
    4 and by 128, 4 heads in 2 output groups, 4 experts with the first layer hash-routed) in two ranks: each
    its 2 heads and their output group, and the experts by width or whole; the streams, the KV row, the
    compressors and the indexer whole on every rank, each sublayer's output one all-reduce. 600 positions, so
    rows of both ratios form; the indexer picks from 16 heads with a top-k above the 150 ratio-4 rows, so that
    no pick turns on a near-tie the sums' reordering could flip (as for V3.2 above)."""
    from make_deepseek4 import write_deepseek4
    model = write_deepseek4(str(tmp_path / "v4.gguf"), dtype="f32", seed=3, indexer_heads=16, indexer_top_k=256)
    check_long_split(dsinfer, model, tmp_path, experts, "deepseek4")


def test_what_does_not_split_is_refused_by_name(dsinfer, tmp_path):
    """Every refusal names what stops the split: heads that do not divide, columns that are not whole
    blocks, W8A8's columns, DeepSeek-V4's output groups that do not divide."""
    def refusal(model, ranks):
        result = dsinfer("logits", "-m", model, "--tokens", "1,2,3", "--out", tmp_path / "x.npy", "-t", "1",
                         "--tensor-parallel", *str(ranks).split(), check=False)
        assert result.returncode != 0
        return result.stderr.decode()

    llama = write_model(str(tmp_path / "llama.gguf"), arch="llama", n_head=4, n_head_kv=2)
    assert "head_count 4 and head_count_kv 2 must both divide by 4 ranks" in refusal(llama, 4)
    # Q4_0's blocks are 32 columns: an FFN of 96 splits into parts of 48.
    odd = write_model(str(tmp_path / "odd_ffn.gguf"), arch="llama", dtype="q4_0", n_ff=96)
    assert "tensor 'blk.0.ffn_down.weight' (Q4_0) splits into parts of 48 columns, not whole blocks of 32" in refusal(odd, 2)
    w8a8 = str(tmp_path / "w8a8.gguf")
    dsinfer("quantize", "-m", llama, "-o", w8a8, "--type", "W8A8")
    assert "is I8 (W8A8), whose split by columns is not implemented" in refusal(w8a8, 2)
    from make_deepseek4 import write_deepseek4
    deepseek = str(tmp_path / "deepseek4.gguf")
    write_deepseek4(deepseek, dtype="f32", seed=1)  # 4 heads in 2 output groups
    assert "deepseek4.attention.output_group_count 2 must divide by 4 ranks" in refusal(deepseek, 4)
    assert "--tensor-parallel must be 1..1024 ranks" in refusal(llama, 0)
    from make_deepseek2 import write_deepseek2
    v2 = write_deepseek2(str(tmp_path / "v2.gguf"), n_layer=2)
    result = dsinfer("logits", "-m", v2, "--tokens", "1,2", "--out", tmp_path / "x.npy", "--expert-parallel", "2", check=False)
    assert "--expert-parallel divides the experts among --tensor-parallel's ranks" in result.stderr.decode()
    assert "--expert-parallel 4: experts divided among other ranks than --tensor-parallel's 2 is not implemented" in \
        refusal(v2, "2 --expert-parallel 4")


def test_run_in_two_ranks_prints_one_processes_text(dsinfer, trained):
    """`dsinfer run --tensor-parallel 2`: rank 0 runs the engine and prints, rank 1 follows its steps; the
    greedy continuation of the text the model learned is the one process's, token for token."""
    text = open(train_models.english_text(), encoding="utf-8").read()[:200]
    run = ("run", "-m", trained["qwen2"], "-p", text, "-n", "64", "--temp", "0", "--ignore-eos", "--show-token-ids")
    whole = dsinfer(*run, "-t", "2")
    split = dsinfer(*run, "-t", "1", "--tensor-parallel", "2")
    ids = lambda r: re.search(r"token ids:(.*)", r.stderr.decode()).group(1)
    assert ids(split) == ids(whole) and split.stdout == whole.stdout

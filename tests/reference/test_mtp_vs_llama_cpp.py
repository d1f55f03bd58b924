"""DeepSeek-V3.2's multi-token-prediction layer (`dsinfer logits --mtp-out`)
against llama.cpp, which loads the layer and never runs it: the reference is
built from what llama.cpp does run.

The layer's row at position p is a deepseek32 layer over
x_p = eh_proj [enorm(embed(t_{p+1})); hnorm(h_p)], h_p the model's final
hidden state (after its output norm, as vLLM's and SGLang's DeepSeek MTP take
it), followed by shared_head_norm and the model's output matrix. So:
1. llama.cpp runs the model file and gives h_p (its per-token embeddings);
2. numpy forms x_p from the file's nextn tensors (two RMS norms and a product);
3. llama.cpp runs a one-layer deepseek32 file holding the NextN block's
   tensors as blk.0, shared_head_norm as its output norm and the model's output
   matrix, fed x_p as input embeddings at position p: its logits are the reference.

Tolerances as in test_logits_vs_llama_cpp.py (the formats' arguments there): the
layer is the same f32 (or Q8_0-activation) arithmetic in another order. Two
deliberate mistakes fail the bound: the concatenation's halves swapped, and
t_p paired with h_p (the token of the hidden state's own position).
"""

import ctypes
import os

import numpy as np
import pytest
import gguf

from make_deepseek2 import write_deepseek2
from test_logits_vs_llama_cpp import LONG_TOKENS, QUANT_TOLERANCE, TOLERANCE
from fast_gguf_reader import FastGGUFReader

N_LAYER = 3  # make_deepseek2's "v3" shape; the NextN layer is blk.3
NORM_EPS = 1e-5  # write_deepseek2's attention.layer_norm_rms_epsilon


def llama_cpp_run(path, n_vocab, n_embd, tokens=None, embeddings=None, hidden=False):
    """One batch through llama.cpp (f32 KV) at positions 0, 1, ...: logits [n, n_vocab], or the final hidden
    states [n, n_embd] where `hidden`; the batch is token ids, or input embeddings [n, n_embd]."""
    import llama_cpp
    n = len(tokens) if tokens is not None else len(embeddings)
    f32 = llama_cpp.GGML_TYPE_F32
    extra = dict(embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE) if hidden else {}
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n + 8, n_batch=n + 8, n_ubatch=n + 8, n_threads=2, verbose=False,
                          type_k=f32, type_v=f32, **extra)
    batch = llama_cpp.llama_batch_init(n, 0 if tokens is not None else n_embd, 1)
    try:
        batch.n_tokens = n
        for i in range(n):
            if tokens is not None:
                batch.token[i] = tokens[i]
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = True
        if embeddings is not None:
            rows = np.ascontiguousarray(embeddings, dtype=np.float32)
            ctypes.memmove(batch.embd, rows.ctypes.data, rows.nbytes)
        assert llama_cpp.llama_decode(llm._ctx.ctx, batch) == 0
        if hidden:
            out = llama_cpp.llama_get_embeddings(llm._ctx.ctx)
            width = n_embd
        else:
            out = llama_cpp.llama_get_logits(llm._ctx.ctx)
            width = n_vocab
        return np.ctypeslib.as_array(out, shape=(n * width,)).reshape(n, width).copy()
    finally:
        llama_cpp.llama_batch_free(batch)
        llm.close()


def read_tensors(path):
    """Every tensor of the file as f32 values, by name, in numpy order (rows last)."""
    tensors = {}
    for t in FastGGUFReader(path).tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(values, np.float32).reshape([int(x) for x in reversed(t.shape)])
    return tensors


def nextn_layer_file(path, tensors, dtype, indexer, yarn):
    """The NextN block of the model's tensors as a one-layer deepseek32 file (module docstring, step 3), its
    matrices in `dtype`, the model's output matrix in f32 (the files' own type here)."""
    block = f"blk.{N_LAYER}."
    weights = {"token_embd.weight": tensors["token_embd.weight"], "output.weight": tensors["output.weight"],
               "output_norm.weight": tensors[block + "nextn.shared_head_norm.weight"]}
    for name, values in tensors.items():
        if name.startswith(block) and ".nextn." not in name:
            weights["blk.0." + name[len(block):]] = values
    # write_deepseek2 takes MLA's kv_b whole and splits it as llama.cpp's converter does.
    k_b, v_b = weights.pop("blk.0.attn_k_b.weight"), weights.pop("blk.0.attn_v_b.weight")  # [h, kv_lora, nope], [h, v, kv_lora]
    weights["blk.0.attn_kv_b.weight"] = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(-1, k_b.shape[1])
    return write_deepseek2(path, shape="v3", dtype=dtype, head_dtype="f32", layout="split", n_ctx=1024, indexer=indexer,
                           yarn=yarn, weights=weights, n_layer=1, leading_dense=0)


def rms_norm(x, weight):
    return x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + NORM_EPS).astype(np.float32) * weight


def mtp_reference(path, tokens, dtype, indexer, yarn):
    """The reference MTP logits [len(tokens) - 1, n_vocab] for the model file at `path` (module docstring),
    and the reference under each deliberate mistake, by name."""
    tensors = read_tensors(path)
    n_vocab, n_embd = tensors["output.weight"].shape
    hidden = llama_cpp_run(path, n_vocab, n_embd, tokens=tokens, hidden=True)
    layer_path = nextn_layer_file(path.replace(".gguf", "_layer.gguf"), tensors, dtype, indexer, yarn)
    block = f"blk.{N_LAYER}.nextn."
    embed = lambda ids: rms_norm(tensors["token_embd.weight"][ids], tensors[block + "enorm.weight"])
    normed = rms_norm(hidden[:-1], tensors[block + "hnorm.weight"])

    def run(first, second):
        pairs = np.concatenate([first, second], axis=1).astype(np.float32)
        if dtype == "q8_0":  # the product's activations rounded to Q8_0 blocks, as both engines multiply
            q8_0 = gguf.GGMLQuantizationType.Q8_0
            pairs = gguf.quants.dequantize(gguf.quants.quantize(pairs, q8_0), q8_0)
        return llama_cpp_run(layer_path, n_vocab, n_embd, embeddings=pairs @ tensors[block + "eh_proj.weight"].T)

    # (Rows at position p + 1 rather than p would not show: RoPE sees only the distance between positions.)
    return run(embed(tokens[1:]), normed), {"halves swapped": run(normed, embed(tokens[1:])),
                                            "token and hidden state of one position": run(embed(tokens[:-1]), normed)}


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_mtp_layer_matches_llama_cpp(dsinfer, model_dir, dtype):
    """Teacher-forced MTP logits at every row of a 600-token prompt, whole, in
    chunks of 7 and of 64, and token by token (a row's result does not depend
    on its step), against the reference above; top-1 equal wherever
    llama.cpp's two best differ by more than the bound lets a logit move. The
    indexer keeps 32 of up to 600 rows; YaRN reaches past its original 128.
    The model is f32, its NextN layer's matrices f32 or Q8_0: in Q8_0 its
    activation rounding is both engines' (the reference rounds eh_proj's
    input as they do), but the rest of the model in Q8_0 would move the hidden
    states the layer reads by up to 0.15 of the largest logit on this random
    model (test_deepseek32_sparse_attention_matches_llama_cpp says why).
    Bounds: test_logits_vs_llama_cpp.py's for the formats, 1e-3 and 5e-2."""
    indexer, yarn = (16, 64, 32), (4.0, 128, 0.707)
    tokens = LONG_TOKENS
    path = write_deepseek2(os.path.join(model_dir, f"deepseek32_nextn_{dtype}.gguf"), shape="v3", dtype="f32", nextn_dtype=dtype,
                           layout="split", seed=13, n_ctx=1024, indexer=indexer, yarn=yarn, nextn=True)
    ref, mistakes = mtp_reference(path, tokens, dtype, indexer, yarn)
    scale = np.abs(ref).max()
    tolerance = TOLERANCE.get(dtype, QUANT_TOLERANCE)
    best_two = np.sort(ref, axis=1)[:, -2:]
    decided = best_two[:, 1] - best_two[:, 0] > 2 * tolerance * scale
    for batch in [0, 7, 64, 1]:
        out = path.replace(".gguf", f"_mtp_b{batch}.npy")
        dsinfer("logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "--out", path.replace(".gguf", ".npy"),
                "--mtp-out", out, "--kv-cache-dtype", "f32", "-b", str(batch))
        ours = np.load(out)
        assert ours.shape == ref.shape
        error = float(np.abs(ours - ref).max() / scale)
        agree = ours.argmax(axis=1) == ref.argmax(axis=1)
        print(f"MTP {dtype}, batch {batch or 'whole'}: relative max error {error:.2e} (tolerance {tolerance:.3g}), "
              f"top-1 agreement {agree.mean():.1%}, {agree[decided].mean():.1%} of {int(decided.sum())} decided rows")
        assert error <= tolerance
        assert agree[decided].all()
        for mistake, wrong in mistakes.items():
            wrong_error = float(np.abs(ours - wrong).max() / scale)
            print(f"  against the reference with the {mistake}: {wrong_error:.2e}")
            assert wrong_error > tolerance

"""Small real models of every architecture dsinfer runs, trained here with JAX.

Random weights make quantization error meaningless (a 4-bit copy of a random
model disagrees with itself at every step), so the quantization tests and the
accuracy table use models that have learned something: Llama, Qwen2, and
DeepSeek-V2 (MLA + DeepSeekMoE) with V2-Lite's routing (softmax, two shared
experts) and with V3's (sigmoid with a selection bias, groups, normalised and
scaled weights). Each is trained on text every Debian machine has (the
licences in /usr/share/common-licenses, MPL-2.0 held out), the calibration
set's documents and the rare-Unicode evaluation set, the non-ASCII texts
repeated so that they are learned too: top-1 agreement measures a
quantization only where the original's next token is clear, as it usually is
for a real model on ordinary text; on text these small models never saw, and
on byte-fallback Unicode they did not learn, most next tokens are near-ties
and an F16 copy already flips some. Windows of the context length, so that
no evaluated position lies beyond the ones trained. Tokenized with
stories260K's vocabulary, then written as F32 GGUF with the same writers as the random test
models (make_model.py, make_deepseek2.py), whose tensor layout llama.cpp
reads. The forward below is the computation those files mean; the tests
check it against llama.cpp's logits on the written file.

Seeded and cached: a model is trained again only when this script, the data
or the configuration changes. Minutes on two cores.

Usage: python3 tests/reference/train_models.py [--out DIR] [--only NAME | --tested]
"""

import argparse
import glob
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from make_deepseek2 import write_deepseek2  # noqa: E402
from make_model import DEFAULT_VOCAB, write_model  # noqa: E402
from fast_gguf_reader import FastGGUFReader  # noqa: E402

LICENSES = "/usr/share/common-licenses"
TRAINED_TEXT = "GPL-3"  # an English text the models learned: their English evaluation set
HELD_OUT = "MPL-2.0"    # English they never saw
RARE_UNICODE = os.path.join(ROOT, "tests", "data", "eval", "rare_unicode.txt")
NON_ASCII_REPEATS = 10
CALIBRATION = os.path.join(ROOT, "tests", "data", "calibration", "mixed.jsonl")
DEFAULT_OUT = os.path.join(ROOT, "models", "trained")

# Rows of 256 (n_embd, n_ff, the MLA ranks, the experts) so that every
# llama.cpp type, the K types included, applies without fallback.
DENSE = dict(n_embd=256, n_head=4, n_head_kv=2, n_ff=768, n_layer=2)
MLA = dict(n_embd=256, n_head=4, q_lora_rank=256, kv_lora_rank=256, qk_nope=32, qk_rope=32, v_head=64, n_layer=2,
           leading_dense=1, n_ff=768, n_expert=8, n_expert_used=2, expert_ff=256)
CONFIGS = {
    "llama": dict(arch="llama", **DENSE),
    "qwen2": dict(arch="qwen2", **DENSE),
    # llama.cpp reads a deepseek2 file without q LoRA only with V2-Lite's 27 layers, so both carry one.
    "deepseek2_v2lite_routing": dict(arch="deepseek2", **MLA, n_shared=2, gating=1, weights_norm=False, weights_scale=1.0,
                                     n_group=1, n_group_used=1, probs_bias=False),
    "deepseek2_v3_routing": dict(arch="deepseek2", **MLA, n_shared=1, gating=2, weights_norm=True, weights_scale=2.5,
                                 n_group=4, n_group_used=2, probs_bias=True),
    # DeepSeek-V3.2's file with its multi-token-prediction layer, trained beside the model as DeepSeek-V3 was
    # (the layer's loss weighted 0.3): what --speculative-mtp drafts with (bench/speculative_decoding.py).
    # Four layers for the one of the layer: its draft costs a quarter of a forward (V3.2's, a 61st). The
    # indexer keeps every position of the 256 (its weights random, untrained): the attention is V3's.
    "deepseek32_mtp": dict(arch="deepseek32", **dict(MLA, n_layer=4), n_shared=1, gating=2, weights_norm=True,
                           weights_scale=2.5, n_group=4, n_group_used=2, probs_bias=True, nextn=True),
}
MTP_LOSS_WEIGHT = 0.3
INDEXER = (4, 64)  # a deepseek32 file's indexer heads and key length; it keeps N_CTX positions
# What tests/reference/test_trained_models.py checks: one dense model (Qwen2's
# biases and NeoX RoPE are the longer path) and one MoE (V3's routing, what
# V3 to V3.2 deploy). The other two train when bench/quant_accuracy.py asks:
# each of the four is minutes of the test run's CPU on two cores.
TESTED = ["deepseek2_v3_routing", "qwen2"]
TRAINING = dict(steps=400, batch=8, seq=256, lr=3e-3, warmup=30, seed=0)
N_CTX = TRAINING["seq"]  # the positions trained (BOS and seq - 1 tokens): evaluation chunks stay within them
ROPE_BASE = 10000.0
EPS = 1e-5


def training_documents():
    paths = sorted(p for p in glob.glob(os.path.join(LICENSES, "*")) if not os.path.islink(p) and os.path.basename(p) != HELD_OUT)
    documents = [open(p, encoding="utf-8", errors="replace").read() for p in paths]
    with open(CALIBRATION, encoding="utf-8") as f:
        non_ascii = [json.loads(line)["text"] for line in f if line.strip()]
    non_ascii.append(open(RARE_UNICODE, encoding="utf-8").read())
    return documents + non_ascii * NON_ASCII_REPEATS


def english_text():
    return os.path.join(LICENSES, TRAINED_TEXT)


def held_out_text():
    return os.path.join(LICENSES, HELD_OUT)


def tokenize(documents):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=DEFAULT_VOCAB, vocab_only=True, verbose=False)
    tokens = []
    for d in documents:
        tokens += llm.tokenize(d.encode(), add_bos=False, special=False)
    bos = llm.token_bos()
    llm.close()
    return np.array(tokens, dtype=np.int32), bos


# ---- the forward pass, as the GGUF files mean it -------------------------------------------------

def rms_norm(jnp, x, w):
    return x * jnp.reciprocal(jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)) * w


def rope(jnp, x, n_rot, neox):
    """x [T, H, n_rot] rotated at positions 0..T-1: neighbouring pairs (ggml's normal mode) or halves (NeoX)."""
    t = x.shape[0]
    freqs = ROPE_BASE ** (-jnp.arange(0, n_rot, 2, dtype=jnp.float32) / n_rot)
    angle = jnp.arange(t, dtype=jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
    if neox:
        a, b = x[..., : n_rot // 2], x[..., n_rot // 2:]
        return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)


def causal_attention(jnp, q, k, v, scale):
    """q [T, H, D], k [T, H, D], v [T, H, Dv] -> [T, H * Dv]."""
    t = q.shape[0]
    scores = jnp.einsum("thd,shd->hts", q, k) * scale
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool))[None], scores, -jnp.inf)
    probs = jnp.exp(scores - scores.max(-1, keepdims=True))
    probs = probs / probs.sum(-1, keepdims=True)
    return jnp.einsum("hts,shd->thd", probs, v).reshape(t, -1)


def silu(jnp, x):
    return x / (1 + jnp.exp(-x))


def dense_ffn(jnp, p, b, h, suffix=""):
    gate, up, down = p[f"{b}ffn_gate{suffix}.weight"], p[f"{b}ffn_up{suffix}.weight"], p[f"{b}ffn_down{suffix}.weight"]
    return (silu(jnp, h @ gate.T) * (h @ up.T)) @ down.T


def route(jax, jnp, c, logits, bias):
    """kernels/moe_route: per token, the chosen experts' weights as a dense [T, n_expert] matrix."""
    probs = jax.nn.softmax(logits, -1) if c["gating"] == 1 else jax.nn.sigmoid(logits)
    selection = probs + bias if bias is not None else probs
    if c["n_group"] > 1:
        per = c["n_expert"] // c["n_group"]
        grouped = selection.reshape(selection.shape[0], c["n_group"], per)
        group_score = jax.lax.top_k(grouped, 2)[0].sum(-1)
        kept = jax.lax.top_k(group_score, c["n_group_used"])[1]
        eligible = jax.nn.one_hot(kept, c["n_group"]).sum(1) > 0
        selection = jnp.where(jnp.repeat(eligible, per, axis=1), selection, -jnp.inf)
    chosen = jax.lax.top_k(jax.lax.stop_gradient(selection), c["n_expert_used"])[1]
    mask = jax.nn.one_hot(chosen, c["n_expert"]).sum(1)
    weights = probs * mask
    if c["weights_norm"]:
        weights = weights / jnp.maximum(weights.sum(-1, keepdims=True), 6.103515625e-5)
    return weights * c["weights_scale"]


def moe_ffn(jax, jnp, c, p, fixed, b, h):
    weights = route(jax, jnp, c, h @ p[b + "ffn_gate_inp.weight"].T, fixed.get(b + "exp_probs_b.bias"))
    g = jnp.einsum("td,efd->tef", h, p[b + "ffn_gate_exps.weight"])
    u = jnp.einsum("td,efd->tef", h, p[b + "ffn_up_exps.weight"])
    out = jnp.einsum("tef,edf->ted", silu(jnp, g) * u, p[b + "ffn_down_exps.weight"])
    return jnp.einsum("te,ted->td", weights, out) + dense_ffn(jnp, p, b, h, "_shexp")


def dense_attention(jnp, c, p, b, h):
    hd = c["n_embd"] // c["n_head"]
    q = h @ p[b + "attn_q.weight"].T
    k = h @ p[b + "attn_k.weight"].T
    v = h @ p[b + "attn_v.weight"].T
    if c["arch"] == "qwen2":
        q, k, v = q + p[b + "attn_q.bias"], k + p[b + "attn_k.bias"], v + p[b + "attn_v.bias"]
    t, group = h.shape[0], c["n_head"] // c["n_head_kv"]
    neox = c["arch"] == "qwen2"
    q = rope(jnp, q.reshape(t, c["n_head"], hd), hd, neox)
    k = jnp.repeat(rope(jnp, k.reshape(t, c["n_head_kv"], hd), hd, neox), group, axis=1)
    v = jnp.repeat(v.reshape(t, c["n_head_kv"], hd), group, axis=1)
    return causal_attention(jnp, q, k, v, 1.0 / np.sqrt(hd)) @ p[b + "attn_output.weight"].T


def mla_attention(jnp, c, p, b, h):
    t, nh, nope, r, vh, kv = h.shape[0], c["n_head"], c["qk_nope"], c["qk_rope"], c["v_head"], c["kv_lora_rank"]
    q_a = rms_norm(jnp, h @ p[b + "attn_q_a.weight"].T, p[b + "attn_q_a_norm.weight"])
    q = (q_a @ p[b + "attn_q_b.weight"].T).reshape(t, nh, nope + r)
    kv_a = h @ p[b + "attn_kv_a_mqa.weight"].T
    latent = rms_norm(jnp, kv_a[:, :kv], p[b + "attn_kv_a_norm.weight"])
    k_pe = rope(jnp, kv_a[:, None, kv:], r, False)
    kv_up = (latent @ p[b + "attn_kv_b.weight"].T).reshape(t, nh, nope + vh)
    q = jnp.concatenate([q[..., :nope], rope(jnp, q[..., nope:], r, False)], -1)
    k = jnp.concatenate([kv_up[..., :nope], jnp.broadcast_to(k_pe, (t, nh, r))], -1)
    return causal_attention(jnp, q, k, kv_up[..., nope:], 1.0 / np.sqrt(nope + r)) @ p[b + "attn_output.weight"].T


def is_mla(c):
    return c["arch"] in ("deepseek2", "deepseek32")


def layer(jax, jnp, c, p, fixed, i, x):
    """Block i (blk.{i}.) over the residual stream x [T, n_embd]."""
    b = f"blk.{i}."
    h = rms_norm(jnp, x, p[b + "attn_norm.weight"])
    x = x + (mla_attention if is_mla(c) else dense_attention)(jnp, c, p, b, h)
    h = rms_norm(jnp, x, p[b + "ffn_norm.weight"])
    moe = is_mla(c) and i >= c["leading_dense"]
    return x + (moe_ffn(jax, jnp, c, p, fixed, b, h) if moe else dense_ffn(jnp, p, b, h))


def hidden_states(jax, jnp, c, p, fixed, tokens):
    """The final hidden states [T, n_embd] of one sequence, after the output norm."""
    x = p["token_embd.weight"][tokens]
    for i in range(c["n_layer"]):
        x = layer(jax, jnp, c, p, fixed, i, x)
    return rms_norm(jnp, x, p["output_norm.weight"])


def forward(jax, jnp, c, p, fixed, tokens):
    """Logits [T, n_vocab] of one sequence."""
    return hidden_states(jax, jnp, c, p, fixed, tokens) @ p["output.weight"].T


def mtp_forward(jax, jnp, c, p, fixed, tokens, hidden):
    """The multi-token-prediction layer's logits [T - 1, n_vocab]: row t from token t + 1 and the hidden
    state at t, predicting token t + 2 (src/engine/mtp_drafter.h)."""
    b = f"blk.{c['n_layer']}.nextn."
    pair = jnp.concatenate([rms_norm(jnp, p["token_embd.weight"][tokens[1:]], p[b + "enorm.weight"]),
                            rms_norm(jnp, hidden[:-1], p[b + "hnorm.weight"])], axis=-1)
    x = layer(jax, jnp, c, p, fixed, c["n_layer"], pair @ p[b + "eh_proj.weight"].T)
    return rms_norm(jnp, x, p[b + "shared_head_norm.weight"]) @ p["output.weight"].T


# ---- parameters --------------------------------------------------------------------------------

def shapes(c, n_vocab):
    """Every trained tensor: name -> (shape, kind), kind 'matrix' (N(0, 0.02)), 'norm' (ones) or 'bias' (zeros)."""
    e = c["n_embd"]
    s = {"token_embd.weight": ((n_vocab, e), "matrix"), "output_norm.weight": ((e,), "norm"),
         "output.weight": ((n_vocab, e), "matrix")}
    for i in range(c["n_layer"] + int(c.get("nextn", False))):
        b = f"blk.{i}."
        if i == c["n_layer"]:
            s[b + "nextn.eh_proj.weight"] = ((e, 2 * e), "matrix")
            for name in ("enorm", "hnorm", "shared_head_norm"):
                s[f"{b}nextn.{name}.weight"] = ((e,), "norm")
        s[b + "attn_norm.weight"] = ((e,), "norm")
        s[b + "ffn_norm.weight"] = ((e,), "norm")
        if is_mla(c):
            nh, qh = c["n_head"], c["qk_nope"] + c["qk_rope"]
            s[b + "attn_q_a.weight"] = ((c["q_lora_rank"], e), "matrix")
            s[b + "attn_q_a_norm.weight"] = ((c["q_lora_rank"],), "norm")
            s[b + "attn_q_b.weight"] = ((nh * qh, c["q_lora_rank"]), "matrix")
            s[b + "attn_kv_a_mqa.weight"] = ((c["kv_lora_rank"] + c["qk_rope"], e), "matrix")
            s[b + "attn_kv_a_norm.weight"] = ((c["kv_lora_rank"],), "norm")
            s[b + "attn_kv_b.weight"] = ((nh * (c["qk_nope"] + c["v_head"]), c["kv_lora_rank"]), "matrix")
            s[b + "attn_output.weight"] = ((e, nh * c["v_head"]), "matrix")
        else:
            hd = e // c["n_head"]
            for name, rows in (("q", c["n_head"] * hd), ("k", c["n_head_kv"] * hd), ("v", c["n_head_kv"] * hd)):
                s[f"{b}attn_{name}.weight"] = ((rows, e), "matrix")
                if c["arch"] == "qwen2":
                    s[f"{b}attn_{name}.bias"] = ((rows,), "bias")
            s[b + "attn_output.weight"] = ((e, c["n_head"] * hd), "matrix")
        if is_mla(c) and i >= c["leading_dense"]:
            ne, ff = c["n_expert"], c["expert_ff"]
            s[b + "ffn_gate_inp.weight"] = ((ne, e), "matrix")
            s[b + "ffn_gate_exps.weight"] = ((ne, ff, e), "matrix")
            s[b + "ffn_up_exps.weight"] = ((ne, ff, e), "matrix")
            s[b + "ffn_down_exps.weight"] = ((ne, e, ff), "matrix")
            for name, shape in (("gate", (ff * c["n_shared"], e)), ("up", (ff * c["n_shared"], e)), ("down", (e, ff * c["n_shared"]))):
                s[f"{b}ffn_{name}_shexp.weight"] = (shape, "matrix")
        else:
            s[b + "ffn_gate.weight"] = ((c["n_ff"], e), "matrix")
            s[b + "ffn_up.weight"] = ((c["n_ff"], e), "matrix")
            s[b + "ffn_down.weight"] = ((e, c["n_ff"]), "matrix")
    return s


def fixed_tensors(c, rng):
    """Tensors the model uses but training does not move: V3's expert selection bias (set by load balancing there),
    and a deepseek32 file's indexer, which keeps every position here."""
    blocks = range(c["n_layer"] + int(c.get("nextn", False)))
    fixed = {}
    if c.get("probs_bias"):
        fixed.update({f"blk.{i}.exp_probs_b.bias": (rng.standard_normal(c["n_expert"]) * 0.05).astype(np.float32)
                      for i in blocks if i >= c["leading_dense"]})
    if c["arch"] == "deepseek32":
        heads, dim = INDEXER
        for i in blocks:
            b = f"blk.{i}.indexer."
            fixed.update({b + "k_norm.weight": np.ones(dim, np.float32), b + "k_norm.bias": np.zeros(dim, np.float32),
                          b + "proj.weight": (rng.standard_normal((heads, c["n_embd"])) * 0.02).astype(np.float32),
                          b + "attn_k.weight": (rng.standard_normal((dim, c["n_embd"])) * 0.02).astype(np.float32),
                          b + "attn_q_b.weight": (rng.standard_normal((heads * dim, c["q_lora_rank"])) * 0.02).astype(np.float32)})
    return fixed


def train(name, c, tokens, bos, n_vocab, log):
    import jax
    import jax.numpy as jnp
    import optax
    t = TRAINING
    rng = np.random.default_rng(t["seed"])
    params = {}
    for key, (shape, kind) in shapes(c, n_vocab).items():
        if kind == "matrix":
            params[key] = jnp.asarray(rng.standard_normal(shape).astype(np.float32) * 0.02)
        else:
            params[key] = jnp.ones(shape, jnp.float32) if kind == "norm" else jnp.zeros(shape, jnp.float32)
    fixed = {k: jnp.asarray(v) for k, v in fixed_tensors(c, rng).items()}
    schedule = optax.warmup_cosine_decay_schedule(0.0, t["lr"], t["warmup"], t["steps"], t["lr"] * 0.05)
    optimizer = optax.adamw(schedule, weight_decay=0.01)
    state = optimizer.init(params)

    def cross_entropy(logits, targets):
        return -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1).mean()

    def loss_fn(p, batch):
        hidden = jax.vmap(lambda seq: hidden_states(jax, jnp, c, p, fixed, seq[:-1]))(batch)
        loss = cross_entropy(hidden @ p["output.weight"].T, batch[:, 1:])
        if c.get("nextn"):  # rows 0 .. T-3 of the layer over inputs 0 .. T-2 predict tokens 2 .. T-1
            mtp = jax.vmap(lambda seq, h: mtp_forward(jax, jnp, c, p, fixed, seq[:-1], h))(batch, hidden)
            loss = loss + MTP_LOSS_WEIGHT * cross_entropy(mtp, batch[:, 2:])
        return loss

    @jax.jit
    def step(p, s, batch):
        loss, grads = jax.value_and_grad(loss_fn)(p, batch)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    start, losses = time.time(), []
    for i in range(t["steps"]):
        offsets = rng.integers(0, len(tokens) - t["seq"], t["batch"])
        batch = np.stack([np.concatenate([[bos], tokens[o:o + t["seq"] - 1]]) for o in offsets]).astype(np.int32)
        params, state, loss = step(params, state, jnp.asarray(batch))
        losses.append(float(loss))
        if i % 100 == 0 or i == t["steps"] - 1:
            log(f"{name}: step {i} loss {np.mean(losses[-20:]):.3f} ({time.time() - start:.0f} s)")
    weights = {k: np.asarray(v) for k, v in params.items()}
    weights.update({k: np.asarray(v) for k, v in fixed.items()})
    return weights, float(np.mean(losses[-50:])), time.time() - start


def write(path, c, weights):
    if c["arch"] == "deepseek32":
        overrides = {k: v for k, v in c.items() if k not in ("arch", "nextn")}
        return write_deepseek2(path, shape="v3", dtype="f32", layout="split", n_ctx=N_CTX, weights=weights,
                               indexer=(*INDEXER, N_CTX), nextn=c.get("nextn", False), **overrides)
    if c["arch"] == "deepseek2":
        overrides = {k: v for k, v in c.items() if k != "arch"}
        return write_deepseek2(path, shape="v3", dtype="f32", layout="kv_b", n_ctx=N_CTX, weights=weights, **overrides)
    return write_model(path, arch=c["arch"], dtype="f32", n_embd=c["n_embd"], n_ff=c["n_ff"], n_head=c["n_head"],
                       n_head_kv=c["n_head_kv"], n_layer=c["n_layer"], n_ctx=N_CTX, weights=weights)


def fingerprint(name):
    import jax
    h = hashlib.sha256()
    h.update(open(__file__, "rb").read())
    h.update(jax.__version__.encode())  # another JAX may round the training differently
    h.update(json.dumps([CONFIGS[name], TRAINING, N_CTX], sort_keys=True).encode())
    for d in training_documents():
        h.update(d.encode())
    return h.hexdigest()[:16]


def trained_model(name, out_dir=DEFAULT_OUT, log=lambda m: print(m, file=sys.stderr)):
    """The path of model `name`, trained now unless the cache holds this version."""
    os.makedirs(out_dir, exist_ok=True)
    path, meta_path = os.path.join(out_dir, f"{name}.gguf"), os.path.join(out_dir, f"{name}.json")
    key = fingerprint(name)
    if os.path.exists(path) and os.path.exists(meta_path) and json.load(open(meta_path)).get("fingerprint") == key:
        return path
    tokens, bos = tokenize(training_documents())
    import llama_cpp
    vocab = llama_cpp.Llama(model_path=DEFAULT_VOCAB, vocab_only=True, verbose=False)
    n_vocab = vocab.n_vocab()
    vocab.close()
    log(f"{name}: training on {len(tokens)} tokens")
    weights, loss, seconds = train(name, CONFIGS[name], tokens, bos, n_vocab, log)
    write(path + ".partial", CONFIGS[name], weights)
    os.replace(path + ".partial", path)
    json.dump({"fingerprint": key, "final_loss": loss, "train_seconds": seconds, "tokens": int(len(tokens)),
               "config": CONFIGS[name], "training": TRAINING}, open(meta_path, "w"), indent=1)
    return path


def file_weights(name, out_dir=DEFAULT_OUT):
    """The written file's tensors by name as JAX arrays, MLA's kv_b whole again where the file splits it."""
    import jax.numpy as jnp
    reader = FastGGUFReader(os.path.join(out_dir, f"{name}.gguf"))
    p = {t.name: np.asarray(t.data, np.float32).reshape(tuple(reversed([int(d) for d in t.shape]))) for t in reader.tensors}
    for k_b in [k for k in p if k.endswith("attn_k_b.weight")]:
        v_b = p.pop(k_b.replace("attn_k_b", "attn_v_b"))  # [h, kv_lora, nope] and [h, v, kv_lora]
        p[k_b.replace("attn_k_b", "attn_kv_b")] = np.concatenate([p.pop(k_b).transpose(0, 2, 1), v_b], 1).reshape(-1, v_b.shape[2])
    return {k: jnp.asarray(v) for k, v in p.items()}


def jax_logits(name, tokens, out_dir=DEFAULT_OUT, mtp=False):
    """The forward above on the written file's weights: what llama.cpp must give for the file; with `mtp`, the
    multi-token-prediction layer's logits instead (mtp_forward)."""
    import jax
    import jax.numpy as jnp
    c = CONFIGS[name]
    p = file_weights(name, out_dir)
    fixed = {k: v for k, v in p.items() if k.endswith("exp_probs_b.bias")}
    tokens = jnp.asarray(tokens, jnp.int32)
    if mtp:
        return np.asarray(mtp_forward(jax, jnp, c, p, fixed, tokens, hidden_states(jax, jnp, c, p, fixed, tokens)))
    return np.asarray(forward(jax, jnp, c, p, fixed, tokens))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", choices=sorted(CONFIGS))
    which.add_argument("--tested", action="store_true", help="only the models the tests use (TESTED)")
    args = parser.parse_args()
    for name in [args.only] if args.only else TESTED if args.tested else sorted(CONFIGS):
        print(trained_model(name, args.out))


if __name__ == "__main__":
    main()

"""DeepSeek-V4's forward in numpy, written from ../shared/DEEPSEEK-V32-V4.md
section 2.2 (not from either engine): the teacher-forced logits of one
sequence of a deepseek4 GGUF, in float64. A third opinion beside llama.cpp and
dsinfer, and a way to look at one block's values when the two disagree."""

import math

import numpy as np
import gguf

from fast_gguf_reader import FastGGUFReader


# The mistakes the notes list (section 2.2), each a silent error of 1e-2 or
# more that a test must catch: `mistake` makes the reference commit one.
MISTAKES = ("indexer_rope_neox", "compressor_halves_swapped", "no_inverse_rope", "sinkhorn_once", "mix_transposed",
            "row_rope_at_block_end", "no_sinks", "hash_routing_ignored", "gate_clamped_below")


class Deepseek4Reference:
    def __init__(self, path, mistake=None):
        assert mistake is None or mistake in MISTAKES, mistake
        self.mistake = mistake
        reader = FastGGUFReader(path)
        self.w = {}
        for t in reader.tensors:
            shape = tuple(reversed([int(d) for d in t.shape]))
            data = np.asarray(t.data)
            if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.I32):
                self.w[t.name] = data.reshape(shape)
            else:
                self.w[t.name] = gguf.quants.dequantize(data, t.tensor_type).reshape(shape)
        f = {k: v.contents() for k, v in reader.fields.items() if k.startswith("deepseek4.")}
        g = lambda k, default=None: f.get("deepseek4." + k, default)
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.n_head, self.hd, self.n_rot = g("attention.head_count"), g("attention.key_length"), g("rope.dimension_count")
        self.window, self.ratios = g("attention.sliding_window"), list(g("attention.compress_ratios"))
        self.n_layer = g("block_count")
        self.groups, self.o_rank = g("attention.output_group_count"), g("attention.output_lora_rank")
        self.ih, self.ik, self.top_k = g("attention.indexer.head_count"), g("attention.indexer.key_length"), g("attention.indexer.top_k")
        self.n_used, self.w_scale = g("expert_used_count"), g("expert_weights_scale")
        self.clamp = list(g("swiglu_clamp_exp"))
        self.hash_layers = g("hash_layer_count")
        self.iters, self.hc_eps = g("hyper_connection.sinkhorn_iterations"), g("hyper_connection.epsilon")
        self.base, self.compress_base = g("rope.freq_base", 10000.0), g("attention.compress_rope_freq_base")
        self.yarn = (g("rope.scaling.factor"), g("rope.scaling.original_context_length"),
                     g("rope.scaling.yarn_beta_fast", 32.0), g("rope.scaling.yarn_beta_slow", 1.0)) \
            if g("rope.scaling.type") == "yarn" else None

    # ---- pieces -------------------------------------------------------------------------------
    def rms(self, x, weight=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y * weight if weight is not None else y

    def thetas(self, positions, compressed):
        """[len(positions), n_rot/2] angles: interleaved pairs, YaRN only on compressed layers (magnitude 1)."""
        n = self.n_rot
        base = self.compress_base if compressed else self.base
        i = np.arange(n // 2)
        extrap = np.asarray(positions, np.float64)[:, None] * base ** (-2.0 * i / n)[None, :]
        if not compressed or self.yarn is None:
            return extrap
        factor, orig, beta_fast, beta_slow = self.yarn
        corr = lambda rot: n * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        low, high = max(0.0, math.floor(corr(beta_fast))), min(n - 1.0, math.ceil(corr(beta_slow)))
        ramp = 1 - np.clip((i - low) / max(0.001, high - low), 0, 1)
        return extrap / factor * (1 - ramp) + extrap * ramp

    def rope_tail(self, x, positions, compressed, inverse=False, neox=False):
        """Rotates the last n_rot dims of x [T, ..., D] at positions [T]: neighbouring pairs, or halves (neox)."""
        x = x.copy()
        th = self.thetas(positions, compressed)
        th = th.reshape(th.shape[:1] + (1,) * (x.ndim - 2) + th.shape[1:])
        cos, sin = np.cos(th), np.sin(th) * (-1 if inverse else 1)
        tail = x[..., x.shape[-1] - self.n_rot:]
        first, second = (slice(0, self.n_rot // 2), slice(self.n_rot // 2, None)) if neox else (slice(0, None, 2), slice(1, None, 2))
        a, b = tail[..., first].copy(), tail[..., second].copy()
        tail[..., first], tail[..., second] = a * cos - b * sin, a * sin + b * cos
        return x

    def hc_pre(self, X, prefix):
        """X [T, 4, d] -> (the sublayer's input [T, d], post [T, 4], mix [T, 4 dst, 4 src])."""
        T, hc, d = X.shape
        mu = self.rms(X.reshape(T, hc * d)) @ self.w[prefix + "_fn.weight"].T
        scale, base = self.w[prefix + "_scale.weight"], self.w[prefix + "_base.weight"]
        sig = lambda v: 1 / (1 + np.exp(-v))
        pre = sig(scale[0] * mu[:, :hc] + base[:hc]) + self.hc_eps
        post = 2 * sig(scale[1] * mu[:, hc:2 * hc] + base[hc:2 * hc])
        z = (scale[2] * mu[:, 2 * hc:] + base[2 * hc:]).reshape(T, hc, hc)  # [T, j src, i dst]: i fastest
        m = np.exp(z - z.max(-1, keepdims=True))
        m = m / m.sum(-1, keepdims=True) + self.hc_eps   # softmax over i
        m = m / (m.sum(1, keepdims=True) + self.hc_eps)  # over j, for each i
        for _ in range((1 if self.mistake == "sinkhorn_once" else self.iters) - 1):
            m = m / (m.sum(-1, keepdims=True) + self.hc_eps)
            m = m / (m.sum(1, keepdims=True) + self.hc_eps)
        mix = m if self.mistake == "mix_transposed" else m.transpose(0, 2, 1)  # [T, i dst, j src]
        return np.einsum("ti,tid->td", pre, X), post, mix

    def compress(self, u, b_prefix, ratio, dim, norm, positions_all):
        """The rows a compressor forms from every token's u [T, d]: [n_rows, dim], roped at their block starts."""
        T = u.shape[0]
        v = u @ self.w[b_prefix + "_kv.weight"].T
        s = u @ self.w[b_prefix + "_gate.weight"].T + self.w[b_prefix + "_ape.weight"][np.arange(T) % ratio]
        rows = []
        for b in range(T // ratio):
            cur = slice(ratio * b, ratio * b + ratio)
            if ratio == 4:
                first, second = (slice(dim, None), slice(0, dim)) if self.mistake == "compressor_halves_swapped" else \
                    (slice(0, dim), slice(dim, None))
                vals = [v[cur, second]]
                scores = [s[cur, second]]
                if b > 0:
                    prev = slice(ratio * b - ratio, ratio * b)
                    vals.insert(0, v[prev, first])
                    scores.insert(0, s[prev, first])
                vals, scores = np.concatenate(vals), np.concatenate(scores)
            else:
                vals, scores = v[cur], s[cur]
            p = np.exp(scores - scores.max(0))
            rows.append((p / p.sum(0) * vals).sum(0))
        rows = self.rms(np.array(rows).reshape(-1, dim), norm)
        start = ratio - 1 if self.mistake == "row_rope_at_block_end" else 0
        return self.rope_tail(rows, [ratio * b + start for b in range(len(rows))], True)

    def attention(self, l, u, tokens):
        T, H, hd, ratio = u.shape[0], self.n_head, self.hd, self.ratios[l]
        b = f"blk.{l}."
        w = self.w
        cq = self.rms(u @ w[b + "attn_q_a.weight"].T, w[b + "attn_q_a_norm.weight"])
        q = self.rms((cq @ w[b + "attn_q_b.weight"].T).reshape(T, H, hd))
        kv = self.rms(u @ w[b + "attn_kv.weight"].T, w[b + "attn_kv_a_norm.weight"])
        pos = np.arange(T)
        q, kv = self.rope_tail(q, pos, ratio != 0), self.rope_tail(kv, pos, ratio != 0)
        comp = None
        if ratio:
            comp = self.compress(u, b + "attn_compressor", ratio, hd, w[b + "attn_compressor_norm.weight"], pos)
        if ratio == 4:
            keys = self.compress(u, b + "indexer_compressor", 4, self.ik, w[b + "indexer_compressor_norm.weight"], pos)
            qi = self.rope_tail((cq @ w[b + "indexer.attn_q_b.weight"].T).reshape(T, self.ih, self.ik), pos, True,
                                neox=self.mistake == "indexer_rope_neox")
            hw = (u @ w[b + "indexer.proj.weight"].T) / math.sqrt(self.ik * self.ih)
        out = np.zeros((T, H, hd))
        sinks = w[b + "attn_sinks.weight"] if self.mistake != "no_sinks" else np.full(H, -np.inf)
        for t in range(T):
            rows = [kv[max(0, t - self.window + 1): t + 1]]
            if ratio:
                visible = (t + 1) // ratio
                chosen = np.arange(visible)
                if ratio == 4 and visible > self.top_k:
                    score = (np.maximum(qi[t] @ keys[:visible].T, 0) * hw[t][:, None]).sum(0)
                    chosen = np.sort(np.argsort(-score, kind="stable")[: self.top_k])
                rows.append(comp[chosen])
            k = np.concatenate(rows)
            s = q[t] @ k.T / math.sqrt(hd)  # [H, n]
            m = np.maximum(s.max(-1), sinks)
            e = np.exp(s - m[:, None])
            out[t] = (e / (e.sum(-1) + np.exp(sinks - m))[:, None]) @ k
        if self.mistake != "no_inverse_rope":
            out = self.rope_tail(out, pos, ratio != 0, inverse=True)
        a = w[b + "attn_output_a.weight"].reshape(self.groups, self.o_rank, -1)
        z = np.einsum("tgi,gri->tgr", out.reshape(T, self.groups, -1), a).reshape(T, -1)
        return z @ w[b + "attn_output_b.weight"].T

    def moe(self, l, u, tokens):
        b = f"blk.{l}."
        w = self.w
        logits = u @ w[b + "ffn_gate_inp.weight"].T
        p = np.sqrt(np.maximum(logits, 0) + np.log1p(np.exp(-np.abs(logits))))
        if l < self.hash_layers and self.mistake != "hash_routing_ignored":
            chosen = w[b + "ffn_gate_tid2eid.weight"][tokens]
        else:
            bias = w.get(b + "exp_probs_b.bias", 0.0)
            chosen = np.argsort(-(p + bias), axis=-1, kind="stable")[:, : self.n_used]
        weights = np.take_along_axis(p, chosen, -1)
        weights = weights / np.maximum(weights.sum(-1, keepdims=True), 6.103515625e-5) * self.w_scale
        limit = self.clamp[l]

        def swiglu(gate, up, down, x):
            g = np.clip(x @ gate.T, -limit, limit) if self.mistake == "gate_clamped_below" else np.minimum(x @ gate.T, limit)
            return (g / (1 + np.exp(-g)) * np.clip(x @ up.T, -limit, limit)) @ down.T

        out = swiglu(w[b + "ffn_gate_shexp.weight"], w[b + "ffn_up_shexp.weight"], w[b + "ffn_down_shexp.weight"], u)
        for t in range(u.shape[0]):
            for e, weight in zip(chosen[t], weights[t]):
                out[t] += weight * swiglu(w[b + "ffn_gate_exps.weight"][e], w[b + "ffn_up_exps.weight"][e],
                                          w[b + "ffn_down_exps.weight"][e], u[t:t + 1])[0]
        return out

    def logits(self, tokens):
        tokens = np.asarray(tokens)
        w = self.w
        X = np.repeat(w["token_embd.weight"][tokens][:, None, :].astype(np.float64), 4, axis=1)
        for l in range(self.n_layer):
            b = f"blk.{l}."
            for prefix, norm, block in (("hc_attn", "attn_norm", self.attention), ("hc_ffn", "ffn_norm", self.moe)):
                x, post, mix = self.hc_pre(X, b + prefix)
                y = block(l, self.rms(x, w[b + norm + ".weight"]), tokens)
                X = post[:, :, None] * y[:, None, :] + np.einsum("tij,tjd->tid", mix, X)
        T = X.shape[0]
        mu = self.rms(X.reshape(T, -1)) @ w["output_hc_fn.weight"].T
        weights = 1 / (1 + np.exp(-(w["output_hc_scale.weight"][0] * mu + w["output_hc_base.weight"]))) + self.hc_eps
        h = np.einsum("ti,tid->td", weights, X)
        return self.rms(h, w["output_norm.weight"]) @ w["output.weight"].T

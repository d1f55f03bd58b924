"""Writes seeded random-weight DeepSeek-V4 (`deepseek4`) GGUF models: four
hyper-connection residual streams mixed by Sinkhorn, attention over a raw
window plus compressed rows (ratio 4 with the lightning indexer's top-k,
ratio 128 all), per-head sinks, the grouped output LoRA, and MoE with
sqrt-softplus scores and hash-routed first layers
(../shared/DEEPSEEK-V32-V4.md sections 1.3, 1.5 and 6: the keys and tensors
llama.cpp reads, numpy shapes the reverse of ggml's).

The hyper-connection bases are drawn wide (sigma 2): with small ones Sinkhorn
makes every mix uniform and a mistake in the streams' orientation would not
show.
"""

import numpy as np
import gguf

from make_model import DEFAULT_VOCAB, add_weight, copy_tokenizer

# llama.cpp's tested toy config (section 6), with the stories260K vocabulary
# so that both engines tokenize the same text, and a SwiGLU clamp of 1 (V4's
# is 10) so that both of its sides act on these small activations.
SHAPE = dict(n_embd=64, n_head=4, head_dim=64, n_rot=16, q_lora_rank=32, o_groups=2, o_lora_rank=16,
             n_expert=4, n_expert_used=2, expert_ff=32, n_shared=1, hash_layers=1,
             indexer_heads=2, indexer_dim=64, indexer_top_k=8, window=16, ratios=[0, 4, 128, 4],
             clamp=1.0, weights_scale=1.5)
# DeepSeek-V4-Flash's attention widths (d 4096, 64 heads of 512 with 64 roped, q LoRA 1024, 8 output
# groups of rank 1024, a window of 128, the indexer's 64 heads of 128 choosing 512 rows; YaRN x16 over
# 65,536 on the compressing layers is write_deepseek4's yarn argument) with 3 layers, one of each kind
# (window only, ratio 4, ratio 128), and 8 experts (6 used, the first layer hash-routed): the attention
# is the model's, the FFN a stand-in.
V4_FLASH_WIDTHS = dict(n_embd=4096, n_head=64, head_dim=512, n_rot=64, q_lora_rank=1024, o_groups=8, o_lora_rank=1024,
                       n_expert=8, n_expert_used=6, expert_ff=2048, n_shared=1, hash_layers=1, indexer_heads=64,
                       indexer_dim=128, indexer_top_k=512, window=128, ratios=[0, 4, 128], clamp=10.0)
HC = 4            # hyper-connection streams (llama.cpp asserts 4)
SINKHORN_ITERS = 20


def write_deepseek4(path, dtype="f32", seed=0, n_ctx=1024, vocab_path=DEFAULT_VOCAB, scale=0.08,
                    yarn=(16.0, 256), expert_dtype=None, **overrides):
    """Writes the model; returns its path. dtype applies to every 2-D weight,
    expert_dtype (default dtype) to the routed experts. yarn: (factor, original
    context) of the compressed layers' RoPE, or None. overrides replace SHAPE's fields."""
    s = dict(SHAPE, **overrides)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "deepseek4")
    n_vocab = copy_tokenizer(writer, vocab_path)
    writer.add_name(f"random-deepseek4-{dtype}")
    p = "deepseek4."
    d, H, hd, n_layer = s["n_embd"], s["n_head"], s["head_dim"], len(s["ratios"])
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(d)
    writer.add_block_count(n_layer)
    writer.add_head_count(H)
    writer.add_head_count_kv(1)
    writer.add_uint32(p + "attention.key_length", hd)
    writer.add_uint32(p + "attention.value_length", hd)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(s["n_rot"])
    if yarn:
        writer.add_string(p + "rope.scaling.type", "yarn")
        writer.add_float32(p + "rope.scaling.factor", yarn[0])
        writer.add_uint32(p + "rope.scaling.original_context_length", yarn[1])
        writer.add_float32(p + "rope.scaling.yarn_beta_fast", 32.0)
        writer.add_float32(p + "rope.scaling.yarn_beta_slow", 1.0)
    writer.add_uint32(p + "attention.q_lora_rank", s["q_lora_rank"])
    writer.add_uint32(p + "attention.sliding_window", s["window"])
    writer.add_uint32(p + "expert_count", s["n_expert"])
    writer.add_uint32(p + "expert_used_count", s["n_expert_used"])
    writer.add_uint32(p + "expert_feed_forward_length", s["expert_ff"])
    writer.add_uint32(p + "expert_shared_count", s["n_shared"])
    writer.add_float32(p + "expert_weights_scale", s["weights_scale"])
    writer.add_bool(p + "expert_weights_norm", True)
    writer.add_uint32(p + "expert_gating_func", 4)
    writer.add_array(p + "swiglu_clamp_exp", [float(s["clamp"])] * n_layer)
    writer.add_uint32(p + "attention.indexer.head_count", s["indexer_heads"])
    writer.add_uint32(p + "attention.indexer.key_length", s["indexer_dim"])
    writer.add_uint32(p + "attention.indexer.top_k", s["indexer_top_k"])
    writer.add_uint32(p + "attention.output_group_count", s["o_groups"])
    writer.add_uint32(p + "attention.output_lora_rank", s["o_lora_rank"])
    writer.add_float32(p + "attention.compress_rope_freq_base", 160000.0)
    writer.add_array(p + "attention.compress_ratios", [int(r) for r in s["ratios"]])
    writer.add_uint32(p + "hyper_connection.count", HC)
    writer.add_uint32(p + "hyper_connection.sinkhorn_iterations", SINKHORN_ITERS)
    writer.add_float32(p + "hyper_connection.epsilon", 1e-6)
    writer.add_uint32(p + "hash_layer_count", s["hash_layers"])

    def matrix(name, *shape, kind=None):
        add_weight(writer, name, (rng.standard_normal(shape) * scale).astype(np.float32), kind or dtype)

    def vector(name, n, mean=1.0, sigma=0.1):
        writer.add_tensor(name, (mean + rng.standard_normal(n) * sigma).astype(np.float32))

    def hyper_connection(prefix, n_mix):
        writer.add_tensor(prefix + "_fn.weight", (rng.standard_normal((n_mix, HC * d)) * 0.1).astype(np.float32))
        writer.add_tensor(prefix + "_base.weight", (rng.standard_normal(n_mix) * 2.0).astype(np.float32))
        writer.add_tensor(prefix + "_scale.weight", (0.5 + rng.random(3)).astype(np.float32))

    matrix("token_embd.weight", n_vocab, d)
    vector("output_norm.weight", d)
    matrix("output.weight", n_vocab, d)
    writer.add_tensor("output_hc_fn.weight", (rng.standard_normal((HC, HC * d)) * 0.1).astype(np.float32))
    writer.add_tensor("output_hc_base.weight", (rng.standard_normal(HC) * 2.0).astype(np.float32))
    writer.add_tensor("output_hc_scale.weight", (0.5 + rng.random(1)).astype(np.float32))
    qr, ig, ik, ff, E = s["q_lora_rank"], s["indexer_heads"], s["indexer_dim"], s["expert_ff"], s["n_expert"]
    for i, ratio in enumerate(s["ratios"]):
        b = f"blk.{i}."
        vector(b + "attn_norm.weight", d)
        writer.add_tensor(b + "attn_sinks.weight", rng.standard_normal(H).astype(np.float32))
        matrix(b + "attn_q_a.weight", qr, d)
        vector(b + "attn_q_a_norm.weight", qr)
        matrix(b + "attn_q_b.weight", H * hd, qr)
        matrix(b + "attn_kv.weight", hd, d)
        vector(b + "attn_kv_a_norm.weight", hd)
        matrix(b + "attn_output_a.weight", s["o_lora_rank"] * s["o_groups"], H * hd // s["o_groups"])
        matrix(b + "attn_output_b.weight", d, s["o_lora_rank"] * s["o_groups"])
        hyper_connection(b + "hc_attn", (2 + HC) * HC)
        hyper_connection(b + "hc_ffn", (2 + HC) * HC)
        if ratio:
            c = 2 if ratio == 4 else 1
            matrix(b + "attn_compressor_kv.weight", c * hd, d)
            matrix(b + "attn_compressor_gate.weight", c * hd, d)
            writer.add_tensor(b + "attn_compressor_ape.weight", (rng.standard_normal((ratio, c * hd)) * 0.5).astype(np.float32))
            vector(b + "attn_compressor_norm.weight", hd)
            if ratio == 4:
                matrix(b + "indexer.proj.weight", ig, d)
                matrix(b + "indexer.attn_q_b.weight", ig * ik, qr)
                matrix(b + "indexer_compressor_kv.weight", 2 * ik, d)
                matrix(b + "indexer_compressor_gate.weight", 2 * ik, d)
                writer.add_tensor(b + "indexer_compressor_ape.weight", (rng.standard_normal((ratio, 2 * ik)) * 0.5).astype(np.float32))
                vector(b + "indexer_compressor_norm.weight", ik)
        matrix(b + "ffn_gate_inp.weight", E, d)
        if i < s["hash_layers"]:
            ids = np.stack([rng.permutation(E)[: s["n_expert_used"]] for _ in range(n_vocab)]).astype(np.int32)
            writer.add_tensor(b + "ffn_gate_tid2eid.weight", ids)
        else:
            writer.add_tensor(b + "exp_probs_b.bias", (rng.standard_normal(E) * 0.05).astype(np.float32))
        vector(b + "ffn_norm.weight", d)
        experts = expert_dtype or dtype
        for name, shape in (("gate", (E, ff, d)), ("up", (E, ff, d)), ("down", (E, d, ff))):
            add_weight(writer, f"{b}ffn_{name}_exps.weight", (rng.standard_normal(shape) * scale * 4).astype(np.float32), experts)
        sf = ff * s["n_shared"]
        matrix(b + "ffn_gate_shexp.weight", sf, d)
        matrix(b + "ffn_up_shexp.weight", sf, d)
        matrix(b + "ffn_down_shexp.weight", d, sf)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

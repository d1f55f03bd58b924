"""Writes seeded random-weight DeepSeek-V2/V3 (`deepseek2`) GGUF models:
multi-head latent attention and DeepSeekMoE, in either tensor layout that
GGUF converters produce (the combined attn_kv_b, or the per-head attn_k_b and
attn_v_b that llama.cpp's MLA path reads). Both layouts of one seed hold the
same weights. With an indexer, DeepSeek-V3.2 (`deepseek32`): the same layers
plus DeepSeek Sparse Attention's lightning indexer (../shared/DEEPSEEK-V32-V4.md
sections 1.2 and 1.4), in the split layout.
"""

import numpy as np
import gguf

from make_model import DEFAULT_VOCAB, add_weight, copy_tokenizer

# V2-Lite's structure (no q LoRA, softmax gating, two shared experts, one
# leading dense layer) and V3's (q LoRA, sigmoid gating with a selection bias,
# normalised and scaled weights, group-limited routing), at toy sizes.
# llama.cpp tells V2-Lite by its 27 layers (it then expects no q LoRA), so the
# V2-Lite shape keeps them.
SHAPES = {
    "v2lite": dict(n_embd=256, n_head=4, q_lora_rank=0, kv_lora_rank=64, qk_nope=32, qk_rope=32, v_head=32,
                   n_layer=27, leading_dense=1, n_ff=512, n_expert=8, n_expert_used=2, n_shared=2, expert_ff=64,
                   gating=1, weights_norm=False, weights_scale=1.0, n_group=1, n_group_used=1, probs_bias=False),
    "v3": dict(n_embd=256, n_head=4, q_lora_rank=96, kv_lora_rank=64, qk_nope=32, qk_rope=32, v_head=32,
               n_layer=3, leading_dense=1, n_ff=512, n_expert=16, n_expert_used=4, n_shared=1, expert_ff=64,
               gating=2, weights_norm=True, weights_scale=2.5, n_group=4, n_group_used=2, probs_bias=True),
}
# DeepSeek-V3.2's attention widths (its config.json: d 7168, 128 heads, q LoRA 1536, kv LoRA 512; the
# indexer's 64 heads of 128 choosing 2,048 positions, YaRN x40 over 4,096, are write_deepseek2's indexer
# and yarn arguments) with 2 layers (1 dense, 1 MoE) and few, narrower experts: the attention is the
# model's, the FFN a stand-in. Overrides for SHAPES["v3"].
V32_WIDTHS = dict(n_embd=7168, n_head=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope=128, qk_rope=64, v_head=128,
                  n_layer=2, leading_dense=1, n_ff=2048, n_expert=8, n_expert_used=2, n_shared=1, expert_ff=2048,
                  gating=2, weights_norm=True, weights_scale=2.5, n_group=4, n_group_used=2, probs_bias=True)


def write_deepseek2(path, shape="v2lite", dtype="f32", layout="kv_b", seed=0, n_ctx=512, vocab_path=DEFAULT_VOCAB,
                    scale=0.08, yarn=None, weights=None, indexer=None, indexer_dtype=None, nextn=False, nextn_dtype=None, head_dtype=None,
                    **overrides):
    """Writes the model; returns its path. `shape` names a SHAPES entry;
    keyword overrides replace any of its fields. yarn: None or (factor,
    original context, mscale_all_dim), as DeepSeek's configs give them.
    weights: None for seeded random weights, or every tensor by name (kv_b
    as attn_kv_b [n_head * (nope + v_head), kv_lora]; train_models.py).
    indexer: None, or (heads, key length, top_k) for a deepseek32 model; indexer_dtype: its
    matrices' type where not dtype. nextn: a deepseek32 model also carries one multi-token-prediction
    layer, blk.{n_layer}, as llama.cpp's converter keeps DeepSeek-V3.2's: a layer like the others
    plus nextn.eh_proj, enorm, hnorm and shared_head_norm (no embed_tokens or shared_head_head of
    its own: the model's are used); nextn_dtype: its matrices' type where not dtype. head_dtype: the
    output matrix's type where not dtype."""
    s = dict(SHAPES[shape], **overrides)
    rng = np.random.default_rng(seed)
    arch = "deepseek32" if indexer else "deepseek2"
    assert not indexer or layout == "split", "deepseek32 files carry the split attn_k_b/attn_v_b"
    writer = gguf.GGUFWriter(path, arch)
    n_vocab = copy_tokenizer(writer, vocab_path)
    writer.add_name(f"{'trained' if weights is not None else 'random'}-{arch}-{shape}-{dtype}-{layout}")
    p = arch + "."
    nope, rope, v_head, kv_lora = s["qk_nope"], s["qk_rope"], s["v_head"], s["kv_lora_rank"]
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(s["n_embd"])
    assert not nextn or indexer, "the NextN layer is written for deepseek32 files"
    writer.add_block_count(s["n_layer"] + int(nextn))
    if nextn:
        writer.add_uint32(p + "nextn_predict_layers", 1)
    writer.add_feed_forward_length(s["n_ff"])
    writer.add_head_count(s["n_head"])
    writer.add_head_count_kv(s["n_head"] if layout == "kv_b" else 1)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(rope)
    if yarn:
        factor, original, mscale_all_dim = yarn
        writer.add_string(p + "rope.scaling.type", "yarn")
        writer.add_float32(p + "rope.scaling.factor", factor)
        writer.add_uint32(p + "rope.scaling.original_context_length", original)
        writer.add_float32(p + "rope.scaling.yarn_log_multiplier", 0.1 * mscale_all_dim)
    if s["q_lora_rank"]:
        writer.add_uint32(p + "attention.q_lora_rank", s["q_lora_rank"])
    writer.add_uint32(p + "attention.kv_lora_rank", kv_lora)
    if layout == "kv_b":
        writer.add_uint32(p + "attention.key_length", nope + rope)
        writer.add_uint32(p + "attention.value_length", v_head)
    else:
        writer.add_uint32(p + "attention.key_length", kv_lora + rope)
        writer.add_uint32(p + "attention.value_length", kv_lora)
        writer.add_uint32(p + "attention.key_length_mla", nope + rope)
        writer.add_uint32(p + "attention.value_length_mla", v_head)
    writer.add_uint32(p + "leading_dense_block_count", s["leading_dense"])
    writer.add_uint32(p + "expert_count", s["n_expert"])
    writer.add_uint32(p + "expert_used_count", s["n_expert_used"])
    writer.add_uint32(p + "expert_shared_count", s["n_shared"])
    writer.add_uint32(p + "expert_feed_forward_length", s["expert_ff"])
    writer.add_float32(p + "expert_weights_scale", s["weights_scale"])
    writer.add_bool(p + "expert_weights_norm", s["weights_norm"])
    writer.add_uint32(p + "expert_gating_func", s["gating"])
    if s["n_group"] > 1:
        writer.add_uint32(p + "expert_group_count", s["n_group"])
        writer.add_uint32(p + "expert_group_used_count", s["n_group_used"])
    if indexer:
        writer.add_uint32(p + "attention.indexer.head_count", indexer[0])
        writer.add_uint32(p + "attention.indexer.key_length", indexer[1])
        writer.add_uint32(p + "attention.indexer.top_k", indexer[2])

    def dtype_of(name):
        if head_dtype and name == "output.weight":
            return head_dtype
        return nextn_dtype if nextn_dtype and name.startswith(f"blk.{s['n_layer']}.") else dtype

    def weight(name, *shape_, dtype_=None):
        data = weights[name] if weights is not None else rng.standard_normal(shape_, dtype=np.float32) * np.float32(scale)
        add_weight(writer, name, np.asarray(data, np.float32).reshape(shape_), dtype_ or dtype_of(name))

    def vector(name, n, around=1.0, spread=0.1):
        data = weights[name] if weights is not None else around + rng.standard_normal(n) * spread
        writer.add_tensor(name, np.asarray(data, np.float32).reshape(n))

    n_embd, n_head = s["n_embd"], s["n_head"]
    weight("token_embd.weight", n_vocab, n_embd)
    vector("output_norm.weight", n_embd)
    weight("output.weight", n_vocab, n_embd)
    for i in range(s["n_layer"] + int(nextn)):
        b = f"blk.{i}."
        if i == s["n_layer"]:
            weight(b + "nextn.eh_proj.weight", n_embd, 2 * n_embd)
            vector(b + "nextn.enorm.weight", n_embd)
            vector(b + "nextn.hnorm.weight", n_embd)
            vector(b + "nextn.shared_head_norm.weight", n_embd)
        vector(b + "attn_norm.weight", n_embd)
        if s["q_lora_rank"]:
            weight(b + "attn_q_a.weight", s["q_lora_rank"], n_embd)
            vector(b + "attn_q_a_norm.weight", s["q_lora_rank"])
            weight(b + "attn_q_b.weight", n_head * (nope + rope), s["q_lora_rank"])
        else:
            weight(b + "attn_q.weight", n_head * (nope + rope), n_embd)
        weight(b + "attn_kv_a_mqa.weight", kv_lora + rope, n_embd)
        vector(b + "attn_kv_a_norm.weight", kv_lora)
        kv_b = (np.asarray(weights[b + "attn_kv_b.weight"], np.float32).reshape(n_head, nope + v_head, kv_lora)
                if weights is not None else rng.standard_normal((n_head, nope + v_head, kv_lora)) * scale)
        if layout == "kv_b":
            add_weight(writer, b + "attn_kv_b.weight", kv_b.reshape(n_head * (nope + v_head), kv_lora), dtype_of(b))
        else:
            add_weight(writer, b + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)), dtype_of(b))
            add_weight(writer, b + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]), dtype_of(b))
        weight(b + "attn_output.weight", n_embd, n_head * v_head)
        vector(b + "ffn_norm.weight", n_embd)
        if indexer:
            index_heads, index_dim, _ = indexer
            vector(b + "indexer.k_norm.weight", index_dim)
            vector(b + "indexer.k_norm.bias", index_dim, 0.0, 0.1)
            weight(b + "indexer.proj.weight", index_heads, n_embd, dtype_=indexer_dtype)
            weight(b + "indexer.attn_k.weight", index_dim, n_embd, dtype_=indexer_dtype)
            weight(b + "indexer.attn_q_b.weight", index_heads * index_dim, s["q_lora_rank"], dtype_=indexer_dtype)
        if i < s["leading_dense"]:
            weight(b + "ffn_gate.weight", s["n_ff"], n_embd)
            weight(b + "ffn_up.weight", s["n_ff"], n_embd)
            weight(b + "ffn_down.weight", n_embd, s["n_ff"])
            continue
        n_expert, ff = s["n_expert"], s["expert_ff"]
        router = weights[b + "ffn_gate_inp.weight"] if weights is not None else rng.standard_normal((n_expert, n_embd))
        add_weight(writer, b + "ffn_gate_inp.weight", np.asarray(router, np.float32).reshape(n_expert, n_embd), "f32")
        if s["probs_bias"]:
            vector(b + "exp_probs_b.bias", n_expert, 0.0, 0.05)
        weight(b + "ffn_gate_exps.weight", n_expert, ff, n_embd)
        weight(b + "ffn_up_exps.weight", n_expert, ff, n_embd)
        weight(b + "ffn_down_exps.weight", n_expert, n_embd, ff)
        if s["n_shared"]:
            weight(b + "ffn_gate_shexp.weight", ff * s["n_shared"], n_embd)
            weight(b + "ffn_up_shexp.weight", ff * s["n_shared"], n_embd)
            weight(b + "ffn_down_shexp.weight", n_embd, ff * s["n_shared"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

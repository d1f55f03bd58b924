"""Writes seeded random-weight GGUF decoder models (llama, qwen2) for tests and benchmarks.

The tokenizer section is copied key by key from a real vocabulary file so that
llama.cpp and dsinfer read the same vocabulary. Weight types the `gguf` package
cannot write (the K-quants) are made with llama.cpp's own quantizer from an F16 file.
"""

import argparse
import os
import tempfile

import numpy as np
import gguf
from fast_gguf_reader import FastGGUFReader

GQ = gguf.GGMLQuantizationType
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "fixtures")
DEFAULT_VOCAB = os.path.join(FIXTURES, "models", "stories260K.gguf")

WRITABLE = {"f32": GQ.F32, "f16": GQ.F16, "bf16": GQ.BF16, "q8_0": GQ.Q8_0, "q4_0": GQ.Q4_0,
            "q4_1": GQ.Q4_1, "q5_0": GQ.Q5_0, "q5_1": GQ.Q5_1, "mxfp4": GQ.MXFP4}
# Types only llama.cpp's quantizer writes: name -> llama_ftype.
LLAMA_FTYPES = {"q4_k": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q5_k": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
                "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}


def synthetic_tokenizer(writer):
    """A small SentencePiece vocabulary: specials, the 256 byte tokens, and a few pieces."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    for word in "▁ e t a o i n s r h l d ▁the ▁a ▁and ▁to ▁of ▁in ▁is ▁it ▁was ▁fox ▁dog".split():
        pieces.append(word)
        types.append(1)
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", pieces)
    writer.add_array("tokenizer.ggml.scores", [0.0] * 259 + [-float(i) for i in range(len(pieces) - 259)])
    writer.add_array("tokenizer.ggml.token_type", types)
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    return len(pieces)


def copy_fields(reader, writer, keep, replace=None):
    """Copies the metadata keys `keep(key)` accepts from a GGUFReader to a
    GGUFWriter, with values in `replace` (key -> value) substituted."""
    replace = replace or {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or not keep(key):
            continue
        value = replace.get(key, field.contents())
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(key, value)
        elif kind == gguf.GGUFValueType.BOOL:
            writer.add_bool(key, value)
        elif kind == gguf.GGUFValueType.FLOAT32:
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, int(value))


def copy_tokenizer(writer, vocab_path):
    if not os.path.exists(vocab_path):
        return synthetic_tokenizer(writer)
    reader = FastGGUFReader(vocab_path)
    copy_fields(reader, writer, lambda key: key.startswith("tokenizer."))
    return len(reader.fields["tokenizer.ggml.tokens"].data)


def add_weight(writer, name, data, dtype):
    """Adds a float32 array (any rank, rows along the last axis) in dtype.
    "TYPE@f32": the array rounded to TYPE and stored as f32 (the type's
    weights without the activation rounding its matrix products do)."""
    if dtype.endswith("@f32"):
        qtype = WRITABLE[dtype[:-len("@f32")]]
        rounded = gguf.quants.dequantize(gguf.quants.quantize(data.astype(np.float32), qtype), qtype)
        writer.add_tensor(name, rounded.astype(np.float32).reshape(data.shape))
        return
    qtype = WRITABLE[dtype]
    if qtype == GQ.F32:
        writer.add_tensor(name, data.astype(np.float32))
    elif qtype == GQ.F16:
        writer.add_tensor(name, data.astype(np.float16))
    else:
        packed = gguf.quants.quantize(data.astype(np.float32), qtype)
        writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)


def write_model(path, arch="llama", dtype="f32", n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_layer=2,
                n_ctx=512, seed=0, vocab_path=DEFAULT_VOCAB, rope_base=10000.0, tied_output=False, scale=0.08,
                rope_scaling=None, weights=None):
    """Writes the model; returns its path. dtype applies to every 2-D weight.
    rope_scaling: None or (type, factor, original context length); type "llama3" is Llama 3's
    (R1-Distill-Llama's): no scaling keys, a rope_freqs.weight tensor of per-pair divisors.
    weights: None for seeded random weights, or every tensor by name (trained ones, train_models.py)."""
    if dtype in LLAMA_FTYPES:
        with tempfile.TemporaryDirectory() as tmp:
            f16_path = os.path.join(tmp, "f16.gguf")
            write_model(f16_path, arch, "f16", n_embd, n_ff, n_head, n_head_kv, n_layer, n_ctx, seed, vocab_path,
                        rope_base, tied_output, scale, rope_scaling, weights)
            quantize_with_llama_cpp(f16_path, path, LLAMA_FTYPES[dtype])
        return path
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    n_vocab = copy_tokenizer(writer, vocab_path)
    head_dim = n_embd // n_head
    writer.add_name(f"{'trained' if weights is not None else 'random'}-{arch}-{dtype}")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(rope_base)
    writer.add_rope_dimension_count(head_dim)
    if rope_scaling and rope_scaling[0] == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(head_dim, rope_base, *rope_scaling[1:]))
    elif rope_scaling:
        kind, factor, original = rope_scaling
        writer.add_string(f"{arch}.rope.scaling.type", kind)
        writer.add_float32(f"{arch}.rope.scaling.factor", factor)
        writer.add_uint32(f"{arch}.rope.scaling.original_context_length", original)

    def matrix(name, n_rows, n_cols):
        data = weights[name] if weights is not None else rng.standard_normal((n_rows, n_cols)) * scale
        add_weight(writer, name, np.asarray(data, np.float32).reshape(n_rows, n_cols), dtype)

    def vector(name, n, around=1.0):
        data = weights[name] if weights is not None else around + rng.standard_normal(n) * 0.1
        writer.add_tensor(name, np.asarray(data, np.float32).reshape(n))

    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    matrix("token_embd.weight", n_vocab, n_embd)
    vector("output_norm.weight", n_embd)
    if not tied_output:
        matrix("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}."
        vector(b + "attn_norm.weight", n_embd)
        matrix(b + "attn_q.weight", q_dim, n_embd)
        matrix(b + "attn_k.weight", kv_dim, n_embd)
        matrix(b + "attn_v.weight", kv_dim, n_embd)
        if arch == "qwen2":
            vector(b + "attn_q.bias", q_dim, 0.0)
            vector(b + "attn_k.bias", kv_dim, 0.0)
            vector(b + "attn_v.bias", kv_dim, 0.0)
        matrix(b + "attn_output.weight", n_embd, q_dim)
        vector(b + "ffn_norm.weight", n_embd)
        matrix(b + "ffn_gate.weight", n_ff, n_embd)
        matrix(b + "ffn_up.weight", n_ff, n_embd)
        matrix(b + "ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def llama3_rope_factors(n_rot, base, factor, original, low_freq_factor=1.0, high_freq_factor=4.0):
    """Llama 3's divisors of each pair's angle: 1 for wavelengths under original / high_freq_factor,
    `factor` over original / low_freq_factor, a smooth mix between (Meta's apply_scaling)."""
    freqs = 1.0 / base ** (np.arange(0, n_rot, 2) / n_rot)
    wavelen = 2 * np.pi / freqs
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    mixed = 1.0 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < original / high_freq_factor, 1.0,
                    np.where(wavelen > original / low_freq_factor, factor, mixed)).astype(np.float32)


def quantize_with_llama_cpp(src, dst, ftype_name):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to {ftype_name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--arch", default="llama", choices=["llama", "qwen2"])
    parser.add_argument("--dtype", default="f16", choices=sorted(WRITABLE) + sorted(LLAMA_FTYPES))
    parser.add_argument("--n-embd", type=int, default=256)
    parser.add_argument("--n-ff", type=int, default=512)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-head-kv", type=int, default=2)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--vocab", default=DEFAULT_VOCAB)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_model(args.out, args.arch, args.dtype, args.n_embd, args.n_ff, args.n_head, args.n_head_kv, args.n_layer,
                args.n_ctx, args.seed, args.vocab)
    print(args.out)


if __name__ == "__main__":
    main()

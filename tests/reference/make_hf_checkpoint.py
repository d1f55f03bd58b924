"""Small Hugging Face checkpoints for the converter's tests, written as
transformers writes them (config.json, sharded safetensors with their index,
tokenizer.json and tokenizer_config.json): random weights in bfloat16 with
real configs' keys, GPT-2's vocabulary (from ../shared) under the family's
pre-tokenizer rules, and an FP8 variant made as DeepSeek's releases are (each
128x128 block of a linear weight scaled into e4m3's range, the scale stored
beside it as NAME_scale_inv, quantization_config saying so)."""

import json
import os
import shutil

from conftest import FIXTURES
from fast_gguf_reader import FastGGUFReader

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_V3_SPLITS = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                      r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]
FP8_BLOCK = 128
E4M3_MAX = 448.0


def write_tokenizer(out, family):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    reader = FastGGUFReader(os.path.join(FIXTURES, "vocab", "ggml-vocab-gpt-2.gguf"))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    if family == "qwen2" or family.startswith("deepseek"):  # V3.2's and V4's tokenizers are V3's
        splits = [QWEN2_SPLIT] if family == "qwen2" else DEEPSEEK_V3_SPLITS
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits] +
                                                          [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    config = {"tokenizer_class": "GPT2TokenizerFast", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 1024,
              "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"}
    if family.startswith("deepseek"):
        # DeepSeek's tokenizers add their beginning of sentence through the post-processor's template.
        tokenizer.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", pair="<|endoftext|> $A $B",
                                                                 special_tokens=[("<|endoftext|>", len(tokens) - 1)])
        config["add_bos_token"] = True
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return len(tokens)


def write_checkpoint(out, family, hidden=64, layers=2, shard="2MB", rope_scaling=None):
    """A LlamaForCausalLM, Qwen2ForCausalLM (q/k/v biases), DeepseekV3ForCausalLM or DeepseekV32ForCausalLM
    in bfloat16, in several shards; rope_scaling: a Llama or Qwen2 model's rope_parameters beyond rope_theta."""
    import torch
    import transformers
    os.makedirs(out, exist_ok=True)
    n_vocab = write_tokenizer(out, family)
    settings = dict(vocab_size=n_vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                    rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=n_vocab - 1, eos_token_id=n_vocab - 1)
    if rope_scaling:
        settings.update(rope_parameters=dict(rope_scaling, rope_theta=settings.pop("rope_theta")))
    torch.manual_seed(7)
    if family == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**settings))
    elif family == "deepseek-v3":
        # DeepSeek-V3's shape in small: MLA with a query LoRA, a dense first layer, grouped sigmoid-routed
        # experts with a correction bias and a shared expert, YaRN.
        settings.update(num_key_value_heads=4, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
                        kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16, v_head_dim=24, qk_nope_head_dim=32, n_group=2, topk_group=1,
                        num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True, max_position_embeddings=512,
                        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "beta_fast": 32,
                                      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
        model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**settings))
    elif family == "deepseek-v32":
        # V3's shape plus DeepSeek Sparse Attention's lightning indexer: 16 heads of 64 (the smallest
        # Walsh-Hadamard width llama.cpp rotates by) choosing 16 of the cached tokens, as
        # test_logits_vs_llama_cpp's V3.2 file does. The choice is a step function of the scores, and
        # ties for the last places (rows every head scores 0) llama.cpp orders arbitrarily: choosing 8,
        # two of the Q8_0 file's 48 positions moved by a quarter of the largest logit; choosing 16 or
        # 24, its logits equal llama.cpp's exactly.
        settings.update(num_key_value_heads=4, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
                        kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16, v_head_dim=24, qk_nope_head_dim=32, n_group=2, topk_group=1,
                        num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True, max_position_embeddings=512,
                        index_n_heads=16, index_head_dim=64, index_topk=16,
                        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "beta_fast": 32,
                                      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
        model = transformers.DeepseekV32ForCausalLM(transformers.DeepseekV32Config(**settings))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings))
    with torch.no_grad():  # visible weights: transformers' initialisation leaves norms at 1 and biases at 0
        for p in model.parameters():
            p.normal_(0.0, 0.05 if p.ndim > 1 else 0.5).add_(1.0 if p.ndim == 1 else 0.0)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True, max_shard_size=shard)
    if family == "deepseek-v32":  # keys DeepSeek's V3.2 config.json carries and transformers' class leaves out
        config = json.load(open(os.path.join(out, "config.json")))
        config.update(scoring_func="sigmoid", topk_method="noaux_tc")
        json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    return out


def add_mtp_layer(checkpoint):
    """Appends a multi-token-prediction layer as DeepSeek publishes V3 and V3.2 (transformers writes none):
    model.layers.N (N = num_hidden_layers) holds a whole decoder block (here the last layer's weights)
    beside its embedding, its two input norms, the projection of both into one, and its own head and norm."""
    import torch
    from safetensors.torch import load_file, save_file
    index_path = os.path.join(checkpoint, "model.safetensors.index.json")
    index = json.load(open(index_path))
    config = json.load(open(os.path.join(checkpoint, "config.json")))
    n, d, vocab = config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]
    last = f"model.layers.{n - 1}."
    torch.manual_seed(11)
    layer = {}
    for name, shard in index["weight_map"].items():
        if name.startswith(last):
            layer[f"model.layers.{n}." + name[len(last):]] = load_file(os.path.join(checkpoint, shard))[name]
    b = f"model.layers.{n}."
    for name, shape, mean in (("embed_tokens.weight", (vocab, d), 0.0), ("enorm.weight", (d,), 1.0), ("hnorm.weight", (d,), 1.0),
                              ("eh_proj.weight", (d, 2 * d), 0.0), ("shared_head.norm.weight", (d,), 1.0),
                              ("shared_head.head.weight", (vocab, d), 0.0)):
        layer[b + name] = (torch.randn(shape) * (0.5 if len(shape) == 1 else 0.05) + mean).to(torch.bfloat16)
    shard = "model-mtp.safetensors"
    save_file(layer, os.path.join(checkpoint, shard), metadata={"format": "pt"})
    index["weight_map"].update({name: shard for name in layer})
    json.dump(index, open(index_path, "w"))
    config["num_nextn_predict_layers"] = 1
    json.dump(config, open(os.path.join(checkpoint, "config.json"), "w"), indent=2)
    return checkpoint


def make_fp8(source, out):
    """The checkpoint with its linear weights in e4m3 and a float32 scale per 128x128 block."""
    import torch
    from safetensors.torch import load_file, save_file
    shutil.copytree(source, out, dirs_exist_ok=True)
    index_path = os.path.join(source, "model.safetensors.index.json")
    index = json.load(open(index_path))
    weight_map = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors, written = load_file(os.path.join(source, shard)), {}
        for name, w in tensors.items():
            written[name] = w
            weight_map[name] = shard
            if w.ndim != 2 or "embed_tokens" in name or "lm_head" in name:
                continue
            w = w.float()
            rows, cols = w.shape
            blocks = w.new_zeros((rows + FP8_BLOCK - 1) // FP8_BLOCK, (cols + FP8_BLOCK - 1) // FP8_BLOCK)
            scaled = torch.empty_like(w)
            for i in range(blocks.shape[0]):
                for j in range(blocks.shape[1]):
                    block = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
                    scale = float(block.abs().max()) / E4M3_MAX or 1.0
                    blocks[i, j] = scale
                    scaled[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = block / scale
            written[name] = scaled.to(torch.float8_e4m3fn)
            written[name + "_scale_inv"] = blocks
            weight_map[name + "_scale_inv"] = shard
        save_file(written, os.path.join(out, shard), metadata={"format": "pt"})
    index["weight_map"] = weight_map
    json.dump(index, open(os.path.join(out, "model.safetensors.index.json"), "w"))
    config = json.load(open(os.path.join(source, "config.json")))
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    return out


def e8m0_power(x):
    """The power of two at or above x, as DeepSeek-V4's ue8m0 scales are (a biased exponent byte)."""
    import math
    return 2.0 ** math.ceil(math.log2(x)) if x > 0 else 1.0


def write_deepseek4_checkpoint(out, layers=(0, 4, 128, 4), hidden=64, shard="1MB"):
    """A DeepseekV4ForCausalLM checkpoint as DeepSeek publishes V4-Flash, in small: the
    names of DeepSeek's inference code (layers.N.attn.wq_a, layers.N.ffn.experts.E.w1, ...),
    the attention and shared-expert projections in FP8 e4m3 with a power-of-two e8m0 scale
    per 128x128 block (NAME.scale), the routed experts in FP4 (e2m1 codes two to an int8,
    an e8m0 scale per 32), hyper-connections and the compressors' position biases in
    float32, the rest bfloat16, the hash-routed first layer's token-to-expert table in
    int32, and a multi-token-prediction layer (mtp.0.*) the conversion leaves out.
    make_deepseek4.SHAPE's widths; layers: each layer's compression ratio."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    n_vocab = write_tokenizer(out, "deepseek-v3")
    d, H, hd, rope, q_rank, groups, o_rank = hidden, 4, 64, 16, 32, 2, 16
    # 16 indexer heads, as test_logits_vs_llama_cpp's V4 file has: with 2, rows tie at 0 and llama.cpp orders ties arbitrarily.
    E, used, ff, ig, ik, window, hc = 4, 2, 32, 16, 64, 16, 4
    rng = np.random.default_rng(5)
    tensors = {}

    def normal(*shape, sigma=0.08, mean=0.0):
        return torch.from_numpy((mean + rng.standard_normal(shape) * sigma).astype(np.float32))

    def fp8(name, rows, cols):
        w = normal(rows, cols)
        blocks = torch.empty((rows + FP8_BLOCK - 1) // FP8_BLOCK, (cols + FP8_BLOCK - 1) // FP8_BLOCK)
        scaled = torch.empty_like(w)
        for i in range(blocks.shape[0]):
            for j in range(blocks.shape[1]):
                block = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
                blocks[i, j] = e8m0_power(float(block.abs().max()) / E4M3_MAX)
                scaled[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = block / blocks[i, j]
        tensors[name + ".weight"] = scaled.to(torch.float8_e4m3fn)
        tensors[name + ".scale"] = blocks.to(torch.float8_e8m0fnu)

    def bf16(name, *shape, **kw):
        tensors[name] = normal(*shape, **kw).to(torch.bfloat16)

    def f32(name, *shape, **kw):
        tensors[name] = normal(*shape, **kw)

    def fp4(name, rows, cols):
        codes = rng.integers(0, 16, (rows, cols // 2), dtype=np.uint8) | (rng.integers(0, 16, (rows, cols // 2), dtype=np.uint8) << 4)
        tensors[name + ".weight"] = torch.from_numpy(codes.view(np.int8))
        tensors[name + ".scale"] = torch.from_numpy(rng.integers(122, 127, (rows, cols // 32), dtype=np.uint8)).view(torch.float8_e8m0fnu)

    bf16("embed.weight", n_vocab, d)
    bf16("norm.weight", d, sigma=0.1, mean=1.0)
    bf16("head.weight", n_vocab, d)
    f32("hc_head_fn", hc, hc * d, sigma=0.1)
    f32("hc_head_base", hc, sigma=2.0)
    f32("hc_head_scale", 1, sigma=0.2, mean=1.0)
    for i, ratio in enumerate(layers):
        b = f"layers.{i}."
        bf16(b + "attn_norm.weight", d, sigma=0.1, mean=1.0)
        bf16(b + "ffn_norm.weight", d, sigma=0.1, mean=1.0)
        for part in ("attn", "ffn"):
            f32(b + f"hc_{part}_fn", (2 + hc) * hc, hc * d, sigma=0.1)
            f32(b + f"hc_{part}_base", (2 + hc) * hc, sigma=2.0)
            f32(b + f"hc_{part}_scale", 3, sigma=0.2, mean=1.0)
        f32(b + "attn.attn_sink", H, sigma=1.0)
        fp8(b + "attn.wq_a", q_rank, d)
        bf16(b + "attn.q_norm.weight", q_rank, sigma=0.1, mean=1.0)
        fp8(b + "attn.wq_b", H * hd, q_rank)
        fp8(b + "attn.wkv", hd, d)
        bf16(b + "attn.kv_norm.weight", hd, sigma=0.1, mean=1.0)
        bf16(b + "attn.wo_a.weight", groups * o_rank, H * hd // groups)
        fp8(b + "attn.wo_b", d, groups * o_rank)
        if ratio:
            c = 2 if ratio == 4 else 1
            fp8(b + "attn.compressor.wkv", c * hd, d)
            bf16(b + "attn.compressor.wgate.weight", c * hd, d)
            f32(b + "attn.compressor.ape", ratio, c * hd, sigma=0.5)
            bf16(b + "attn.compressor.norm.weight", hd, sigma=0.1, mean=1.0)
            if ratio == 4:
                fp8(b + "attn.indexer.wq_b", ig * ik, q_rank)
                bf16(b + "attn.indexer.weights_proj.weight", ig, d)
                fp8(b + "attn.indexer.compressor.wkv", 2 * ik, d)
                bf16(b + "attn.indexer.compressor.wgate.weight", 2 * ik, d)
                f32(b + "attn.indexer.compressor.ape", ratio, 2 * ik, sigma=0.5)
                bf16(b + "attn.indexer.compressor.norm.weight", ik, sigma=0.1, mean=1.0)
        bf16(b + "ffn.gate.weight", E, d)
        if i == 0:  # hash-routed: each token's experts from a table (its router bias is unused)
            table = np.stack([rng.permutation(E)[:used] for _ in range(n_vocab)]).astype(np.int32)
            tensors[b + "ffn.gate.tid2eid"] = torch.from_numpy(table)
        f32(b + "ffn.gate.bias", E, sigma=0.05)
        for e in range(E):
            fp4(b + f"ffn.experts.{e}.w1", ff, d)
            fp4(b + f"ffn.experts.{e}.w2", d, ff)
            fp4(b + f"ffn.experts.{e}.w3", ff, d)
        fp8(b + "ffn.shared_experts.w1", ff, d)
        fp8(b + "ffn.shared_experts.w2", d, ff)
        fp8(b + "ffn.shared_experts.w3", ff, d)
    bf16("mtp.0.enorm.weight", d, sigma=0.1, mean=1.0)
    fp8("mtp.0.e_proj", d, d)

    # Shards of about `shard` bytes, with their index.
    limit = int(shard.removesuffix("MB")) << 20
    shards, current, size = [], {}, 0
    for name, t in tensors.items():
        if current and size + t.numel() * t.element_size() > limit:
            shards.append(current)
            current, size = {}, 0
        current[name] = t
        size += t.numel() * t.element_size()
    shards.append(current)
    weight_map = {}
    for k, part in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(part, os.path.join(out, file), metadata={"format": "pt"})
        weight_map.update({name: file for name in part})
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
    config = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": n_vocab, "hidden_size": d,
        "moe_intermediate_size": ff, "num_hidden_layers": len(layers), "num_attention_heads": H, "num_key_value_heads": 1,
        "head_dim": hd, "qk_rope_head_dim": rope, "q_lora_rank": q_rank, "o_groups": groups, "o_lora_rank": o_rank,
        "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": used, "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "max_position_embeddings": 1024,
        "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "compress_ratios": list(layers) + [0],
        "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 256, "beta_fast": 32, "beta_slow": 1},
        "sliding_window": window, "index_n_heads": ig, "index_head_dim": ik, "index_topk": 8, "hc_mult": hc,
        "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_hash_layers": 1, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": n_vocab - 1, "eos_token_id": n_vocab - 1,
        "torch_dtype": "bfloat16", "expert_dtype": "fp4",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
                                "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    return out

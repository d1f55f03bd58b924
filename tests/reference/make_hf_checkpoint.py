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

import gguf

from conftest import FIXTURES

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_V3_SPLITS = [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                      r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]
FP8_BLOCK = 128
E4M3_MAX = 448.0


def write_tokenizer(out, family):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    reader = gguf.GGUFReader(os.path.join(FIXTURES, "vocab", "ggml-vocab-gpt-2.gguf"))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    if family in ("qwen2", "deepseek-v3"):
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


def write_checkpoint(out, family, hidden=64, layers=2, shard="2MB"):
    """A LlamaForCausalLM, Qwen2ForCausalLM (q/k/v biases) or DeepseekV3ForCausalLM in bfloat16, in several shards."""
    import torch
    import transformers
    os.makedirs(out, exist_ok=True)
    n_vocab = write_tokenizer(out, family)
    settings = dict(vocab_size=n_vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                    rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=n_vocab - 1, eos_token_id=n_vocab - 1)
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
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings))
    with torch.no_grad():  # visible weights: transformers' initialisation leaves norms at 1 and biases at 0
        for p in model.parameters():
            p.normal_(0.0, 0.05 if p.ndim > 1 else 0.5).add_(1.0 if p.ndim == 1 else 0.0)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True, max_shard_size=shard)
    return out


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

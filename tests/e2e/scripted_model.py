"""Writes a "scripted" GGUF model: whatever the prompt, greedy decoding (and
sampling, the margin is hundreds of logits) emits a chosen sequence of tokens
and then the end of sequence. It lets the server be tested on exact outputs
(tool-call formats) without a trained model.

How: the vocabulary is SentencePiece's specials and 256 byte tokens, plus one
user-defined token per piece of the script. Embeddings are one-hot, every
attention and feed-forward weight is zero (each layer adds nothing to the
residual), so the logits at a position depend only on its own token; the
output matrix maps each token to its successor: any prompt token to the first
piece, each piece to the next, the last piece to </s>."""

import numpy as np
import gguf


def write_scripted_model(path, pieces, chat_template, n_embd=512):
    specials = ["<unk>", "<s>", "</s>"]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + list(pieces)
    types = [2, 3, 3] + [6] * 256 + [4] * len(pieces)
    n_vocab = len(tokens)
    assert n_vocab <= n_embd, "one-hot embeddings need n_embd >= the vocabulary"
    first_piece, eos = 259, 2

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("scripted")
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.scores", [0.0] * n_vocab)
    writer.add_array("tokenizer.ggml.token_type", types)
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", eos)
    writer.add_string("tokenizer.chat_template", chat_template)
    n_head, n_ff = 4, 64
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(n_embd // n_head)

    embedding = np.zeros((n_vocab, n_embd), np.float32)
    embedding[np.arange(n_vocab), np.arange(n_vocab)] = 1.0
    successor = np.full(n_vocab, first_piece)
    successor[first_piece:first_piece + len(pieces) - 1] = np.arange(first_piece + 1, first_piece + len(pieces))
    successor[first_piece + len(pieces) - 1] = eos
    successor[eos] = eos
    output = np.zeros((n_vocab, n_embd), np.float32)
    output[successor, np.arange(n_vocab)] = 10.0  # logit ~ 10 * sqrt(n_embd) for the successor, 0 for the rest
    zeros = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    writer.add_tensor("token_embd.weight", embedding)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("output.weight", output)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", zeros(n_embd, n_embd))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", zeros(n_ff, n_embd))
    writer.add_tensor("blk.0.ffn_up.weight", zeros(n_ff, n_embd))
    writer.add_tensor("blk.0.ffn_down.weight", zeros(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def serve_scripted(directory, template, pieces, name, *args):
    """`dsinfer serve` of a scripted model writing `pieces` under the shared
    fixture template `template` (a file name), served as `name`."""
    import os
    from server_process import ServerProcess, ROOT
    source = open(os.path.join(ROOT, "..", "shared", "fixtures", "chat-templates", template), encoding="utf-8").read()
    path = write_scripted_model(os.path.join(str(directory), "model.gguf"), pieces, source)
    return ServerProcess("--ctx-size", "2048", "--served-model-name", name, *args, model=path)

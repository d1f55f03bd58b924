"""Writes small well-formed GGUF files as seeds for the fuzz smoke."""

import sys

import numpy as np
import gguf


def main(out_dir):
    w = gguf.GGUFWriter(f"{out_dir}/seed_model.gguf", "llama")
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "ab", "Ġ"])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.add_array("tokenizer.ggml.token_type", [1, 1, 1, 1])
    w.add_array("nested", [[1, 2], [3]])
    w.add_tensor("token_embd.weight", np.ones((4, 32), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])

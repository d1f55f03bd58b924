"""What structured output costs per generated token, beside the decode step
it rides on, at the vocabulary sizes of the mission's models: 32,000 (Llama 2
/ R1-era SentencePiece, llama-spm), 102,400 (deepseek-llm) and 129,280
(DeepSeek-V3's count: deepseek-llm plus synthetic pieces, each two of its
tokens joined, so the trie grows as a real larger vocabulary's would).

Each model is random-weight Q8_0 with one shape (below; a real 7B model's
decode step is several times longer, so the ratio here is pessimistic).
`dsinfer bench --json-schema` generates under the schema's grammar, then as
many tokens unconstrained, in the same process, and prints the table row.

Usage: python3 bench/grammar_mask_cost.py [--models DIR] [-n 256] [-r 4]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import gguf
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from make_model import FIXTURES, copy_fields, write_model  # noqa: E402

SHAPE = dict(n_embd=2048, n_ff=5632, n_head=32, n_head_kv=4, n_layer=4, n_ctx=2048)
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["id", "name", "tags", "score", "status", "address"],
          "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 64},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 4},
                         "score": {"type": "number"}, "status": {"enum": ["active", "suspended", "closed"]},
                         "address": {"type": "object", "additionalProperties": False, "required": ["city", "zip"],
                                     "properties": {"city": {"type": "string", "maxLength": 32},
                                                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}


def extended_vocab(source, target_size, path):
    """A vocab file: the source's tokenizer, padded to target_size with joined pairs of its normal tokens."""
    reader = gguf.GGUFReader(source)
    tokens = [bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
              for i in reader.fields["tokenizer.ggml.tokens"].data]
    types = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in reader.fields["tokenizer.ggml.token_type"].data]
    normal = [t for t, k in zip(tokens, types) if k == 1 and len(t) > 1]
    rng = np.random.default_rng(0)
    seen = set(tokens)
    while len(tokens) < target_size:
        piece = normal[rng.integers(len(normal))] + normal[rng.integers(len(normal))]
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(1)
    writer = gguf.GGUFWriter(path, "llama")
    copy_fields(reader, writer, lambda k: k.startswith("tokenizer.") and k not in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                                                                    "tokenizer.ggml.scores"))
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.token_type", types)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(tempfile.gettempdir(), "dsinfer-grammar-bench"))
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("-r", type=int, default=4)
    args = parser.parse_args()
    os.makedirs(args.models, exist_ok=True)
    vocab_dir = os.path.join(FIXTURES, "vocab")
    vocabs = {"32K llama-spm": os.path.join(vocab_dir, "ggml-vocab-llama-spm.gguf"),
              "102K deepseek-llm": os.path.join(vocab_dir, "ggml-vocab-deepseek-llm.gguf")}
    big = os.path.join(args.models, "vocab-129k.gguf")
    if not os.path.exists(big):
        extended_vocab(vocabs["102K deepseek-llm"], 129280, big)
    vocabs["129K deepseek-llm + pairs"] = big
    schema_path = os.path.join(args.models, "schema.json")
    with open(schema_path, "w") as f:
        json.dump(SCHEMA, f)
    dsinfer = os.environ.get("DSINFER", os.path.join(ROOT, "build", "dsinfer"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model shape {SHAPE}, Q8_0")
    print(f"schema: {json.dumps(SCHEMA)}\n")
    header = None
    for name, vocab in vocabs.items():
        model = os.path.join(args.models, f"model-{os.path.basename(vocab)}-q8.gguf")
        if not os.path.exists(model):
            write_model(model, dtype="q8_0", vocab_path=vocab, **SHAPE)
        out = subprocess.run([dsinfer, "bench", "-m", model, "--json-schema", schema_path, "-n", str(args.n), "-r", str(args.r)],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()
        if header is None:
            header = out[:2]
            print("| vocabulary " + header[0])
            print("|---" + header[1])
        print(f"| {name} " + out[2])


if __name__ == "__main__":
    main()

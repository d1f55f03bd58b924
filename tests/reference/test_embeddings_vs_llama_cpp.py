"""POST /v1/embeddings against llama.cpp's own embeddings of the same file
(llama-cpp-python with embedding=True, the same pooling, normalised): last
token and mean pooling, several inputs in one request, float and base64.
F32 stories260K with an f32 KV cache: the hidden states agree as its logits do
(1e-3, test_logits_vs_llama_cpp.py), and normalising keeps that bound."""

import base64
import os
import struct
import sys

import numpy as np
import openai
import pytest

from conftest import FIXTURES

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e"))
from server_process import ServerProcess  # noqa: E402

STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")
TEXTS = ["Once upon a time, there was a little girl named Lily.", "The cat sat on the mat.", "Tom"]


def llama_cpp_embeddings(pooling):
    import llama_cpp
    kind = {"last": llama_cpp.LLAMA_POOLING_TYPE_LAST, "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN}[pooling]
    llm = llama_cpp.Llama(model_path=STORIES, embedding=True, pooling_type=kind, n_ctx=256, verbose=False, n_threads=2,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    out = [np.array(llm.embed(text, normalize=True), dtype=np.float64) for text in TEXTS]
    llm.close()
    return out


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_embeddings_match_llama_cpp(pooling):
    server = ServerProcess("--ctx-size", "256", "--kv-cache-dtype", "f32", "--embedding-pooling", pooling)
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        reply = client.embeddings.create(model="stories260K", input=TEXTS)
        ours = [np.array(d.embedding, dtype=np.float64) for d in sorted(reply.data, key=lambda d: d.index)]
        raw = client.embeddings.with_raw_response.create(model="stories260K", input=TEXTS[0], encoding_format="base64")
        packed = raw.http_response.json()["data"][0]["embedding"]
        floats = np.array(struct.unpack(f"<{len(ours[0])}f", base64.b64decode(packed)), dtype=np.float64)
        assert np.allclose(floats, ours[0], atol=0, rtol=0), "base64 holds the same float32 values"
        reference = llama_cpp_embeddings(pooling)
        for text, a, b in zip(TEXTS, ours, reference):
            error = np.abs(a - b).max()
            print(f"{pooling} {text[:20]!r}: max abs difference {error:.2e}, norm {np.linalg.norm(a):.6f}")
            assert abs(np.linalg.norm(a) - 1) < 1e-5
            assert error <= 1e-3
        assert reply.usage.prompt_tokens > len(TEXTS)
    finally:
        server.stop()


def test_dimensions_other_than_the_models_are_refused():
    server = ServerProcess("--ctx-size", "256")
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as error:
            client.embeddings.create(model="stories260K", input="x", dimensions=8)
        assert "dimensions" in str(error.value)
        for bad in ([], [""], [1, "a"]):
            with pytest.raises(openai.BadRequestError):
                client.embeddings.create(model="stories260K", input=bad)
    finally:
        server.stop()

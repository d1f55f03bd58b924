"""llama.cpp (through llama-cpp-python) as the reference implementation."""

import numpy as np


def llama_cpp_logits(model_path, tokens, kv="f32", n_threads=2):
    """Teacher-forced logits [len(tokens), n_vocab] from llama.cpp, one batch.

    kv: the KV cache type, "f32", "f16" (llama.cpp's default) or "q8_0"
    (which llama.cpp runs only with flash attention, for the quantized V)."""
    import llama_cpp
    kwargs = dict(model_path=model_path, n_ctx=max(64, len(tokens) + 8), n_batch=len(tokens) + 8,
                  n_ubatch=len(tokens) + 8, logits_all=True, n_threads=n_threads, n_threads_batch=n_threads,
                  verbose=False, flash_attn=(kv == "q8_0"))
    if kv != "f16":
        ggml_type = {"f32": llama_cpp.GGML_TYPE_F32, "q8_0": llama_cpp.GGML_TYPE_Q8_0}[kv]
        kwargs.update(type_k=ggml_type, type_v=ggml_type)
    llm = llama_cpp.Llama(**kwargs)
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    llm.close()
    return logits


def llama_cpp_greedy(model_path, prompt, n_predict):
    """Greedy continuation token ids of `prompt` from llama.cpp."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=512, verbose=False, n_threads=2)
    tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    out = []
    for token in llm.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0):
        if token == llm.token_eos() or len(out) >= n_predict:
            break
        out.append(token)
    llm.close()
    return tokens, out

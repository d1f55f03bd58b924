"""The AMX tiles against the VNNI ones on whole models, bit for bit.

`dsinfer logits` runs a 48-token prompt in one step twice: with the default kernels (on a CPU with AMX,
every matrix's whole tiles of 16 tokens, the routed experts' included, go through AMX) and with
DSINFER_ISA=avx512 (the VNNI tiles throughout; the AVX2 ones for the K types). Every block's integer
sum is exact and its float part the same operations in both, so the logits must be equal to the bit, on
every family and every int8-product type that has AMX tiles (Q8_0, Q4_0, MXFP4 experts, W8A8, and the
K types of Q4_K_M and Q5_K_M files: Q4_K, Q5_K, Q6_K). Where the CPU has no AMX, or
the kernel refuses the process the tile state, the tests skip and say so: nothing is compared there.
"""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, ROOT
from make_model import write_model

DSINFER = os.environ.get("DSINFER_BIN", os.path.join(ROOT, "build", "dsinfer"))
STORIES = os.path.join(FIXTURES, "models", "stories260K.gguf")
TOKENS = [1] + [int(t) for t in np.random.default_rng(3).integers(3, 250, 47)]


def run(*args, isa=None):
    env = dict(os.environ, DSINFER_ISA=isa) if isa else dict(os.environ)
    result = subprocess.run([DSINFER, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"dsinfer {' '.join(map(str, args))}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def amx():
    backend = json.loads(run("bench", "-m", STORIES, "-p", "1", "-n", "0", "-r", "1", "-o", "json"))[0]["backend"]
    if "(amx," not in backend:
        pytest.skip(f"not run: no AMX (the CPU backend runs {backend})")


def write(kind, path):
    from make_deepseek2 import write_deepseek2
    from make_deepseek4 import write_deepseek4
    if kind in ("llama_q8_0", "llama_q4_0", "qwen2_q8_0", "llama_q4_k", "llama_q5_k"):
        arch, dtype = kind.split("_", 1)
        write_model(path, arch=arch, dtype=dtype, seed=5)
    elif kind == "deepseek2_q8_0":
        write_deepseek2(path, shape="v3", dtype="q8_0", layout="split", seed=5)
    elif kind == "deepseek32_q8_0":
        write_deepseek2(path, shape="v3", dtype="q8_0", layout="split", seed=5, n_ctx=1024, indexer=(16, 64, 16),
                        yarn=(4.0, 128, 0.707))
    elif kind == "deepseek4_mxfp4":
        write_deepseek4(path, dtype="q8_0", expert_dtype="mxfp4", seed=5, indexer_heads=16, clamp=10.0)
    elif kind == "llama_w8a8":  # every linear layer of the blocks in INT8 (stories260K's widths are not whole tiles)
        write_model(path + ".f16", arch="llama", dtype="f16", seed=5)
        policy = path + ".policy"
        with open(policy, "w") as f:
            f.write("blk.* W8A8\n")
        run("quantize", "-m", path + ".f16", "-o", path, "--type", "W8A8", "--policy", policy)


@pytest.mark.parametrize("kind", ["llama_q8_0", "llama_q4_0", "qwen2_q8_0", "llama_q4_k", "llama_q5_k", "deepseek2_q8_0",
                                  "deepseek32_q8_0", "deepseek4_mxfp4", "llama_w8a8"])
def test_amx_logits_equal_vnni_logits_bit_for_bit(amx, tmp_path, kind):
    path = str(tmp_path / f"{kind}.gguf")
    write(kind, path)
    logits = {}
    for isa in ("amx", "avx512"):
        out = str(tmp_path / f"{kind}_{isa}.npy")
        run("logits", "-m", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out, isa=isa)
        logits[isa] = np.load(out)
    differing = int((logits["amx"] != logits["avx512"]).sum())
    print(f"{kind}: {differing} of {logits['amx'].size} logits differ between the AMX and the VNNI tiles")
    assert differing == 0

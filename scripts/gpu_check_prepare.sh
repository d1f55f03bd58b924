#!/usr/bin/env bash
# Prepares, on a machine without a GPU, what scripts/gpu_check.sh needs on one
# that has it and can reach nothing: .gpucheck/ (git-ignored) with the Debian
# packages the build needs that the GPU image lacks (PCRE2, Boost headers,
# SQLite, pkgconf), the wheel of the `gguf` package, the vocabulary the speed
# models take, and small random models of every architecture and weight type.
# Then one device call, carrying .gpucheck:
#   bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpucheck
rm -rf "$out" && mkdir -p "$out/debs" "$out/wheels" "$out/models"
(cd "$out/debs" && apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libboost1.81-dev \
  libsqlite3-dev libsqlite3-0 pkgconf pkgconf-bin libpkgconf3)
python3 -m pip download -q --no-deps --only-binary=:all: -d "$out/wheels" gguf==0.19.0
cp ../shared/fixtures/vocab/ggml-vocab-llama-spm.gguf ../shared/fixtures/models/stories260K.gguf "$out/models/"
PYTHONPATH=tests/reference python3 - "$out/models" <<'PY'
import os, sys
from make_model import write_model
from make_deepseek2 import write_deepseek2
out = sys.argv[1]
for dtype in ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]:
    write_model(os.path.join(out, f"llama_{dtype}.gguf"), arch="llama", dtype=dtype, seed=3)
for dtype in ["f32", "q8_0"]:
    write_model(os.path.join(out, f"qwen2_{dtype}.gguf"), arch="qwen2", dtype=dtype, seed=4)
# DeepSeek-V3's layout (q LoRA, kv_b, sigmoid gating in groups with a selection bias) and V2-Lite's
# split k_b/v_b in 3 layers, V3.2 and V4 (below): with the tree, 63.4 MB of the 64 MiB (67.1 MB) a device call carries.
for dtype in ["f16", "q8_0"]:
    write_deepseek2(os.path.join(out, f"deepseek2v3_{dtype}.gguf"), shape="v3", dtype=dtype, seed=5)
write_deepseek2(os.path.join(out, "deepseek2v2lite_q8_0.gguf"), shape="v2lite", dtype="q8_0", layout="split", seed=6, n_layer=3)
# DeepSeek-V3.2: V3's layers with the lightning indexer, 16 of the 48 positions picked (as the reference test's Q8_0 file).
write_deepseek2(os.path.join(out, "deepseek32_q8_0.gguf"), shape="v3", dtype="q8_0", layout="split", seed=7, n_ctx=512,
                indexer=(16, 64, 16), yarn=(4.0, 128, 0.707))
# DeepSeek-V4 as the reference test writes it (layers compressing by 0, 4, 128, 4; 16 indexer heads choosing 8): in f32
# (gpu_check.sh gives it 300 tokens, so ratio-128 rows form and ratio-4 rows outnumber the choice), and as
# V4-Flash is published, Q8_0 with MXFP4 experts.
from make_deepseek4 import write_deepseek4
write_deepseek4(os.path.join(out, "deepseek4_f32.gguf"), dtype="f32", seed=11, indexer_heads=16)
write_deepseek4(os.path.join(out, "deepseek4_mxfp4.gguf"), dtype="q8_0", expert_dtype="mxfp4", seed=11, indexer_heads=16, clamp=10.0)
PY
du -sh "$out"

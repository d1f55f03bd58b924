#!/usr/bin/env bash
# The CUDA backend's verification, in one call on a machine with an NVIDIA GPU
# (issue 15.5), after scripts/gpu_check_prepare.sh made .gpucheck/ here:
#   device run, carry [".gpucheck"], command "bash scripts/gpu_check.sh", timeout 600
# `bash scripts/gpu_check.sh verify` stops after the checks, `... speed` runs only the speed
# part (on a machine still warm from the first call, the build is reused): two calls where
# one would pass the 10-minute limit. Everything written to $OUT comes back even when cut.
# Builds dsinfer and the CUDA plugin (the Debian packages the GPU image lacks
# unpacked under /tmp), then writes to $OUT (or ./gpucheck-out):
#   backend_ops.txt  every op on cpu and cuda:0 against the reference (tests/device/backend_ops.cpp),
#                    and the collectives of tensor parallel in a job of one rank (NCCL on cuda:0)
#   perf.txt         the ops' speed table beside the GPU's bandwidth
#   logits.txt       each architecture and weight type: CUDA's logits against the CPU backend's
#   speed.txt        pp512/tg128 on the 1.1B random Llama (F16, Q8_0, Q4_0): decode GB/s against
#                    HBM bandwidth, prefill TFLOP/s; 64 concurrent streams
set -uo pipefail
phase=${1:-all}
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/gpucheck-out}
mkdir -p "$out"
deps=/tmp/gpucheck-deps
mkdir -p $deps
for f in .gpucheck/debs/*.deb; do dpkg -x "$f" $deps; done
multiarch=$deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_SYSROOT_DIR=$deps PKG_CONFIG_PATH=$multiarch/pkgconfig:$deps/usr/share/pkgconfig PATH=$deps/usr/bin:$PATH
export LD_LIBRARY_PATH=$multiarch:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --target /tmp/gpucheck-site .gpucheck/wheels/*.whl && export PYTHONPATH=/tmp/gpucheck-site

step() { echo "== $1 ($(date +%T))"; }
step build
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSINFER_TESTS=OFF -DCMAKE_PREFIX_PATH=$deps/usr \
  -DPKG_CONFIG_EXECUTABLE=$deps/usr/bin/pkgconf -DBoost_INCLUDE_DIR=$deps/usr/include -DSQLite3_INCLUDE_DIR=$deps/usr/include -DSQLite3_LIBRARY=$multiarch/libsqlite3.so \
  > "$out/build.txt" 2>&1 && ninja -C build-gpu -j"$(nproc)" dsinfer dsinfer_backend_ops dsinfer_cuda dsinfer_nccl >> "$out/build.txt" 2>&1 \
  || { tail -n 40 "$out/build.txt"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv | tee "$out/gpu.txt"

if [ "$phase" != speed ]; then
step "backend ops"
build-gpu/dsinfer_backend_ops test > "$out/backend_ops.txt" 2>&1; ops=$?
grep -v "^ok" "$out/backend_ops.txt"
step "backend ops perf"
build-gpu/dsinfer_backend_ops perf > "$out/perf.txt" 2>&1
cat "$out/perf.txt"

step "logits, cuda:0 against cpu"
prompt() { echo 1,$(python3 -c "import random; r = random.Random(1); print(','.join(str(r.randrange(3, 250)) for _ in range($1 - 1)))"); }
logits=0
for model in .gpucheck/models/*.gguf; do
  name=$(basename "$model" .gguf)
  [ "$name" = ggml-vocab-llama-spm ] && continue
  dtype=${name#*_}
  [ "$name" = stories260K ] && dtype=f32
  tokens=$(prompt 48)
  [ "$name" = deepseek4_f32 ] && tokens=$(prompt 300)  # ratio-128 rows form; ratio-4 rows outnumber the indexer's 8
  build-gpu/dsinfer logits -m "$model" --tokens "$tokens" --kv-cache-dtype f32 --out /tmp/cpu.npy > /dev/null 2>&1 &&
    build-gpu/dsinfer logits -m "$model" --tokens "$tokens" --kv-cache-dtype f32 --device cuda:0 --out /tmp/cuda.npy > /tmp/cuda.log 2>&1 ||
    { echo "$name: $(tail -n 2 /tmp/cuda.log)"; logits=1; continue; }
  echo -n "$name " && python3 tests/device/compare_logits.py /tmp/cpu.npy /tmp/cuda.npy "$dtype" || logits=1
done > "$out/logits.txt" 2>&1
cat "$out/logits.txt"
fi
[ "$phase" = verify ] && { [ $ops = 0 ] && [ $logits = 0 ]; exit; }

step "speed on the 1.1B random Llama"
PYTHONPATH=$PYTHONPATH:tests/reference python3 - <<'PY' > "$out/models.txt" 2>&1
import os
from make_model import write_model
shape = dict(n_embd=2048, n_ff=5632, n_head=32, n_head_kv=4, n_layer=22, n_ctx=2048)
os.makedirs("/tmp/speed", exist_ok=True)
for dtype in ("f16", "q8_0", "q4_0"):
    write_model(f"/tmp/speed/llama1b_{dtype}.gguf", arch="llama", dtype=dtype, seed=0,
                vocab_path=".gpucheck/models/ggml-vocab-llama-spm.gguf", **shape)
PY
hbm=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo 4800 || echo 0)  # GB/s, the datasheet's
for dtype in f16 q8_0 q4_0; do
  model=/tmp/speed/llama1b_$dtype.gguf
  build-gpu/dsinfer bench -m $model --device cuda:0 -p 512 -n 128 -r 2 > /tmp/bench.txt 2>&1 || { tail -n 3 /tmp/bench.txt; continue; }
  python3 - "$dtype" "$model" "$hbm" <<'PY'
import os, re, sys
dtype, model, hbm = sys.argv[1], sys.argv[2], float(sys.argv[3])
out = open("/tmp/bench.txt").read()
pp = float(re.search(r"^pp\d+: ([0-9.]+)", out, re.M).group(1))
tg = float(re.search(r"^tg\d+: ([0-9.]+)", out, re.M).group(1))
weights = os.path.getsize(model)  # bytes read per decoded token, all but the embedding rows not looked up
params = 1.1e9
print(f"| {dtype} | pp512 {pp:.1f} tok/s = {2 * params * pp / 1e12:.2f} TFLOP/s | tg128 {tg:.1f} tok/s = {weights * tg / 1e9:.0f} GB/s"
      + (f" ({100 * weights * tg / 1e9 / hbm:.0f}% of {hbm:.0f} GB/s HBM) |" if hbm else " |"))
PY
done 2>&1 | tee "$out/speed.txt"
build-gpu/dsinfer bench -m /tmp/speed/llama1b_q8_0.gguf --device cuda:0 --concurrency 64 --requests 256 --prompt-len 128 \
  --gen-len 128 2>&1 | tail -n 12 | tee -a "$out/speed.txt"

[ "$phase" = speed ] && exit 0
echo "backend ops: $([ $ops = 0 ] && echo passed || echo FAILED); logits: $([ $logits = 0 ] && echo passed || echo FAILED)"
[ $ops = 0 ] && [ $logits = 0 ]

#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds,
# runs the unit tests, the bad-input tests under AddressSanitizer, the
# threaded parts under ThreadSanitizer, a bounded
# fuzz smoke of the GGUF reader, the HTTP request path and the Jinja interpreter, the server end to
# end (tests/e2e: the openai client, schemathesis, overload, disconnects,
# drain, soak, hostile clients, crafted model files, the access log), and the reference
# comparisons against llama.cpp (tests/reference). Ends with pytest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/install_deps.sh
scripts/build.sh -DDSINFER_TESTS=ON

echo "== unit tests"
# One test process at a time: each runs a two-thread pool on the two cores, and two
# at once oversubscribe them (ctest -j2 took 119 s here, -j1 7 s).
(cd build && ctest --output-on-failure -j1)

echo "== bad input under AddressSanitizer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_ASAN=ON >/dev/null
ninja -C build-asan -j2 dsinfer_tests dsinfer dsinfer_backend_ops
# The backend ops reach every stride and shape of the device layer: out of bounds shows here.
ASAN_OPTIONS=detect_leaks=1 build-asan/dsinfer_backend_ops test | grep -v '^ok '
ASAN_OPTIONS=detect_leaks=1 build-asan/dsinfer_tests --gtest_filter='FlashAttention.*:GgufFile.*:Model.Unknown*:Model.Malformed*:Tokenizer.*:Utf8.*:BlockPool.*:KvCacheManager.*:Scheduler.*:Engine*:*EngineCoreTest.Speculative*:*EngineCoreTest.DraftModel*:NgramDrafter.*:DraftModel.*:CompletionRequest.*:ReasoningSplitter.*:Admission.*:MemorySize.*:HttpRequest*:AnswerReader.*:AddressRange.*:RouterConfigCanary.*:InstanceMetrics.*:CanaryRelease.*'
# Every crafted model file through the sanitized binary: a sanitizer report
# exits 86, which the test tells apart from a refusal (exit 1).
DSINFER=build-asan/dsinfer ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86:print_stacktrace=1 \
  python3 -m pytest -q tests/e2e/test_crafted_model_files.py

echo "== threads under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_TSAN=ON >/dev/null
ninja -C build-tsan -j2 dsinfer_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/dsinfer_tests --gtest_filter='ThreadPool.*:TaskQueue.*:Engine.*:EngineConstrained.*:Tokenizer.EncodesOnManyThreadsAtOnce:CanaryRelease.*'

echo "== fuzz smoke of the GGUF reader, the HTTP request path and the Jinja interpreter (libFuzzer)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_FUZZ=ON \
  -DDSINFER_TESTS=OFF >/dev/null
ninja -C build-fuzz -j2 gguf_fuzz http_request_fuzz jinja_fuzz
corpus=$(mktemp -d)
python3 tests/reference/make_fuzz_seed.py "$corpus"
build-fuzz/gguf_fuzz -max_total_time="${DSINFER_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 -print_final_stats=1 \
  "$corpus" 2>&1 | tail -n 5
rm -rf "$corpus"
corpus=$(mktemp -d)
cp fuzz/http_seeds/* "$corpus"
build-fuzz/http_request_fuzz -max_total_time="${DSINFER_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 -print_final_stats=1 \
  "$corpus" 2>&1 | tail -n 5
rm -rf "$corpus"

corpus=$(mktemp -d)
cp ../shared/fixtures/chat-templates/*.jinja ../shared/fixtures/chat-templates/corpus/*.jinja "$corpus"
build-fuzz/jinja_fuzz -max_total_time="${DSINFER_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  "$corpus" 2>&1 | tail -n 5
rm -rf "$corpus"

echo "== server end to end (tests/e2e)"
cd "$root"
python3 -m pytest -q -s tests/e2e

echo "== reference comparisons (llama.cpp through llama-cpp-python)"
python3 -m pytest -q tests/reference

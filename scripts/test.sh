#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds,
# runs the unit tests, the bad-input tests under AddressSanitizer, the
# threaded parts under ThreadSanitizer, a bounded
# fuzz smoke of the GGUF reader, the HTTP request path and the Jinja interpreter, the server end to
# end (tests/e2e: the openai client, schemathesis, overload, disconnects,
# drain, soak, hostile clients, crafted model files, the access log), and the reference
# comparisons against llama.cpp (tests/reference). Prints each stage's time
# as it ends and a table of them at the end, then repeats pytest's summary
# line of the last stage.
#
# --quick: the inner loop (a few minutes): the build, the unit tests, the
# backend ops, and the reference comparisons of one file per family.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

stage_names=() stage_seconds=() stage_name="" stage_start=$SECONDS
# Ends the stage running (printing its time) and starts the next, if named.
stage() {
  if [ -n "$stage_name" ]; then
    stage_names+=("$stage_name")
    stage_seconds+=($((SECONDS - stage_start)))
    echo "-- $stage_name: $((SECONDS - stage_start)) s"
  fi
  stage_name="${1:-}"
  stage_start=$SECONDS
  if [ -n "$stage_name" ]; then echo "== $stage_name"; fi
}
stage_table() {
  stage
  echo "== stage times (s)"
  for i in "${!stage_names[@]}"; do printf '%6d  %s\n' "${stage_seconds[$i]}" "${stage_names[$i]}"; done
  printf '%6d  total\n' "$SECONDS"
}
trainer=""
trap 'status=$?; [ -z "$trainer" ] || kill "$trainer" 2>/dev/null; stage_table; exit $status' EXIT

stage "dependencies"
scripts/install_deps.sh
if [ "$quick" = 0 ]; then
  # The reference stage's trained models (tests/reference/train_models.py
  # --tested: about seven minutes on two cores the first time, then cached by
  # content) train meanwhile at the lowest priority, on the CPU time the
  # stages in between leave idle; that stage waits for them.
  train_log=$(mktemp)
  nice -n 19 python3 tests/reference/train_models.py --tested >"$train_log" 2>&1 &
  trainer=$!
fi
stage "build"
scripts/build.sh -DDSINFER_TESTS=ON

if [ "$quick" = 1 ]; then
  stage "unit tests"
  (cd build && ctest --output-on-failure -j1)
  stage "backend ops"
  build/dsinfer_backend_ops test | grep -v '^ok '
  stage "reference comparisons, one file per family (llama, qwen2, deepseek2)"
  summary=$(mktemp)
  python3 -m pytest -q tests/reference/test_logits_vs_llama_cpp.py \
    -k 'test_logits_match_llama_cpp and q8_0 or test_deepseek2_logits_match_llama_cpp and v3-f32-split' | tee "$summary"
  trap - EXIT
  stage_table
  tail -n 1 "$summary"
  exit 0
fi

stage "unit tests"
# One test process at a time: each runs a two-thread pool on the two cores, and two
# at once oversubscribe them.
(cd build && ctest --output-on-failure -j1)

stage "bad input under AddressSanitizer"
# One sanitized tree serves this stage and the fuzz smoke below, so the
# library is built once for both: clang with ASan, UBSan and libFuzzer's
# coverage (DSINFER_FUZZ), the tests and the fuzz targets side by side.
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_FUZZ=ON >/dev/null
ninja -C build-asan -j2 dsinfer_address_tests dsinfer dsinfer_backend_ops gguf_fuzz http_request_fuzz jinja_fuzz
# The backend ops reach every stride and shape of the device layer: out of bounds shows here.
ASAN_OPTIONS=detect_leaks=1 build-asan/dsinfer_backend_ops test | grep -v '^ok '
# Speculative decoding's rollbacks on two families: a plain cache (stories260K)
# and DeepSeek-V4's, which has every kind of stream the others have and more.
ASAN_OPTIONS=detect_leaks=1 build-asan/dsinfer_address_tests --gtest_filter='FlashAttention.*:*SparseAttentionTest.*:GgufFile.*:Model.Unknown*:Model.Malformed*:Tokenizer.*:Utf8.*:BlockPool.*:KvCacheManager.*:Scheduler.*:Engine*:*EngineCorePrefix.*:*EngineCoreTest.Speculative*/stories260K:*EngineCoreTest.DraftModel*/stories260K:*EngineCoreTest.Speculative*/deepseek4*:*EngineCoreTest.DraftModel*/deepseek4*:NgramDrafter.*:DraftModel.*:CompletionRequest.*:ReasoningSplitter.*:Admission.*:MemorySize.*:HttpRequest*:HttpServerStop.*:AnswerReader.*:AddressRange.*:RouterConfigCanary.*:InstanceMetrics.*:CanaryRelease.*:AdmissionRule.*:Request.*'
# Every crafted model file through the sanitized binary: a sanitizer report
# exits 86, which the test tells apart from a refusal (exit 1).
DSINFER=build-asan/dsinfer ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=86:print_stacktrace=1 \
  python3 -m pytest -q --durations=5 tests/e2e/test_crafted_model_files.py

stage "threads under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_TSAN=ON >/dev/null
ninja -C build-tsan -j2 dsinfer_thread_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/dsinfer_thread_tests --gtest_filter='ThreadPool.*:TaskQueue.*:Engine.*:EngineConstrained.*:Tokenizer.EncodesOnManyThreadsAtOnce:CanaryRelease.*'

stage "fuzz smoke of the GGUF reader, the HTTP request path and the Jinja interpreter (libFuzzer)"
fuzz_dir=$(mktemp -d)
mkdir "$fuzz_dir/gguf" "$fuzz_dir/http" "$fuzz_dir/jinja"
python3 tests/reference/make_fuzz_seed.py "$fuzz_dir/gguf"
cp fuzz/http_seeds/* "$fuzz_dir/http"
cp ../shared/fixtures/chat-templates/*.jinja ../shared/fixtures/chat-templates/corpus/*.jinja "$fuzz_dir/jinja"
# A fuzzer is one process on one core: the three run side by side for the same
# wall time, each printing its final statistics, or all it said when it failed.
fuzz() {
  local target=$1 corpus=$2
  shift 2
  if build-asan/"$target" -max_total_time="${DSINFER_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 -print_final_stats=1 "$@" \
       "$corpus" >"$fuzz_dir/$target.log" 2>&1; then
    echo "$target:"; tail -n 5 "$fuzz_dir/$target.log"
  else
    echo "$target failed:"; tail -n 80 "$fuzz_dir/$target.log"; return 1
  fi
}
fuzz gguf_fuzz "$fuzz_dir/gguf" >"$fuzz_dir/gguf.out" & gguf_pid=$!
fuzz http_request_fuzz "$fuzz_dir/http" >"$fuzz_dir/http.out" & http_pid=$!
fuzz jinja_fuzz "$fuzz_dir/jinja" -max_len=65536 >"$fuzz_dir/jinja.out" & jinja_pid=$!
fuzz_failed=0
wait "$gguf_pid" || fuzz_failed=1
wait "$http_pid" || fuzz_failed=1
wait "$jinja_pid" || fuzz_failed=1
cat "$fuzz_dir/gguf.out" "$fuzz_dir/http.out" "$fuzz_dir/jinja.out"
rm -rf "$fuzz_dir"
[ "$fuzz_failed" = 0 ]

stage "server end to end (tests/e2e)"
cd "$root"
# The crafted model files ran above, through the sanitized binary. --durations names the
# slowest tests of each pytest stage: where the suite's time goes, in every CI log.
python3 -m pytest -q -s --durations=15 tests/e2e --ignore=tests/e2e/test_crafted_model_files.py

stage "the trained test models (what their training in the background had left)"
if ! wait "$trainer"; then
  trainer=""
  cat "$train_log"
  exit 1
fi
trainer=""
grep -v 'n_ctx_seq' "$train_log" || true

stage "reference comparisons (llama.cpp through llama-cpp-python)"
summary=$(mktemp)
python3 -m pytest -q --durations=15 tests/reference | tee "$summary"
trap - EXIT
stage_table
tail -n 1 "$summary"

#pragma once
// What `dsinfer bench` measured on one sequence, and its three ways of
// printing it: lines (the default, which scripts read), a markdown table and
// JSON, as llama-bench's -o md|json. A generation test carries the bytes each
// token reads, so that with a bandwidth (measured by --membw or given) it
// shows its share of the limit that bandwidth sets.

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct BenchTest {
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0;  // one of n_prompt, n_gen is non-zero
  std::vector<double> tokens_per_second;         // one per repetition
  double read_bytes_per_token = 0;               // tg: weights and the cache at the test's mean context
  std::string name() const;                      // "pp512", "tg128 @ d8192"
};

struct BenchReport {
  std::string model, arch, backend;
  std::string placement;  // how the weights are held: mapped or copied, repacked or not
  int64_t model_bytes = 0, n_params = 0;
  int n_threads = 0;
  double bandwidth = 0;  // bytes/s; 0: unknown
  std::vector<BenchTest> tests;
};

enum class BenchFormat { text, markdown, json };

void print_bench_report(const BenchReport& report, BenchFormat format);

}  // namespace ds

#include "cli/bench_report.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace ds {
namespace {

struct Summary {
  double mean = 0.0, stddev = 0.0;
};

Summary summarize(const std::vector<double>& rates) {
  Summary s;
  for (double r : rates) s.mean += r / double(rates.size());
  for (double r : rates) s.stddev += (r - s.mean) * (r - s.mean) / double(rates.size());
  s.stddev = std::sqrt(s.stddev);
  return s;
}

// Tokens/s that the bandwidth allows a generation test, or 0 where either is unknown.
double bandwidth_limit(const BenchReport& report, const BenchTest& t) {
  return report.bandwidth > 0 && t.read_bytes_per_token > 0 ? report.bandwidth / t.read_bytes_per_token : 0.0;
}

void print_text(const BenchReport& r) {
  std::printf("model: %s, %s, backend %s, weights %s\n", r.model.c_str(), r.arch.c_str(), r.backend.c_str(), r.placement.c_str());
  if (r.bandwidth > 0) std::printf("memory read bandwidth: %.1f GB/s\n", r.bandwidth / 1e9);
  for (const BenchTest& t : r.tests) {
    const Summary s = summarize(t.tokens_per_second);
    std::printf("%s: %.2f ± %.2f tokens/s", t.name().c_str(), s.mean, s.stddev);
    if (const double limit = bandwidth_limit(r, t); limit > 0) {
      std::printf(", %.0f%% of the %.1f tokens/s that %.1f GB/s allows at %.1f MB per token", 100.0 * s.mean / limit, limit,
                  r.bandwidth / 1e9, t.read_bytes_per_token / 1e6);
    }
    std::printf("\n");
  }
}

void print_markdown(const BenchReport& r) {
  std::printf("| model | size | params | backend | threads | test | t/s | bandwidth limit t/s | share |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |\n");
  for (const BenchTest& t : r.tests) {
    const Summary s = summarize(t.tokens_per_second);
    const double limit = bandwidth_limit(r, t);
    char limit_cell[32] = "", share_cell[32] = "";
    if (limit > 0) {
      std::snprintf(limit_cell, sizeof limit_cell, "%.2f", limit);
      std::snprintf(share_cell, sizeof share_cell, "%.0f%%", 100.0 * s.mean / limit);
    }
    std::printf("| %s %s | %.2f GiB | %.2f M | %s | %d | %s | %.2f ± %.2f | %s | %s |\n", r.arch.c_str(), r.model.c_str(),
                double(r.model_bytes) / double(1 << 30), double(r.n_params) / 1e6, r.backend.c_str(), r.n_threads,
                t.name().c_str(), s.mean, s.stddev, limit_cell, share_cell);
  }
}

// One object per test with llama-bench's field names, and the bandwidth's.
void print_json(const BenchReport& r) {
  nlohmann::json tests = nlohmann::json::array();
  for (const BenchTest& t : r.tests) {
    const Summary s = summarize(t.tokens_per_second);
    const double limit = bandwidth_limit(r, t);
    nlohmann::json o = {{"model_filename", r.model}, {"model_type", r.arch},     {"model_size", r.model_bytes},
                        {"model_n_params", r.n_params}, {"backend", r.backend},  {"n_threads", r.n_threads},
                        {"test", t.name()},          {"n_prompt", t.n_prompt},  {"n_gen", t.n_gen},
                        {"n_depth", t.n_depth},      {"avg_ts", s.mean},        {"stddev_ts", s.stddev},
                        {"samples_ts", t.tokens_per_second}};
    if (t.read_bytes_per_token > 0) o["read_bytes_per_token"] = t.read_bytes_per_token;
    if (r.bandwidth > 0) o["bandwidth_bytes_per_s"] = r.bandwidth;
    if (limit > 0) {
      o["bandwidth_limit_ts"] = limit;
      o["bandwidth_share"] = s.mean / limit;
    }
    tests.push_back(std::move(o));
  }
  std::printf("%s\n", tests.dump(2).c_str());
}

}  // namespace

std::string BenchTest::name() const {
  std::string name = n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  return n_depth > 0 ? name + " @ d" + std::to_string(n_depth) : name;
}

void print_bench_report(const BenchReport& report, BenchFormat format) {
  switch (format) {
    case BenchFormat::text: return print_text(report);
    case BenchFormat::markdown: return print_markdown(report);
    case BenchFormat::json: return print_json(report);
  }
}

}  // namespace ds

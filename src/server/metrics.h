#pragma once
// Prometheus text exposition of the server's counters and histograms and the
// engine's gauges. Names follow vLLM's where one exists, under "dsinfer:".

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace ds {

class Metrics {
 public:
  Metrics();
  // A counter series, e.g. add("dsinfer:request_success_total", "finished_reason=\"stop\"").
  void add(const std::string& family, const std::string& labels, double value = 1.0);
  void observe(const std::string& family, double value);
  // Everything, with the engine's state as gauges.
  std::string render(const EngineStats& engine, int64_t in_flight) const;

 private:
  struct Family {
    std::string help;
    std::string type;  // counter or histogram
    std::vector<double> bounds;                 // histograms
    std::map<std::string, double> series;       // counters: labels -> value
    std::vector<uint64_t> bucket_counts;        // histograms
    double sum = 0;
    uint64_t count = 0;
  };
  void declare(const std::string& name, const std::string& type, const std::string& help, std::vector<double> bounds = {});
  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

}  // namespace ds

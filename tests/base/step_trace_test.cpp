#include "base/step_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ds {
namespace {

std::string temp_path(const char* name) {
  return std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(getpid()) + ".json");
}

void one_step(StepTrace& trace) {
  trace.begin_step();
  {
    TraceScope stage(&trace, "forward");
    { TraceScope op(&trace, "matmul", "q8_0"); }
    { TraceScope op(&trace, "attention"); }
  }
  { TraceScope op(&trace, "sample"); }
  trace.end_step(7, 2);
}

TEST(StepTrace, RecordsTheAskedStepsAsChromeTraceJson) {
  const std::string path = temp_path("step-trace");
  StepTrace trace;
  one_step(trace);  // not started: nothing recorded
  EXPECT_EQ(trace.traced_steps(), 0);
  ASSERT_TRUE(trace.start(path, 2).ok());
  EXPECT_FALSE(trace.start(path, 2).ok());  // one at a time
  one_step(trace);
  one_step(trace);
  one_step(trace);  // past the two asked for
  EXPECT_EQ(trace.traced_steps(), 2);
  std::ifstream in(path);
  const nlohmann::json events = nlohmann::json::parse(in);  // closed after the second step: valid JSON
  int steps = 0, ops = 0;
  for (const auto& e : events) {
    if (e.value("cat", "") == "step") {
      ++steps;
      EXPECT_EQ(e["args"]["tokens"], 7);
      EXPECT_EQ(e["args"]["sequences"], 2);
    }
    if (e.value("cat", "") == "op") ++ops;
    if (e["name"] == "forward") {
      EXPECT_EQ(e["cat"], "stage");  // it has children: not an op
    }
  }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(ops, 6);  // matmul, attention and sample, twice
  std::map<std::string, double> totals;
  for (const auto& [op, seconds] : trace.op_seconds()) totals[op] = seconds;
  EXPECT_EQ(totals.size(), 3u);
  EXPECT_TRUE(totals.count("matmul q8_0"));
  EXPECT_TRUE(trace.start(path, 1).ok());  // the first recording ended
  std::filesystem::remove(path);
}

TEST(StepTrace, RefusesNoStepsAndAnUnwritablePath) {
  StepTrace trace;
  EXPECT_FALSE(trace.start(temp_path("x"), 0).ok());
  EXPECT_FALSE(trace.start("/nonexistent-dir/trace.json", 1).ok());
}

}  // namespace
}  // namespace ds

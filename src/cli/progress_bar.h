#pragma once
// Progress of a long command on stderr: a bar redrawn in place on a terminal,
// or a line at every tenth of the way when stderr is a file or a pipe (a CI
// log), so that neither floods its reader.

#include <chrono>
#include <cstdint>
#include <string>

namespace ds {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit);
  void update(int64_t done);  // done of total so far
  void finish();              // the last draw and its newline

 private:
  void draw(int64_t done);
  std::string label_, unit_;
  int64_t total_;
  bool terminal_;
  int64_t last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace ds

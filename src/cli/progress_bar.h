#pragma once
// Progress of a long command on stderr: a bar redrawn in place on a terminal,
// or, when stderr is a file or a pipe (a CI log), a line at every tenth of the
// way or only at the end, so that neither floods its reader. A unit of
// "bytes" is shown in MiB with the rate.

#include <chrono>
#include <cstdint>
#include <string>

namespace ds {

class ProgressBar {
 public:
  enum class Lines { every_tenth, at_end };  // off a terminal
  ProgressBar(std::string label, int64_t total, std::string unit, Lines lines = Lines::every_tenth);
  void update(int64_t done);  // done of total so far
  void finish();              // the last draw and its newline

 private:
  void draw(int64_t done);
  std::string label_, unit_;
  int64_t total_;
  bool terminal_;
  Lines lines_;
  int64_t last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace ds

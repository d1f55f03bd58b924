#include "cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ds {

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, Lines lines)
    : label_(std::move(label)), unit_(std::move(unit)), total_(std::max<int64_t>(total, 1)), terminal_(isatty(2) != 0), lines_(lines),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void ProgressBar::update(int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  } else {
    if (lines_ == Lines::at_end) return;
    const int64_t tenth = done * 10 / total_;
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
  }
  last_draw_ = now;
  draw(done);
}

void ProgressBar::draw(int64_t done) {
  constexpr int kWidth = 30;
  const int filled = int(std::min<int64_t>(done, total_) * kWidth / total_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done > 0 ? seconds * double(total_ - done) / double(done) : 0;
  char amount[96];
  if (unit_ == "bytes") {
    constexpr double mib = 1 << 20;
    std::snprintf(amount, sizeof amount, "%.1f/%.1f MiB, %.1f MiB/s", double(done) / mib, double(total_) / mib,
                  seconds > 0 ? double(done) / mib / seconds : 0.0);
  } else {
    std::snprintf(amount, sizeof amount, "%lld/%lld %s", (long long)done, (long long)total_, unit_.c_str());
  }
  std::fprintf(stderr, "%s%s [%.*s%*s] %s, %.1f s, eta %.0f s%s", terminal_ ? "\r" : "", label_.c_str(), filled, "##############################",
               kWidth - filled, "", amount, seconds, eta, terminal_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (terminal_) {
    draw(total_);
    std::fputc('\n', stderr);
  } else if (lines_ == Lines::at_end || last_tenth_ < 10) {
    draw(total_);
  }
}

}  // namespace ds

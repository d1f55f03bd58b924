#include "server/reasoning_splitter.h"

namespace ds {
namespace {

constexpr const char* k_open = "<think>";
constexpr const char* k_close = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(const std::string& text, const std::string& tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.compare(text.size() - n, n, tag, 0, n) == 0) return n;
  }
  return 0;
}

}  // namespace

ReasoningDelta ReasoningSplitter::push(const std::string& text) {
  ReasoningDelta out;
  held_ += text;
  for (;;) {
    // The line breaks R1 writes after </think> belong to neither part.
    if (trim_newlines_) {
      held_.erase(0, std::min(held_.size(), held_.find_first_not_of('\n')));
      if (held_.empty()) return out;
      trim_newlines_ = false;
    }
    const std::string tag = in_reasoning_ ? k_close : k_open;
    const size_t at = held_.find(tag);
    std::string& sink = in_reasoning_ ? out.reasoning : out.content;
    if (at == std::string::npos) {
      const size_t keep = partial_tag_suffix(held_, tag);
      sink += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    sink += held_.substr(0, at);
    held_.erase(0, at + tag.size());
    in_reasoning_ = !in_reasoning_;
    trim_newlines_ = !in_reasoning_;
  }
}

ReasoningDelta ReasoningSplitter::flush() {
  ReasoningDelta out;
  (in_reasoning_ ? out.reasoning : out.content) = held_;
  held_.clear();
  return out;
}

}  // namespace ds

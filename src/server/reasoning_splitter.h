#pragma once
// DeepSeek-R1 replies think first: the text between <think> and </think> is
// returned as `reasoning_content`, the rest as `content`, as DeepSeek's API
// does. Text arrives in arbitrary pieces, so a piece that may be the start of
// a tag is held back until the next piece decides it.

#include <string>

namespace ds {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // in_reasoning: the prompt already opened <think> (R1's generation prompt does).
  explicit ReasoningSplitter(bool in_reasoning) : in_reasoning_(in_reasoning) {}
  ReasoningDelta push(const std::string& text);
  ReasoningDelta flush();

 private:
  bool in_reasoning_;
  bool trim_newlines_ = false;
  std::string held_;
};

}  // namespace ds

#pragma once
// What the router reads of an instance's answer as it passes through, for
// the canary's comparison: the text generated (every choice's reasoning,
// content and tool calls, in choice order, from a JSON body or an SSE
// stream), the output token count, when the first generated text came, and
// an error the answer carries. And how two answers' texts agree.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ds {

class AnswerReader {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t k_max_text = 1 << 20;  // kept of each answer; the rest is counted, not stored

  explicit AnswerReader(bool stream) : stream_(stream) {}
  // Body bytes as they arrive.
  void add(const std::string& piece, Clock::time_point now);
  // The body is complete (a JSON body is read here).
  void finish();

  std::string text() const;
  bool truncated() const { return truncated_; }
  // usage.completion_tokens when the answer has it, else the stream's events with text.
  int64_t output_tokens() const { return usage_tokens_ >= 0 ? usage_tokens_ : text_events_; }
  std::optional<Clock::time_point> first_text_at() const { return first_text_at_; }
  const std::string& error() const { return error_; }  // an error object in the body or an event: its message

 private:
  void read_object(const std::string& json_text, bool event, Clock::time_point now);
  void append(size_t choice, const std::string& piece);

  bool stream_;
  std::string pending_;                 // a stream's bytes not yet a whole event, or the whole JSON body
  std::map<size_t, std::string> text_;  // choice index -> text
  size_t stored_ = 0;
  bool truncated_ = false;
  int64_t usage_tokens_ = -1, text_events_ = 0;
  std::optional<Clock::time_point> first_text_at_;
  std::string error_;
};

// Words of a text for comparing answers without either version's tokenizer:
// runs of letters and digits (any non-ASCII byte counts as a letter), and
// every other character but whitespace alone.
std::vector<std::string> word_tokens(const std::string& text);
// The F1 score of the two texts' word tokens as multisets: 1 for the same
// words, 0 for none in common (1 when both are empty).
double token_overlap(const std::string& a, const std::string& b);

}  // namespace ds

#pragma once
// Stop strings matched on generated text. Text that could still turn out to
// be the start of a stop string is held back, so a client never sees part of
// a stop string.

#include <string>
#include <string_view>
#include <vector>

namespace ds {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds new text; returns what is now safe to emit. Once a stop string
  // matched, stopped() is true and the returned text ends just before it.
  std::string push(std::string_view text);
  // Everything still held back (call when generation ends without a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (the earliest in the text; of two there, the first given); empty before.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ds

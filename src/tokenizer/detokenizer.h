#pragma once
// Turns a stream of tokens into a stream of text that never ends inside a
// UTF-8 sequence: bytes of an unfinished character are held back until the
// token that completes it; bytes that can never form a character become U+FFFD.

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ds {

class IncrementalDetokenizer {
 public:
  // strip_leading_space: drop the SentencePiece prefix space of the first piece.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool render_special, bool strip_leading_space);

  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t token);
  // Returns whatever is still held back, invalid bytes replaced; call at the end.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool strip_leading_space_;
  std::string pending_;
};

}  // namespace ds

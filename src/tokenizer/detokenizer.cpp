#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace ds {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool render_special, bool strip_leading_space)
    : tokenizer_(tokenizer), render_special_(render_special), strip_leading_space_(strip_leading_space) {}

std::string IncrementalDetokenizer::push(int32_t token) {
  std::string piece = tokenizer_.token_to_piece(token, render_special_);
  if (strip_leading_space_ && !piece.empty()) {
    if (piece[0] == ' ') piece.erase(0, 1);
    strip_leading_space_ = false;
  }
  pending_ += piece;
  std::string ready;
  size_t i = 0;
  while (i < pending_.size()) {
    const size_t n = utf8_valid_length(pending_, i);
    if (n > 0) {
      ready.append(pending_, i, n);
      i += n;
      continue;
    }
    // An incomplete sequence at the end may still be completed by the next token.
    const size_t expected = utf8_sequence_length(static_cast<unsigned char>(pending_[i]));
    const bool may_complete = expected > 1 && i + expected > pending_.size() &&
                              [&] {
                                for (size_t k = i + 1; k < pending_.size(); ++k) {
                                  if ((static_cast<unsigned char>(pending_[k]) & 0xC0) != 0x80) return false;
                                }
                                return true;
                              }();
    if (may_complete) break;
    append_utf8(ready, 0xFFFD);
    ++i;
  }
  pending_.erase(0, i);
  return ready;
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace ds

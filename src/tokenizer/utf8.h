#pragma once
// Small UTF-8 helpers shared by the tokenizer and the detokenizer.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds {

// Length of the sequence a lead byte announces (1 for an invalid lead byte).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Characters in the text, as Python's len() counts them (a stray byte is one).
inline size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (const char c : text) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

// Length of the valid sequence at text[i], or 0 if it is invalid or cut short.
size_t utf8_valid_length(std::string_view text, size_t i);

void append_utf8(std::string& out, uint32_t codepoint);

// Replaces each invalid byte with U+FFFD.
std::string sanitize_utf8(std::string_view text);

}  // namespace ds

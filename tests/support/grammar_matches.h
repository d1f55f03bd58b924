#pragma once
// Whether a grammar accepts a whole text, fed byte by byte from its start.

#include <string>

#include "grammar/grammar.h"
#include "grammar/token_matcher.h"

namespace ds::grammar {

inline bool matches(const Grammar& g, const std::string& text) {
  StackSet state = initial_state(g), next;
  for (const char c : text) {
    advance(g, state, uint8_t(c), next);
    std::swap(state, next);
    if (!state.alive()) return false;
  }
  return state.can_end;
}

}  // namespace ds::grammar

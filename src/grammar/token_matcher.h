#pragma once
// Constrained decoding: the state of a grammar over the bytes generated so
// far, the mask of the tokens that may come next, and the step past the token
// sampled. The state is a set of stacks of grammar positions (a pushdown
// automaton run breadth-first, as llama.cpp's grammar sampler does); masks
// are computed by walking the vocabulary trie and cached per state, since a
// generation revisits few distinct states (inside a string, every character
// leaves the state as it was).
//
// A matcher is a value: copying it copies the state (each choice of a request
// runs its own), while the grammar, the trie and the cache of masks are shared
// read-only or under a lock.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocab_trie.h"

namespace ds::grammar {

struct StackSet {
  std::vector<uint32_t> flat;  // stacks one after another: length, then positions (top last)
  bool can_end = false;        // some stack emptied: the text so far is a whole sentence
  bool alive() const { return can_end || !flat.empty(); }
};

struct MaskCache;

class TokenMatcher {
 public:
  // end_tokens: the tokens that end generation, allowed exactly where the grammar may end.
  TokenMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie, std::vector<int32_t> end_tokens);

  // Until `marker` has been generated the matcher constrains nothing (a
  // reasoning section before the constrained answer); the bytes after it start the grammar.
  void start_after(std::string marker);

  // Sets the logit of every token the grammar cannot take next to -infinity;
  // returns how many remain.
  size_t mask(float* logits, int64_t n_vocab);
  // Moves past the sampled token; false if the grammar refuses it (the state is then dead).
  bool accept(int32_t token);
  bool can_end() const { return state_.can_end; }
  bool active() const { return marker_.empty(); }


 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  std::vector<int32_t> end_tokens_;
  std::shared_ptr<MaskCache> cache_;
  StackSet state_;
  std::string marker_, seen_;  // start_after: the marker, and the tail of what was generated
};

// The byte-level step, exposed for tests: the state after `byte`.
void advance(const Grammar& g, const StackSet& from, uint8_t byte, StackSet& to);
StackSet initial_state(const Grammar& g);

}  // namespace ds::grammar

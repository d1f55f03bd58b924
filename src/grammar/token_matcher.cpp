#include "grammar/token_matcher.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace ds::grammar {
namespace {

// Bounds on one state: deeper stacks (nesting) and more stacks (ambiguity)
// than this are dropped, which can only narrow what is accepted, never widen it.
constexpr size_t k_max_stack_depth = 512;
constexpr size_t k_max_stacks = 256;
constexpr size_t k_max_cached_masks = 64;  // each is a bit per token: 16 KiB at 128K tokens
// Expansion steps per byte, and per mask: an ambiguous or hostile grammar
// costs a bounded amount (a mask that runs out allows only what it found).
constexpr int64_t k_expand_budget = 100'000;
constexpr int64_t k_mask_budget = 20'000'000;
thread_local int64_t expand_budget = 0;
thread_local int64_t mask_budget = INT64_MAX;

bool contains_stack(const std::vector<uint32_t>& flat, const uint32_t* stack, uint32_t n) {
  for (size_t i = 0; i < flat.size(); i += flat[i] + 1) {
    if (flat[i] == n && std::equal(stack, stack + n, flat.begin() + long(i) + 1)) return true;
  }
  return false;
}

size_t count_stacks(const std::vector<uint32_t>& flat) {
  size_t n = 0;
  for (size_t i = 0; i < flat.size(); i += flat[i] + 1) ++n;
  return n;
}

// Follows rule references and ends of alternatives until every stack's top
// is a byte set (or the stack is empty: the sentence may end here).
void expand(const Grammar& g, std::vector<uint32_t>& stack, StackSet& out) {
  if (--expand_budget < 0 || --mask_budget < 0) return;
  if (stack.empty()) {
    out.can_end = true;
    return;
  }
  if (stack.size() > k_max_stack_depth) return;
  const uint32_t p = stack.back();
  const Element& e = g.elements()[p];
  switch (e.kind) {
    case Element::Kind::end:
      stack.pop_back();
      expand(g, stack, out);
      stack.push_back(p);
      return;
    case Element::Kind::bytes:
      if (!contains_stack(out.flat, stack.data(), uint32_t(stack.size())) && count_stacks(out.flat) < k_max_stacks) {
        out.flat.push_back(uint32_t(stack.size()));
        out.flat.insert(out.flat.end(), stack.begin(), stack.end());
      }
      return;
    case Element::Kind::rule: {
      stack.pop_back();
      // A reference that ends its alternative leaves nothing to return to: not pushed.
      const bool returns = g.elements()[p + 1].kind != Element::Kind::end;
      if (returns) stack.push_back(p + 1);
      for (const uint32_t start : g.alternatives(e.index)) {
        stack.push_back(start);
        expand(g, stack, out);
        stack.pop_back();
      }
      if (returns) stack.pop_back();
      stack.push_back(p);
      return;
    }
  }
}

}  // namespace

StackSet initial_state(const Grammar& g) {
  StackSet s;
  std::vector<uint32_t> stack;
  expand_budget = k_expand_budget;
  for (const uint32_t start : g.alternatives(g.root())) {
    stack.assign(1, start);
    expand(g, stack, s);
  }
  return s;
}

void advance(const Grammar& g, const StackSet& from, uint8_t byte, StackSet& to) {
  to.flat.clear();
  to.can_end = false;
  expand_budget = k_expand_budget;
  thread_local std::vector<uint32_t> stack;
  for (size_t i = 0; i < from.flat.size(); i += from.flat[i] + 1) {
    const uint32_t n = from.flat[i];
    const uint32_t top = from.flat[i + n];
    if (!g.byte_set(g.elements()[top].index).has(byte)) continue;
    stack.assign(from.flat.begin() + long(i) + 1, from.flat.begin() + long(i) + 1 + n);
    stack.back() = top + 1;
    expand(g, stack, to);
  }
}

struct MaskCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<uint64_t>> masks;  // state -> allowed tokens, one bit each
};

namespace {

std::string state_key(const StackSet& s) {
  std::string key(reinterpret_cast<const char*>(s.flat.data()), s.flat.size() * sizeof(uint32_t));
  key.push_back(s.can_end ? '1' : '0');
  return key;
}

// The tokens whose bytes the grammar takes from `state`, by a walk of the
// trie that skips every subtree whose first byte is refused.
std::vector<uint64_t> allowed_tokens(const Grammar& g, const VocabTrie& trie, const StackSet& state) {
  std::vector<uint64_t> allowed((size_t(trie.n_vocab()) + 63) / 64, 0);
  thread_local std::vector<StackSet> at_depth;
  at_depth.resize(trie.max_depth() + 1);
  mask_budget = k_mask_budget;
  struct Unlimit {
    ~Unlimit() { mask_budget = INT64_MAX; }
  } unlimit;
  at_depth[0] = state;
  const auto& nodes = trie.nodes();
  for (size_t i = 0; i < nodes.size();) {
    const VocabTrie::Node& node = nodes[i];
    StackSet& here = at_depth[node.depth];
    advance(g, at_depth[node.depth - 1], node.byte, here);
    if (!here.alive()) {
      i = node.subtree_end;
      continue;
    }
    for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) {
      const int32_t id = trie.tokens()[t];
      allowed[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
    ++i;
  }
  return allowed;
}

}  // namespace

TokenMatcher::TokenMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie, std::vector<int32_t> end_tokens)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), end_tokens_(std::move(end_tokens)), cache_(std::make_shared<MaskCache>()),
      state_(initial_state(*grammar_)) {}

void TokenMatcher::start_after(std::string marker) { marker_ = std::move(marker); }

size_t TokenMatcher::mask(float* logits, int64_t n_vocab) {
  if (!active()) return size_t(n_vocab);
  const std::string key = state_key(state_);
  std::vector<uint64_t> allowed;
  {
    std::lock_guard lock(cache_->mutex);
    const auto it = cache_->masks.find(key);
    if (it != cache_->masks.end()) {
      allowed = it->second;
    }
  }
  if (allowed.empty()) {
    allowed = allowed_tokens(*grammar_, *trie_, state_);
    std::lock_guard lock(cache_->mutex);
    if (cache_->masks.size() >= k_max_cached_masks) cache_->masks.clear();
    cache_->masks.emplace(key, allowed);
  }
  for (const int32_t t : end_tokens_) {
    if (t >= 0 && t < trie_->n_vocab()) {
      if (state_.can_end) allowed[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
      else allowed[size_t(t) >> 6] &= ~(uint64_t(1) << (t & 63));
    }
  }
  size_t n_allowed = 0;
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n_vocab; ++t) {
    const bool ok = t < trie_->n_vocab() && ((allowed[size_t(t) >> 6] >> (t & 63)) & 1);
    if (ok) ++n_allowed;
    else logits[t] = minus_infinity;
  }
  return n_allowed;
}

bool TokenMatcher::accept(int32_t token) {
  if (token < 0 || token >= trie_->n_vocab()) return false;
  std::string bytes = trie_->bytes_of(token);
  if (!active()) {
    seen_ += bytes;
    const size_t at = seen_.find(marker_);
    if (at == std::string::npos) {
      if (seen_.size() > marker_.size()) seen_.erase(0, seen_.size() - marker_.size());
      return true;
    }
    bytes = seen_.substr(at + marker_.size());
    marker_.clear();
    seen_.clear();
  }
  for (const int32_t t : end_tokens_) {
    if (t == token) return state_.can_end;
  }
  StackSet next;
  for (const char b : bytes) {
    advance(*grammar_, state_, uint8_t(b), next);
    std::swap(state_, next);
    if (!state_.alive()) return false;
  }
  return true;
}

}  // namespace ds::grammar

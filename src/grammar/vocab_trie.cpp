#include "grammar/vocab_trie.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace ds::grammar {

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes) : bytes_(token_bytes), n_vocab_(int32_t(token_bytes.size())) {
  // Tokens sorted by their bytes are the trie in preorder: each token adds the
  // nodes of its bytes past the prefix it shares with the one before.
  std::vector<int32_t> order(token_bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return token_bytes[size_t(a)] < token_bytes[size_t(b)]; });
  std::vector<uint32_t> path;  // node index at each depth of the current token
  const std::string* previous = nullptr;
  for (const int32_t id : order) {
    const std::string& bytes = token_bytes[size_t(id)];
    if (bytes.empty() || bytes.size() > k_max_token_bytes) continue;  // control tokens, and none is that long
    size_t shared = 0;
    if (previous) {
      while (shared < previous->size() && shared < bytes.size() && (*previous)[shared] == bytes[shared]) ++shared;
    }
    for (size_t d = shared; d < path.size(); ++d) nodes_[path[d]].subtree_end = uint32_t(nodes_.size());
    path.resize(shared);
    for (size_t d = shared; d < bytes.size(); ++d) {
      path.push_back(uint32_t(nodes_.size()));
      nodes_.push_back({uint8_t(bytes[d]), uint16_t(std::min<size_t>(d + 1, UINT16_MAX)), 0, 0, 0});
    }
    max_depth_ = std::max(max_depth_, bytes.size());
    Node& last = nodes_[path.back()];
    if (last.tokens_begin == last.tokens_end) last.tokens_begin = last.tokens_end = uint32_t(tokens_.size());
    tokens_.push_back(id);
    last.tokens_end = uint32_t(tokens_.size());
    previous = &bytes;
  }
  for (const uint32_t n : path) nodes_[n].subtree_end = uint32_t(nodes_.size());
}

VocabTrie VocabTrie::of(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes;
  for (int32_t t = 0; t < tokenizer.vocab().n_tokens(); ++t) bytes.push_back(tokenizer.token_to_piece(t, false));
  return VocabTrie(bytes);
}

}  // namespace ds::grammar

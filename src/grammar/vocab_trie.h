#pragma once
// A vocabulary's tokens as a prefix tree of their bytes, built once per
// model: masking walks it depth first with the grammar's state and skips a
// whole subtree at the first byte the grammar refuses, so tokens that share
// a refused prefix cost one step together.
//
// Nodes are stored in preorder; each knows its byte, its depth and where its
// subtree ends, which is all a walk needs.

#include <cstdint>
#include <string>
#include <vector>

namespace ds {
class Tokenizer;
}

namespace ds::grammar {

// Longer tokens are left out of the trie (so never allowed under a grammar).
constexpr size_t k_max_token_bytes = 1024;

class VocabTrie {
 public:
  // token_bytes[id]: the bytes token id stands for; empty (control tokens) never matches.
  explicit VocabTrie(const std::vector<std::string>& token_bytes);
  // A model vocabulary's trie: each token as the bytes it decodes to (control
  // tokens decode to nothing; end tokens are the matcher's own concern).
  static VocabTrie of(const Tokenizer& tokenizer);

  struct Node {
    uint8_t byte;
    uint16_t depth;          // 1 for a first byte
    uint32_t subtree_end;    // the index after this node's subtree
    uint32_t tokens_begin;   // tokens spelled exactly by the path to this node
    uint32_t tokens_end;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int32_t n_vocab() const { return n_vocab_; }
  size_t max_depth() const { return max_depth_; }
  const std::string& bytes_of(int32_t token) const { return bytes_[size_t(token)]; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  std::vector<std::string> bytes_;
  int32_t n_vocab_ = 0;
  size_t max_depth_ = 0;
};

}  // namespace ds::grammar

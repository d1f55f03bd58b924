#pragma once
// A model's vocabulary as GGUF stores it: token texts, scores, types, BPE
// merges, special token ids and the flags that steer tokenization.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace ds {

enum class TokenizerKind {
  spm,  // SentencePiece-style, `tokenizer.ggml.model` = llama (scores, byte fallback)
  bpe,  // byte-level BPE, `tokenizer.ggml.model` = gpt2 (merges)
};

enum class TokenType : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

constexpr int32_t k_no_token = -1;

struct Vocab {
  TokenizerKind kind = TokenizerKind::spm;
  std::string pre;  // tokenizer.ggml.pre: selects the BPE pre-tokenizer rules
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<std::string, int32_t> merge_rank;  // "left right" -> rank
  int32_t bos = k_no_token, eos = k_no_token, unk = k_no_token, eot = k_no_token, pad = k_no_token;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM: prefix raw text with a space
  std::vector<int32_t> end_of_generation;  // tokens that end a reply

  int32_t n_tokens() const { return int32_t(tokens.size()); }
  int32_t find(const std::string& text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? k_no_token : it->second;
  }
  bool is_special(int32_t id) const {
    return types[size_t(id)] == TokenType::control || types[size_t(id)] == TokenType::user_defined ||
           types[size_t(id)] == TokenType::unknown;
  }

  static Result<Vocab> from_gguf(const GgufFile& file);
};

}  // namespace ds

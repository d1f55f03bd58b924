#pragma once
// Text <-> token ids for SentencePiece-style and byte-level BPE vocabularies,
// following llama.cpp's behaviour so that ids match it exactly.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace ds {

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);

  // add_special: BOS/EOS as the vocabulary asks. parse_special: special token
  // texts inside `text` become their ids (user-defined tokens always do).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for (may be part of a UTF-8 sequence). Control
  // tokens give their text only when render_special is set.
  std::string token_to_piece(int32_t id, bool render_special) const;
  std::string decode(const std::vector<int32_t>& ids, bool render_special) const;

  const Vocab& vocab() const { return vocab_; }
  // The most bytes of text one token stands for (its text or its piece): a
  // text of n bytes encodes to at least n / max_token_bytes() tokens.
  size_t max_token_bytes() const { return max_token_bytes_; }
  bool is_end_of_generation(int32_t id) const;

 private:
  Tokenizer() = default;
  static Result<std::unique_ptr<Tokenizer>> build(const GgufFile& file);
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>& out) const;
  void encode_bpe_word(const std::string& word, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::unique_ptr<Pretokenizer> pretokenizer_;  // BPE only
  std::vector<int32_t> special_by_length_;       // special tokens, longest text first
  int32_t byte_tokens_[256];                     // SPM <0xXX> tokens
  size_t max_token_bytes_ = 1;
};

}  // namespace ds

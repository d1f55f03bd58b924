#pragma once
// A Hugging Face byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json)
// as the GGUF keys llama.cpp's converter writes for it: the token list (ids
// the vocabulary leaves out become [PADn], unused), each token's type (added
// special or special-looking tokens are control tokens, other added ones
// user-defined), the merges, the pre-tokenizer's name, the special tokens'
// ids and whether BOS/EOS are added, and the chat template.
//
// The pre-tokenizer is named from the rules tokenizer.json declares (its
// Split regexes and ByteLevel step), for the families dsinfer tokenizes:
// GPT-2, Llama 3, Qwen2 and DeepSeek's; another is refused by name.
// SentencePiece (tokenizer.model) is not converted.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

struct GgufTokenizer {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // llama.cpp's token types: 1 normal, 3 control, 4 user-defined, 5 unused
  std::vector<std::string> merges;
  std::string pre;
  std::vector<std::pair<std::string, uint32_t>> special_ids;  // ("bos", id), in llama.cpp's order
  std::vector<std::pair<std::string, bool>> add_special;      // ("bos", true): tokenizer.ggml.add_bos_token
  std::optional<std::string> chat_template;
};

// n_vocab: config.json's vocab_size (the model's rows), or 0 for the tokenizer's own count.
Result<GgufTokenizer> read_hf_tokenizer(const std::string& dir, const nlohmann::json& config, int64_t n_vocab);

}  // namespace ds

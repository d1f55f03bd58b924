#include "tokenizer/vocab.h"

#include <algorithm>
#include <cmath>

namespace ds {
namespace {

// Well beyond the largest vocabulary and merge list of released models
// (Gemma 3: 262,144 tokens; Llama 3: 280,147 merges): each entry costs ~100
// bytes here against ~10 in the file, so a file claiming millions is refused.
constexpr size_t k_max_vocab = size_t(1) << 19;
constexpr size_t k_max_merges = size_t(1) << 20;

Status read_token_id(const GgufFile& file, const char* key, const Vocab& v, int32_t* out) {
  if (!file.find(key)) return Status();
  auto id = file.get_uint(key);
  if (!id.ok()) return id.status();
  // Converters write UINT32_MAX for "none".
  if (id.value() == 0xFFFFFFFFull) return Status();
  if (id.value() >= uint64_t(v.n_tokens())) {
    return Status::error(std::string("tokenizer: ") + key + " = " + std::to_string(id.value()) +
                         " is outside the vocabulary of " + std::to_string(v.n_tokens()));
  }
  *out = int32_t(id.value());
  return Status();
}

}  // namespace

Result<Vocab> Vocab::from_gguf(const GgufFile& file) {
  Vocab v;
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (model.value() == "llama") {
    v.kind = TokenizerKind::spm;
  } else if (model.value() == "gpt2") {
    v.kind = TokenizerKind::bpe;
  } else {
    return Status::error("tokenizer: tokenizer.ggml.model '" + model.value().substr(0, 64) + "' is not supported (llama, gpt2)");
  }
  auto pre = file.get_string_or("tokenizer.ggml.pre", "default");
  if (!pre.ok()) return pre.status();
  v.pre = pre.value();

  auto tokens = file.get_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  const GgufArray& token_texts = *tokens.value();
  const size_t n = token_texts.size();
  if (n == 0 || n > k_max_vocab) {
    return Status::error("tokenizer: tokenizer.ggml.tokens has " + std::to_string(n) + " entries (1 to " + std::to_string(k_max_vocab) + " allowed)");
  }
  if (token_texts.element_type() != GgufType::string) return Status::error("tokenizer: tokenizer.ggml.tokens must be an array of strings");
  v.tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) v.tokens.emplace_back(*token_texts.string(i));
  for (size_t i = 0; i < n; ++i) v.token_to_id[v.tokens[i]] = int32_t(i);

  v.scores.assign(n, 0.0f);
  if (file.find("tokenizer.ggml.scores")) {
    auto scores = file.get_array("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    if (scores.value()->size() != n) {
      return Status::error("tokenizer: tokenizer.ggml.scores has " + std::to_string(scores.value()->size()) +
                           " entries and tokenizer.ggml.tokens " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      const auto f = scores.value()->real(i);
      if (!f) return Status::error("tokenizer: tokenizer.ggml.scores must hold floats");
      if (!std::isfinite(*f)) return Status::error("tokenizer: tokenizer.ggml.scores[" + std::to_string(i) + "] is not finite");
      v.scores[i] = float(*f);
    }
  }
  v.types.assign(n, TokenType::normal);
  if (file.find("tokenizer.ggml.token_type")) {
    auto types = file.get_array("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    if (types.value()->size() != n) {
      return Status::error("tokenizer: tokenizer.ggml.token_type has " + std::to_string(types.value()->size()) +
                           " entries and tokenizer.ggml.tokens " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t value = types.value()->integer(i).value_or(-1);
      if (value < 0 || value > 6) {
        return Status::error("tokenizer: tokenizer.ggml.token_type[" + std::to_string(i) + "] is not a known type (integers 0-6)");
      }
      v.types[i] = TokenType(value);
    }
  }
  if (v.kind == TokenizerKind::bpe) {
    auto merges = file.get_array("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status();
    const GgufArray& pairs = *merges.value();
    if (pairs.size() > k_max_merges) {
      return Status::error("tokenizer: tokenizer.ggml.merges has " + std::to_string(pairs.size()) + " entries (at most " +
                           std::to_string(k_max_merges) + ")");
    }
    for (size_t rank = 0; rank < pairs.size(); ++rank) {
      const auto s = pairs.string(rank);
      const size_t space = s ? s->find(' ', 1) : std::string::npos;
      if (space == std::string::npos) return Status::error("tokenizer: tokenizer.ggml.merges[" + std::to_string(rank) + "] is not 'left right'");
      v.merge_rank.emplace(std::string(*s), int32_t(rank));
    }
  }

  DS_RETURN_IF_ERROR(read_token_id(file, "tokenizer.ggml.bos_token_id", v, &v.bos));
  DS_RETURN_IF_ERROR(read_token_id(file, "tokenizer.ggml.eos_token_id", v, &v.eos));
  DS_RETURN_IF_ERROR(read_token_id(file, "tokenizer.ggml.unknown_token_id", v, &v.unk));
  DS_RETURN_IF_ERROR(read_token_id(file, "tokenizer.ggml.eot_token_id", v, &v.eot));
  DS_RETURN_IF_ERROR(read_token_id(file, "tokenizer.ggml.padding_token_id", v, &v.pad));
  auto add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", v.kind == TokenizerKind::spm);
  auto add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  auto add_space = file.get_bool_or("tokenizer.ggml.add_space_prefix", v.kind == TokenizerKind::spm);
  if (!add_bos.ok()) return add_bos.status();
  if (!add_eos.ok()) return add_eos.status();
  if (!add_space.ok()) return add_space.status();
  v.add_bos = add_bos.value() && v.bos != k_no_token;
  v.add_eos = add_eos.value() && v.eos != k_no_token;
  v.add_space_prefix = add_space.value();

  // End of a reply: the declared ids plus the chat formats' end markers.
  for (int32_t id : {v.eos, v.eot}) {
    if (id != k_no_token) v.end_of_generation.push_back(id);
  }
  for (const char* text : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<｜end▁of▁sentence｜>", "<|endoftext|>"}) {
    const int32_t id = v.find(text);
    if (id != k_no_token && v.is_special(id) &&
        std::find(v.end_of_generation.begin(), v.end_of_generation.end(), id) == v.end_of_generation.end()) {
      v.end_of_generation.push_back(id);
    }
  }
  return v;
}

}  // namespace ds

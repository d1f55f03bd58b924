#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace ds {
namespace {

// GPT-2's byte-level alphabet: printable bytes map to themselves, the others
// to code points from 256 up, so every byte is one visible character.
struct ByteAlphabet {
  std::array<std::string, 256> byte_to_text;
  std::unordered_map<uint32_t, uint8_t> codepoint_to_byte;

  ByteAlphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? uint32_t(b) : next++;
      append_utf8(byte_to_text[size_t(b)], cp);
      codepoint_to_byte[cp] = uint8_t(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

// A run of symbols being merged: a doubly linked list over the word's bytes.
struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t length;
};

std::vector<Symbol> split_chars(const std::string& text) {
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t n = std::min(text.size() - offset, utf8_sequence_length(static_cast<unsigned char>(text[offset])));
    const int index = int(symbols.size());
    symbols.push_back({index - 1, offset + n == text.size() ? -1 : index + 1, offset, n});
    offset += n;
  }
  return symbols;
}

// Repeatedly merges the adjacent pair that `priority` ranks highest (ties:
// the leftmost), until no adjacent pair is ranked. priority(left, right)
// returns nullopt for a pair that may not merge. Merged-away symbols keep
// length 0; the survivors stay linked through next/prev.
template <typename Priority>
void merge_symbols(const std::string& text, std::vector<Symbol>& symbols, Priority priority) {
  struct Bigram {
    int left, right;
    float priority;
    size_t length;
  };
  auto lower = [](const Bigram& a, const Bigram& b) {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[size_t(left)];
    const Symbol& r = symbols[size_t(right)];
    const std::optional<float> p = priority(std::string_view(text).substr(l.offset, l.length),
                                            std::string_view(text).substr(r.offset, r.length));
    if (p) queue.push({left, right, *p, l.length + r.length});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(bigram.left)];
    Symbol& right = symbols[size_t(bigram.right)];
    // Stale entries: one side has merged since the pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length ||
        left.next != bigram.right) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
}

const std::string k_spm_space = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  return catching_exceptions("tokenizer", [&] { return build(file); });
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::build(const GgufFile& file) {
  auto vocab = Vocab::from_gguf(file);
  if (!vocab.ok()) return vocab.status();
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_ = vocab.take();
  const Vocab& v = t->vocab_;
  if (v.kind == TokenizerKind::bpe) {
    auto pre = Pretokenizer::create(v.pre);
    if (!pre.ok()) return pre.status();
    t->pretokenizer_ = pre.take();
  }
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    if (v.is_special(id) && !v.tokens[size_t(id)].empty()) t->special_by_length_.push_back(id);
  }
  t->max_token_bytes_ = 1;
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    t->max_token_bytes_ = std::max({t->max_token_bytes_, v.tokens[size_t(id)].size(), t->token_to_piece(id, true).size()});
  }
  std::stable_sort(t->special_by_length_.begin(), t->special_by_length_.end(), [&](int32_t a, int32_t b) {
    return v.tokens[size_t(a)].size() > v.tokens[size_t(b)].size();
  });
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    t->byte_tokens_[b] = v.find(name);
  }
  return t;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(vocab_.end_of_generation.begin(), vocab_.end_of_generation.end(), id) !=
         vocab_.end_of_generation.end();
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw_text, bool add_special, bool parse_special) const {
  const std::string text = sanitize_utf8(raw_text);
  // Cut the text into raw fragments and special tokens, longest special first.
  struct Fragment {
    int32_t token;  // k_no_token for raw text
    size_t offset, length;
  };
  std::vector<Fragment> fragments{{k_no_token, 0, text.size()}};
  for (int32_t special : special_by_length_) {
    const TokenType type = vocab_.types[size_t(special)];
    if (!parse_special && type != TokenType::user_defined) continue;
    const std::string& needle = vocab_.tokens[size_t(special)];
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.token != k_no_token) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.offset;
      const size_t end = f.offset + f.length;
      for (size_t at = text.find(needle, begin); at != std::string::npos && at + needle.size() <= end;
           at = text.find(needle, begin)) {
        if (at > begin) next.push_back({k_no_token, begin, at - begin});
        next.push_back({special, at, needle.size()});
        begin = at + needle.size();
      }
      if (begin < end) next.push_back({k_no_token, begin, end - begin});
    }
    fragments.swap(next);
  }

  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
  bool previous_was_special = true;
  for (const Fragment& f : fragments) {
    if (f.token != k_no_token) {
      out.push_back(f.token);
      previous_was_special = true;
      continue;
    }
    if (f.length == 0) continue;
    std::string fragment = text.substr(f.offset, f.length);
    if (vocab_.kind == TokenizerKind::spm) {
      // SentencePiece adds a space before text that starts the input or follows a special token.
      if (vocab_.add_space_prefix && previous_was_special) fragment.insert(0, " ");
      encode_spm(replace_all(fragment, " ", k_spm_space), out);
    } else {
      encode_bpe(fragment, out);
    }
    previous_was_special = false;
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
  return out;
}

// SentencePiece BPE: repeatedly merge the adjacent pair whose concatenation is
// the highest-scoring vocabulary entry; characters left unknown fall back to
// byte tokens.
void Tokenizer::encode_spm(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols = split_chars(text);
  merge_symbols(text, symbols, [&](std::string_view left, std::string_view right) -> std::optional<float> {
    const int32_t id = vocab_.find(std::string(left) + std::string(right));
    if (id == k_no_token) return std::nullopt;
    return vocab_.scores[size_t(id)];
  });
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    const std::string piece = text.substr(s.offset, s.length);
    const int32_t id = vocab_.find(piece);
    if (id != k_no_token) {
      out.push_back(id);
      continue;
    }
    for (unsigned char byte : piece) {
      const int32_t byte_id = byte_tokens_[byte];
      out.push_back(byte_id != k_no_token ? byte_id : vocab_.unk);
    }
  }
}

void Tokenizer::encode_bpe(const std::string& text, std::vector<int32_t>& out) const {
  const ByteAlphabet& alphabet = byte_alphabet();
  for (const std::string& word : pretokenizer_->split(text)) {
    std::string encoded;
    for (unsigned char byte : word) encoded += alphabet.byte_to_text[byte];
    encode_bpe_word(encoded, out);
  }
}

// Byte-level BPE: merge the adjacent pair with the lowest merge rank until no
// ranked pair remains.
void Tokenizer::encode_bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  if (pretokenizer_->ignore_merges()) {
    const int32_t id = vocab_.find(word);
    if (id != k_no_token) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols = split_chars(word);
  merge_symbols(word, symbols, [&](std::string_view left, std::string_view right) -> std::optional<float> {
    std::string key(left);
    key += ' ';
    key += right;
    auto it = vocab_.merge_rank.find(key);
    if (it == vocab_.merge_rank.end()) return std::nullopt;
    return -float(it->second);  // lower rank merges first
  });
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    const std::string piece = word.substr(s.offset, s.length);
    const int32_t id = vocab_.find(piece);
    if (id != k_no_token) {
      out.push_back(id);
      continue;
    }
    // Not in the vocabulary (a vocabulary without some byte): emit what exists, byte by byte.
    for (char byte : piece) {
      const int32_t byte_id = vocab_.find(std::string(1, byte));
      if (byte_id != k_no_token) out.push_back(byte_id);
    }
  }
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.n_tokens()) return {};
  const std::string& text = vocab_.tokens[size_t(id)];
  switch (vocab_.types[size_t(id)]) {
    case TokenType::control:
    case TokenType::unknown:
      return render_special ? text : std::string();
    case TokenType::user_defined:
      return text;
    case TokenType::byte:
      if (vocab_.kind == TokenizerKind::spm && text.size() == 6) {
        return std::string(1, char(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
      }
      break;
    case TokenType::undefined:
    case TokenType::normal:
    case TokenType::unused:
      break;
  }
  if (vocab_.kind == TokenizerKind::spm) return replace_all(text, k_spm_space, " ");
  // Byte-level BPE: each character stands for one byte.
  const ByteAlphabet& alphabet = byte_alphabet();
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::max<size_t>(1, utf8_valid_length(text, i));
    uint32_t cp = static_cast<unsigned char>(text[i]) & (0xFF >> (n == 1 ? 0 : n + 1));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    auto it = alphabet.codepoint_to_byte.find(cp);
    if (it != alphabet.codepoint_to_byte.end()) {
      bytes += char(it->second);
    } else {
      bytes.append(text, i, n);
    }
    i += n;
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  // SentencePiece's prefix space is not part of the text.
  if (vocab_.kind == TokenizerKind::spm && vocab_.add_space_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace ds

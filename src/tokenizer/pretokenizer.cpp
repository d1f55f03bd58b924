#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ds {
namespace {

// The rule sets, written as the models' tokenizer.json files define them
// (case-insensitive contractions spelled out).
const char* const k_gpt2[] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
};
// llama.cpp's rules for a BPE vocabulary that names no pre-tokenizer.
const char* const k_default[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};
const char* const k_llama3[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
const char* const k_qwen2[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
const char* const k_deepseek_llm[] = {
    R"([\r\n])",
    // Cased letters (Unicode L&), spelled as code points so no editor can normalise them.
    R"(\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293})"
    R"(\x{295}-\x{2af}\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a}\x{38c})"
    R"(\x{38e}-\x{3a1}\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556}\x{10a0}-\x{10c5})"
    R"(\x{13a0}-\x{13f5}\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf}\x{1d00}-\x{1d2b})"
    R"(\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a}\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d}\x{1f20}-\x{1f45})"
    R"(\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b}\x{1f5d}\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4})"
    R"(\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4}\x{1fc6}-\x{1fcc}\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb})"
    R"(\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4}\x{1ff6}-\x{1ffc}\x{2102}\x{2107}\x{210a}-\x{2113}\x{2115})"
    R"(\x{2119}-\x{211d}\x{2124}\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134}\x{2139})"
    R"(\x{213c}-\x{213f}\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4})"
    R"(\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f})"
    R"(\x{a771}-\x{a787}\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17})"
    R"(\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a}\x{10400}-\x{1044f}\x{104b0}-\x{104d3}\x{104d8}-\x{104fb})"
    R"(\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2}\x{118a0}-\x{118df}\x{1e900}-\x{1e943}]+)",
    R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
    R"(\s+$)",
    R"([一-龥ࠀ-一가-퟿]+)",
    R"(\p{N}+)",
};
const char* const k_deepseek_coder[] = {
    R"([\r\n])",
    R"(\s?\p{L}+)",
    R"(\s?\p{P}+)",
    R"([一-龥ࠀ-一가-퟿]+)",
    R"(\p{N})",
};
const char* const k_deepseek_v3[] = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

struct RuleSet {
  const char* name;
  const char* const* regexes;
  size_t n_regexes;
  bool ignore_merges;
};

template <size_t N>
constexpr RuleSet rules(const char* name, const char* const (&regexes)[N], bool ignore_merges = false) {
  return RuleSet{name, regexes, N, ignore_merges};
}

const RuleSet k_rule_sets[] = {
    rules("default", k_default),
    rules("gpt-2", k_gpt2),
    rules("llama-bpe", k_llama3, true),
    rules("llama3", k_llama3, true),
    rules("qwen2", k_qwen2),
    rules("deepseek-r1-qwen", k_qwen2),
    rules("deepseek-llm", k_deepseek_llm),
    rules("deepseek-coder", k_deepseek_coder),
    rules("deepseek-v3", k_deepseek_v3),
};

}  // namespace

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::create(const std::string& pre_name) {
  const RuleSet* found = nullptr;
  std::string known;
  for (const RuleSet& set : k_rule_sets) {
    if (pre_name == set.name) found = &set;
    known += std::string(known.empty() ? "" : ", ") + set.name;
  }
  if (!found) return Status::error("tokenizer: tokenizer.ggml.pre '" + pre_name.substr(0, 64) + "' is not supported (known: " + known + ")");
  std::unique_ptr<Pretokenizer> p(new Pretokenizer());
  p->ignore_merges_ = found->ignore_merges;
  for (size_t i = 0; i < found->n_regexes; ++i) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto* compiled = new Compiled();
    p->regexes_.push_back(compiled);
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(found->regexes[i]), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &error,
                                   &error_offset, nullptr);
    if (!compiled->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return Status::error(std::string("tokenizer: regex of '") + pre_name + "' does not compile: " +
                           reinterpret_cast<char*>(message));
    }
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  }
  return p;
}

Pretokenizer::~Pretokenizer() {
  for (Compiled* c : regexes_) delete c;
}

std::vector<std::string> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Compiled* regex : regexes_) {
    // Match data per call: split() runs on several threads at once (the server's prepare pool).
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
    DS_CHECK(match != nullptr, "pcre2 match data allocation failed");
    next.clear();
    for (const std::string& piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0, gap_start = 0;
      // The first call checks the UTF-8 of the whole piece; later calls skip
      // the check, which would read from `start` to the end each time (a
      // 128K-token prompt's text took minutes).
      uint32_t options = 0;
      while (start <= piece.size()) {
        // Invalid UTF-8 in the input: PCRE2 rejects it, and the rest stays one piece.
        const int rc = pcre2_match(regex->code, subject, piece.size(), start, options, match.get(), nullptr);
        if (rc < 0) break;
        options = PCRE2_NO_UTF_CHECK;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t match_begin = ovector[0], match_end = ovector[1];
        if (match_end == match_begin) {  // empty match: step over one character
          start = match_end + 1;
          while (start < piece.size() && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) ++start;
          continue;
        }
        if (match_begin > gap_start) next.emplace_back(piece, gap_start, match_begin - gap_start);
        next.emplace_back(piece, match_begin, match_end - match_begin);
        gap_start = start = match_end;
      }
      if (gap_start < piece.size()) next.emplace_back(piece, gap_start, piece.size() - gap_start);
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace ds

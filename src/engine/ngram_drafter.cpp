#include "engine/ngram_drafter.h"

#include <algorithm>

namespace ds {

std::vector<int32_t> propose_ngram_draft(const SpeculationConfig& config, const std::vector<int32_t>& tokens,
                                         int32_t max_tokens) {
  const int64_t len = int64_t(tokens.size());
  for (int64_t n = std::min<int64_t>(config.ngram_max, len - 1); n >= config.ngram_min && max_tokens > 0; --n) {
    const int32_t* suffix = tokens.data() + len - n;
    // The latest earlier occurrence, so that the draft follows the most recent context.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      const int64_t from = start + n, count = std::min<int64_t>(max_tokens, len - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

}  // namespace ds

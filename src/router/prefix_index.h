#pragma once
// Which instance has probably cached a prompt's prefix, as SGLang's router
// keeps it, approximately and in bounded memory: a prompt's text is cut into
// 64-byte blocks, each named by a hash chained over the blocks before it
// (vLLM's block hashes, on text), and every instance remembers the hashes of
// the prompts sent to it, least recently used forgotten first. A prompt's
// match with an instance is the number of its leading blocks that instance
// has seen: the turns of one conversation, or prompts sharing a long system
// prefix, match where the earlier ones went.

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ds {

class PrefixIndex {
 public:
  static constexpr size_t k_block_bytes = 64;

  explicit PrefixIndex(size_t max_blocks_per_instance) : max_blocks_(max_blocks_per_instance) {}

  // The chained hashes of `text`'s whole blocks (a partial last block is left out).
  static std::vector<uint64_t> block_hashes(const std::string& text);
  // How many leading blocks `instance` has seen. Thread-safe.
  size_t match(const std::string& instance, const std::vector<uint64_t>& blocks) const;
  // Records that `instance` took a prompt with these blocks. Thread-safe.
  void insert(const std::string& instance, const std::vector<uint64_t>& blocks);

 private:
  struct Seen {
    std::list<uint64_t> order;  // most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  size_t max_blocks_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Seen> seen_;
};

}  // namespace ds

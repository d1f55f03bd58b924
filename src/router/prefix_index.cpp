#include "router/prefix_index.h"

namespace ds {

std::vector<uint64_t> PrefixIndex::block_hashes(const std::string& text) {
  std::vector<uint64_t> hashes;
  uint64_t h = 1469598103934665603ull;  // FNV-1a, continued from block to block
  for (size_t at = 0; at + k_block_bytes <= text.size(); at += k_block_bytes) {
    for (size_t i = at; i < at + k_block_bytes; ++i) h = (h ^ static_cast<unsigned char>(text[i])) * 1099511628211ull;
    hashes.push_back(h);
  }
  return hashes;
}

size_t PrefixIndex::match(const std::string& instance, const std::vector<uint64_t>& blocks) const {
  std::lock_guard lock(mutex_);
  auto it = seen_.find(instance);
  if (it == seen_.end()) return 0;
  size_t n = 0;
  while (n < blocks.size() && it->second.where.count(blocks[n])) ++n;
  return n;
}

void PrefixIndex::insert(const std::string& instance, const std::vector<uint64_t>& blocks) {
  std::lock_guard lock(mutex_);
  Seen& seen = seen_[instance];
  for (uint64_t block : blocks) {
    auto it = seen.where.find(block);
    if (it != seen.where.end()) seen.order.erase(it->second);
    seen.order.push_front(block);
    seen.where[block] = seen.order.begin();
  }
  while (seen.order.size() > max_blocks_) {
    seen.where.erase(seen.order.back());
    seen.order.pop_back();
  }
}

}  // namespace ds

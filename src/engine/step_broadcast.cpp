#include "engine/step_broadcast.h"

#include <vector>

#include "base/log.h"

namespace ds {
namespace {

// A step on the wire: int32 words, a header then the arrays.
//   n_tokens (-1: the leader has ended), n_sequences, has_window_tables,
//   n_logit_tokens, tokens, positions, seq_of_token, the logit tokens, then
//   each sequence's page count and pages, then (with window tables) the same
//   of its window pages.
// Every rank computes its part of the logits (the output head is split by
// vocabulary); only rank 0 keeps them. Hidden states are rank 0's alone.
void put_tables(std::vector<int32_t>& words, const std::vector<BlockTableView>& tables) {
  for (const BlockTableView& t : tables) {
    words.push_back(t.n_pages);
    words.insert(words.end(), t.pages, t.pages + t.n_pages);
  }
}

void send_words(Collective& ranks, std::vector<int32_t>& words) {
  int64_t n = int64_t(words.size());
  ranks.broadcast(&n, sizeof(n), 0);
  ranks.broadcast(words.data(), size_t(n) * sizeof(int32_t), 0);
}

}  // namespace

KvCacheOptions share_cache_options(Collective& ranks, const KvCacheOptions& options) {
  static_assert(sizeof(KvCacheOptions) == 5 * sizeof(int64_t), "a field added to KvCacheOptions is to be sent here too");
  int64_t fields[5] = {int64_t(options.dtype), options.page_tokens, options.n_pages, options.n_window_pages, options.draft_tokens};
  ranks.broadcast(fields, sizeof(fields), 0);
  return KvCacheOptions{DType(fields[0]), fields[1], fields[2], fields[3], fields[4]};
}

void send_step(Collective& ranks, const Batch& batch) {
  std::vector<int32_t> words = {int32_t(batch.n_tokens()), int32_t(batch.block_tables.size()), batch.window_tables.empty() ? 0 : 1,
                                int32_t(batch.logit_tokens.size())};
  words.insert(words.end(), batch.tokens.begin(), batch.tokens.end());
  words.insert(words.end(), batch.positions.begin(), batch.positions.end());
  words.insert(words.end(), batch.seq_of_token.begin(), batch.seq_of_token.end());
  words.insert(words.end(), batch.logit_tokens.begin(), batch.logit_tokens.end());
  put_tables(words, batch.block_tables);
  put_tables(words, batch.window_tables);
  send_words(ranks, words);
}

StepLeader::~StepLeader() {
  if (!ranks_ || ranks_->rank() != 0) return;
  std::vector<int32_t> words = {-1};
  send_words(*ranks_, words);
}

Status follow_steps(Model& model, KvCache& cache, Collective& ranks) {
  std::vector<int32_t> words;
  std::vector<std::vector<int32_t>> pages;
  Batch batch;
  for (;;) {
    int64_t n = 0;
    ranks.broadcast(&n, sizeof(n), 0);
    words.resize(size_t(n));
    ranks.broadcast(words.data(), size_t(n) * sizeof(int32_t), 0);
    if (n == 0 || words[0] < 0) return Status();
    size_t at = 4;
    const auto take = [&](size_t count) {
      DS_CHECK(at + count <= words.size(), "a step from rank 0 ends early");
      std::vector<int32_t> part(words.begin() + int64_t(at), words.begin() + int64_t(at + count));
      at += count;
      return part;
    };
    const size_t n_tokens = size_t(words[0]), n_sequences = size_t(words[1]);
    batch.tokens = take(n_tokens);
    batch.positions = take(n_tokens);
    batch.seq_of_token = take(n_tokens);
    batch.logit_tokens = take(size_t(words[3]));
    pages.clear();
    for (size_t s = 0; s < n_sequences * (words[2] ? 2 : 1); ++s) pages.push_back(take(size_t(take(1)[0])));
    batch.block_tables.clear();
    batch.window_tables.clear();
    for (size_t s = 0; s < pages.size(); ++s) {
      (s < n_sequences ? batch.block_tables : batch.window_tables).push_back(BlockTableView{pages[s].data(), int32_t(pages[s].size())});
    }
    const Status status = model.forward(batch, cache, nullptr);
    if (!status.ok()) DS_LOG_DEBUG("rank %d: step refused as on rank 0: %s", ranks.rank(), status.message().c_str());
  }
}

}  // namespace ds

#pragma once
// DeepSeek-V4's KV compressors (../shared/DEEPSEEK-V32-V4.md sections 2.2
// and 3): every token's projections are stored in its window page (the state
// stream, windowed), and the token that completes a block forms the block's
// row from the projections of the tokens it pools, before any attention of
// the step reads it, into the page of the block's last token. A page may keep
// only a ring of its last projections (KvStream::ring_horizon): the step's
// own come from its inputs, earlier ones from the ring, rounded to the KV type
// alike. Everything stored depends only on the sequence's prefix, so pages
// are shared, reused and recomputed like any KV row: a prompt split into
// chunks anywhere forms the same rows.

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/deepseek4_params.h"
#include "tensor/kv_layer_view.h"

namespace ds {

// Compressed row b of a stream with one row per `ratio` tokens in pages of
// page_tokens tokens (KvStream): where its bytes are, in the page of the
// block's last token.
uint8_t* compressed_row(const KvLayerView& rows, const BlockTableView& table, int64_t ratio, int64_t page_tokens, int64_t b);

// Each token's state row [kv | score + ape[position % ratio]] (kv and
// score: [n_tokens, c.width()]) goes into `state` (2 * c.width() wide, in the
// window pages of window_tables: position p at slot p % state.page_tokens of
// the page of p, so a page with fewer rows than tokens is a ring), then the
// row of every block a token of the step completes ((position + 1) % ratio
// == 0) forms into `rows` (in the pages of tables). A sequence's tokens in the
// step are consecutive positions, in order.
void kv_compress(ThreadPool& pool, const KvCompressorParams& c, const float* kv, const float* score, int64_t n_tokens,
                 const int32_t* positions, const int32_t* seq_of_token, const BlockTableView* tables,
                 const BlockTableView* window_tables, int64_t page_tokens, const KvLayerView& state, const KvLayerView& rows);

}  // namespace ds

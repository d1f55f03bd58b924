#pragma once
// DeepSeek-V4's attention (../shared/DEEPSEEK-V32-V4.md section 2.2): one
// key head whose keys are its values, over the token's raw window (its last
// `window` positions, the token's own included) and, in a compressing layer,
// the compressed rows whose blocks are complete: all of them, or the
// lightning indexer's selection. Each head's softmax counts a sink logit in
// its denominator.

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/deepseek4_params.h"
#include "tensor/kv_layer_view.h"

namespace ds {

// q: [n_tokens, n_head, head_dim]; window: a stream of one row per token, in
// the window pages of window_tables;
// rows: the layer's compressed rows (one per a.ratio tokens, pages of
// page_tokens tokens), unused when a.ratio is 0; selected / n_selected: per
// token a.top_k row indices and their count, or null for every visible row.
// out: [n_tokens, n_head, head_dim]. Sums run over the window in position
// order, then the rows in index order.
void compressed_attention(ThreadPool& pool, const CompressedAttentionParams& a, const float* q, int64_t n_tokens, const int32_t* positions,
                          const int32_t* seq_of_token, const BlockTableView* tables, const BlockTableView* window_tables,
                          int64_t page_tokens, const KvLayerView& window, const KvLayerView& rows, const int32_t* selected,
                          const int32_t* n_selected, float* out);

}  // namespace ds

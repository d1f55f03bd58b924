#pragma once
// One loaded version of the served model — its weights, KV pool, tokenizer,
// chat template and the engine that runs them — and the set of versions an
// instance holds while a swap retires one and makes another current.
//
// A request takes the current version when it arrives and holds it (a
// shared_ptr) to its last byte: a version retired by a swap finishes what it
// started, and is freed when nobody but the set holds it any more.
//
//   loading ──(warm, checked)──► current ──(swap)──► retiring ──(last holder gone)──► released

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/draft_model.h"
#include "engine/mtp_drafter.h"
#include "engine/engine.h"
#include "engine/step_broadcast.h"
#include "engine/kv_disk_tier.h"
#include "grammar/token_matcher.h"
#include "grammar/vocab_trie.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "template/tool_call_parser.h"
#include "tokenizer/tokenizer.h"

namespace ds {

class ModelVersion {
 public:
  ModelVersion() = default;
  ~ModelVersion();  // the engine first: it finishes its step before the model and pages go
  ModelVersion(const ModelVersion&) = delete;
  ModelVersion& operator=(const ModelVersion&) = delete;

  std::string label;  // the operator's name for it: responses' system_fingerprint and X-Model-Version, the access log
  std::string path;   // the GGUF it came from
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> memory;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  ChatSpecialTokens special_tokens;
  ToolCallFormat tool_call_format = ToolCallFormat::none;  // how replies' tool calls are parsed
  int64_t weight_file_bytes = 0;  // the GGUF's size: what the weights keep resident
  int64_t kv_pool_bytes = 0;
  std::chrono::system_clock::time_point loaded_at;
  std::vector<std::pair<std::string, double>> load_phases;  // seconds by phase, in order: where the load went
  double load_seconds = 0;  // all of them
  std::unique_ptr<DraftModel> draft_model;  // --draft-model's, when given: the engine drafts with it
  std::unique_ptr<MtpDrafter> mtp_drafter;  // --speculative-mtp's, when given
  std::unique_ptr<KvDiskTier> kv_disk;      // --kv-disk-dir's, when given: outlives the engine
  std::unique_ptr<Engine> engine;
  // Tensor parallel: this version on the other ranks, released there when it goes here.
  std::unique_ptr<RankVersion> on_ranks;

  // Generation and embedding requests admitted on this version and not yet finished.
  std::atomic<int64_t> in_flight{0};

  // A matcher for a GBNF grammar over this version's vocabulary; the recent
  // grammars are kept, so requests with the same grammar share a cache of masks.
  Result<grammar::TokenMatcher> matcher_for(const std::string& gbnf);
  // The fewest tokens `text` can encode to (its bytes / the longest token's).
  int64_t min_tokens(const std::string& text) const { return int64_t(text.size()) / int64_t(tokenizer->max_token_bytes()); }

 private:
  std::mutex grammar_mutex_;
  std::shared_ptr<const grammar::VocabTrie> vocab_trie_;  // built at the first grammar
  std::vector<std::pair<std::string, grammar::TokenMatcher>> recent_grammars_;  // most recent last
};

class ModelVersions {
 public:
  explicit ModelVersions(std::shared_ptr<ModelVersion> first);

  // The version new requests go to; null while a drain-first swap has none.
  std::shared_ptr<ModelVersion> current() const;
  // Every version still loaded: the current one first, then those retiring.
  std::vector<std::shared_ptr<ModelVersion>> live() const;
  // Makes `next` current (null: none, for a drain-first swap; a retiring
  // version: it serves again); the one it replaces retires. Returns the
  // retired one's label, or "" if there was none.
  std::string switch_to(std::shared_ptr<ModelVersion> next);
  // Frees the retiring versions nobody else holds (their requests have all
  // ended); returns their labels. Frees outside the lock: an engine takes a step to stop.
  std::vector<std::string> release_unheld();

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<ModelVersion> current_;
  std::vector<std::shared_ptr<ModelVersion>> retiring_;
};

}  // namespace ds

#pragma once
// Tensor parallel's one scheduler: rank 0 runs the command (the engine, its
// scheduler and sampler, the server) and, before each forward of its split
// model, broadcasts the step (tokens, positions, block tables); every other
// rank runs the same forward over its part of the model and its own KV
// pages, which mirror rank 0's page for page, and its part of the logits
// (the output head is split by vocabulary), which only rank 0 keeps.
//
// Under serve the messages also make and free model versions on every rank,
// so a hot swap happens on all of them: rank 0 says which version each step
// is of, the other ranks load a version beside the one they run (in the
// background, while its steps go on), size its pages as rank 0 says, report
// whether they could, and free it when rank 0 does. The two versions'
// engines take turns: a step holds the ranks from its broadcast to the end
// of its forward, whose collectives the ranks run together.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "parallel/collective.h"

namespace ds {

// Rank 0's KV cache options, on every rank: the others' pages mirror its
// pages, whatever each rank's free memory would have made of its defaults.
// For a command of one version, before its first step.
KvCacheOptions share_cache_options(Collective& ranks, const KvCacheOptions& options);

// Rank 0's end of the messages. Its destruction tells the other ranks to end,
// however the command ends.
class StepSender {
 public:
  explicit StepSender(Collective& ranks) : ranks_(ranks) {}
  StepSender(const StepSender&) = delete;
  StepSender& operator=(const StepSender&) = delete;
  ~StepSender();

  Collective& ranks() const { return ranks_; }
  // Sends `version`'s step; the returned lock holds the ranks until it goes,
  // after the step's forward.
  std::unique_lock<std::mutex> step(int32_t version, const Batch& batch);
  // serve's versions. load: the other ranks start loading `version` from
  // `words` (its request, for follow_versions' caller to read); its pages:
  // rank 0's options, returned as share_cache_options does; loaded: how many
  // other ranks could not make it (each logs why), once all have tried; release: they free it.
  // in_turn: they load it before taking the next message (a load whose
  // backend joins device collectives makes collective calls of its own;
  // nothing else may run meanwhile), else beside the steps that follow.
  void load(int32_t version, const std::vector<std::string>& words, bool in_turn);
  KvCacheOptions cache_options(int32_t version, const KvCacheOptions& options);
  int loaded(int32_t version);
  void release(int32_t version);
  // The disk tier's moves of one page (`window`: a window page) of `version`,
  // whose pages here are `mine`: every rank's part of it, in rank order, into
  // `all` (`split`: its ModelConfig::kv_split), or this rank's alone (a row
  // whole on every rank); and back from `all` into every rank's pages.
  void page_out(int32_t version, bool split, bool window, int32_t page, const KvCache& mine, uint8_t* all);
  void page_in(int32_t version, bool split, bool window, int32_t page, KvCache& mine, const uint8_t* all);

 private:
  void send(std::vector<int32_t>& words);  // the caller holds mutex_
  Collective& ranks_;
  std::mutex mutex_;
};

// Which version's steps an engine sends, and through what (null: one process).
struct RankSteps {
  StepSender* sender = nullptr;
  int32_t version = 0;
};

// Rank 0's hold on one version of serve's on the other ranks, from the load
// it sends when made to the release it sends when it goes.
class RankVersion {
 public:
  // words: what the other ranks make the version from; in_turn: StepSender::load's.
  RankVersion(StepSender& sender, int32_t version, const std::vector<std::string>& words, bool in_turn);
  RankVersion(const RankVersion&) = delete;
  RankVersion& operator=(const RankVersion&) = delete;
  ~RankVersion() { sender_.release(version_); }

  RankSteps steps() const { return {&sender_, version_}; }
  // The other ranks' pages as `options` (rank 0's own); then whether every rank could load it.
  KvCacheOptions cache_options(const KvCacheOptions& options) { return sender_.cache_options(version_, options); }
  Status loaded();

 private:
  StepSender& sender_;
  int32_t version_;
};

// The disk tier's hold on an engine's pages (KvTierLink): `memory`'s own, or
// under tensor parallel every rank's as StepSender::page_out and page_in move
// them, page_bytes and window_page_bytes then every rank's parts together.
KvTierLink tier_link(KvDiskTier* disk, const ModelConfig& config, KvCache& memory, RankSteps ranks);
// How many ranks' parts one of a split model's pages takes on disk: the
// ranks where each holds its part of the KV row, else 1.
int tier_parts(const ModelConfig& config);

// For a command of one version: rank 0's sender, null in one process and on the other ranks.
std::unique_ptr<StepSender> lead_steps(Collective* ranks);

// The other ranks: each step rank 0 sends, through `model` over `cache`
// (made as rank 0 made its own), until rank 0 ends. A forward that fails
// here failed on rank 0 too (the same checks of the same step). For the
// commands of one version (version 0).
Status follow_steps(Model& model, KvCache& cache, Collective& ranks);

// serve's other ranks: the versions rank 0 makes and frees.
struct FollowedVersion {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;
};
// Makes a version from rank 0's words; `pages` waits for the options its
// pages are to be made with (called once, between making the model and the
// cache), nullopt where rank 0 gave the version up. Run on a thread of its
// own per version, or in the loop for a load in turn.
using VersionMaker = std::function<Result<FollowedVersion>(const std::vector<std::string>& words,
                                                           const std::function<std::optional<KvCacheOptions>()>& pages)>;
Status follow_versions(Collective& ranks, const VersionMaker& make);

}  // namespace ds

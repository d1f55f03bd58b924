#include "engine/step_broadcast.h"

#include <cmath>
#include <future>
#include <map>

#include "base/log.h"

namespace ds {
namespace {

// A message on the wire: int32 words, its kind and version, then its body.
//   step:    n_tokens, n_sequences, has_window_tables, n_logit_tokens,
//            tokens, positions, seq_of_token, the logit tokens, then each
//            sequence's page count and pages, then (with window tables) the
//            same of its window pages
//   load:    in_turn, the number of strings, then each one's byte count and
//            bytes, four to a word, the first in the lowest byte
//   pages:   KvCacheOptions' five fields, two words each
//   page_out, page_in: window (0: a page, 1: a window page), the page
//   loaded, release, end: nothing
// Every rank computes its part of the logits (the output head is split by
// vocabulary); only rank 0 keeps them. Hidden states are rank 0's alone.
enum Kind : int32_t { k_end = -1, k_step = 0, k_load = 1, k_pages = 2, k_loaded = 3, k_release = 4, k_page_out = 5, k_page_in = 6 };

void put_tables(std::vector<int32_t>& words, const std::vector<BlockTableView>& tables) {
  for (const BlockTableView& t : tables) {
    words.push_back(t.n_pages);
    words.insert(words.end(), t.pages, t.pages + t.n_pages);
  }
}

void put_int64(std::vector<int32_t>& words, int64_t value) {
  words.push_back(int32_t(uint64_t(value) & 0xffffffffu));
  words.push_back(int32_t(uint64_t(value) >> 32));
}

std::vector<int32_t> pages_words(int32_t version, const KvCacheOptions& o) {
  static_assert(sizeof(KvCacheOptions) == 5 * sizeof(int64_t), "a field added to KvCacheOptions is to be sent here too");
  std::vector<int32_t> words = {k_pages, version};
  for (int64_t field : {int64_t(o.dtype), o.page_tokens, o.n_pages, o.n_window_pages, o.draft_tokens}) put_int64(words, field);
  return words;
}

void send_words(Collective& ranks, std::vector<int32_t>& words) {
  int64_t n = int64_t(words.size());
  ranks.broadcast(&n, sizeof(n), 0);
  ranks.broadcast(words.data(), size_t(n) * sizeof(int32_t), 0);
}

// The other ranks' end: one message at a time, read in order.
class Message {
 public:
  explicit Message(Collective& ranks) {
    int64_t n = 0;
    ranks.broadcast(&n, sizeof(n), 0);
    words_.resize(size_t(n));
    ranks.broadcast(words_.data(), size_t(n) * sizeof(int32_t), 0);
    DS_CHECK(words_.size() >= 2, "a message from rank 0 without its kind");
    if (kind() == k_end) ranks.job_ended();
  }
  // A message already at hand (share_cache_options' broadcast).
  explicit Message(std::vector<int32_t> words) : words_(std::move(words)) {}
  int32_t kind() const { return words_[0]; }
  int32_t version() const { return words_[1]; }
  std::vector<int32_t> take(size_t count) {
    DS_CHECK(at_ + count <= words_.size(), "a message from rank 0 ends early");
    std::vector<int32_t> part(words_.begin() + int64_t(at_), words_.begin() + int64_t(at_ + count));
    at_ += count;
    return part;
  }
  int32_t next() { return take(1)[0]; }
  int64_t next_int64() {
    const std::vector<int32_t> w = take(2);
    return int64_t(uint64_t(uint32_t(w[0])) | uint64_t(uint32_t(w[1])) << 32);
  }
  KvCacheOptions pages() {
    KvCacheOptions o;
    o.dtype = DType(next_int64());
    o.page_tokens = next_int64();
    o.n_pages = next_int64();
    o.n_window_pages = next_int64();
    o.draft_tokens = next_int64();
    return o;
  }
  std::vector<std::string> strings() {
    std::vector<std::string> out(static_cast<size_t>(next()));
    for (std::string& s : out) {
      s.resize(size_t(next()));
      const std::vector<int32_t> packed = take((s.size() + 3) / 4);
      for (size_t i = 0; i < s.size(); ++i) s[i] = char(uint32_t(packed[i / 4]) >> (8 * (i % 4)) & 0xffu);
    }
    return out;
  }

  // A step's batch (its tables point into `pages`, which must outlive it).
  void step(Batch& batch, std::vector<std::vector<int32_t>>& pages) {
    const size_t n_tokens = size_t(next()), n_sequences = size_t(next());
    const bool windows = next() != 0;
    const size_t n_logits = size_t(next());
    batch.tokens = take(n_tokens);
    batch.positions = take(n_tokens);
    batch.seq_of_token = take(n_tokens);
    batch.logit_tokens = take(n_logits);
    pages.clear();
    for (size_t s = 0; s < n_sequences * (windows ? 2 : 1); ++s) pages.push_back(take(size_t(next())));
    batch.block_tables.clear();
    batch.window_tables.clear();
    for (size_t s = 0; s < pages.size(); ++s) {
      (s < n_sequences ? batch.block_tables : batch.window_tables).push_back(BlockTableView{pages[s].data(), int32_t(pages[s].size())});
    }
  }

 private:
  std::vector<int32_t> words_;
  size_t at_ = 2;
};

int64_t part_bytes(const KvCache& cache, bool window) { return window ? cache.window_bytes() : cache.page_bytes(); }

void read_part(const KvCache& cache, bool window, int32_t page, uint8_t* host) {
  if (window) {
    cache.read_window_page(page, host);
  } else {
    cache.read_page(page, host);
  }
}

void write_part(KvCache& cache, bool window, int32_t page, const uint8_t* host) {
  if (window) {
    cache.write_window_page(page, host);
  } else {
    cache.write_page(page, host);
  }
}

// Every rank's part of a page into `all`, rank r's at r x its size: each
// rank's broadcast in turn (the pages move only when the disk tier writes one).
void gather_parts(Collective& ranks, const KvCache& mine, bool window, int32_t page, uint8_t* all) {
  const size_t part = size_t(part_bytes(mine, window));
  read_part(mine, window, page, all + size_t(ranks.rank()) * part);
  for (int r = 1; r < ranks.size(); ++r) ranks.broadcast(all + size_t(r) * part, part, r);
}

// A page's parts (all of them, or the one row every rank keeps) from rank 0 into each rank's pages.
void scatter_parts(Collective& ranks, KvCache& mine, bool split, bool window, int32_t page, const uint8_t* all_on_rank0) {
  const size_t part = size_t(part_bytes(mine, window)), parts = split ? size_t(ranks.size()) : 1;
  std::vector<uint8_t> received;
  const uint8_t* all = all_on_rank0;
  if (ranks.rank() != 0) {
    received.resize(part * parts);
    all = received.data();
  }
  ranks.broadcast(const_cast<uint8_t*>(all), part * parts, 0);  // read on rank 0, written on the others
  write_part(mine, window, page, all + (split ? size_t(ranks.rank()) * part : 0));
}

// The other ranks' side of a page_out or page_in message.
void move_page(Message& message, Model& model, KvCache& cache, Collective& ranks) {
  const bool window = message.next() != 0;
  const int32_t page = message.next();
  if (message.kind() == k_page_in) return scatter_parts(ranks, cache, model.config().kv_split, window, page, nullptr);
  std::vector<uint8_t> all(size_t(part_bytes(cache, window)) * size_t(ranks.size()));
  gather_parts(ranks, cache, window, page, all.data());
}

void run_step(Message& message, Model& model, KvCache& cache, Collective& ranks) {
  Batch batch;
  std::vector<std::vector<int32_t>> pages;
  message.step(batch, pages);
  const Status status = model.forward(batch, cache, nullptr);
  if (!status.ok()) DS_LOG_DEBUG("rank %d: step refused as on rank 0: %s", ranks.rank(), status.message().c_str());
}

}  // namespace

KvCacheOptions share_cache_options(Collective& ranks, const KvCacheOptions& options) {
  std::vector<int32_t> words = pages_words(0, options);
  ranks.broadcast(words.data(), words.size() * sizeof(int32_t), 0);
  Message fields(std::move(words));
  return fields.pages();
}

std::unique_ptr<StepSender> lead_steps(Collective* ranks) {
  return ranks && ranks->rank() == 0 ? std::make_unique<StepSender>(*ranks) : nullptr;
}

StepSender::~StepSender() {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_end, 0};
  send(words);
}

void StepSender::send(std::vector<int32_t>& words) { send_words(ranks_, words); }

std::unique_lock<std::mutex> StepSender::step(int32_t version, const Batch& batch) {
  std::unique_lock lock(mutex_);
  std::vector<int32_t> words = {k_step, version, int32_t(batch.n_tokens()), int32_t(batch.block_tables.size()),
                                batch.window_tables.empty() ? 0 : 1, int32_t(batch.logit_tokens.size())};
  words.insert(words.end(), batch.tokens.begin(), batch.tokens.end());
  words.insert(words.end(), batch.positions.begin(), batch.positions.end());
  words.insert(words.end(), batch.seq_of_token.begin(), batch.seq_of_token.end());
  words.insert(words.end(), batch.logit_tokens.begin(), batch.logit_tokens.end());
  put_tables(words, batch.block_tables);
  put_tables(words, batch.window_tables);
  send(words);
  return lock;
}

void StepSender::load(int32_t version, const std::vector<std::string>& strings, bool in_turn) {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_load, version, in_turn ? 1 : 0, int32_t(strings.size())};
  for (const std::string& s : strings) {
    words.push_back(int32_t(s.size()));
    std::vector<uint32_t> packed((s.size() + 3) / 4, 0);
    for (size_t i = 0; i < s.size(); ++i) packed[i / 4] |= uint32_t(uint8_t(s[i])) << (8 * (i % 4));
    for (uint32_t word : packed) words.push_back(int32_t(word));
  }
  send(words);
}

KvCacheOptions StepSender::cache_options(int32_t version, const KvCacheOptions& options) {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = pages_words(version, options);
  send(words);
  return options;
}

int StepSender::loaded(int32_t version) {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_loaded, version};
  send(words);
  float failed = 0.0f;  // each other rank adds 1 if it could not
  ranks_.all_reduce_sum(&failed, 1);
  return int(std::lround(failed));
}

void StepSender::release(int32_t version) {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_release, version};
  send(words);
}

void StepSender::page_out(int32_t version, bool split, bool window, int32_t page, const KvCache& mine, uint8_t* all) {
  if (!split) return read_part(mine, window, page, all);  // every rank's part is this one
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_page_out, version, window ? 1 : 0, page};
  send(words);
  gather_parts(ranks_, mine, window, page, all);
}

void StepSender::page_in(int32_t version, bool split, bool window, int32_t page, KvCache& mine, const uint8_t* all) {
  std::lock_guard lock(mutex_);
  std::vector<int32_t> words = {k_page_in, version, window ? 1 : 0, page};
  send(words);
  scatter_parts(ranks_, mine, split, window, page, all);
}

int tier_parts(const ModelConfig& config) { return config.kv_split ? config.ranks.ranks : 1; }

KvTierLink tier_link(KvDiskTier* disk, const ModelConfig& config, KvCache& memory, RankSteps ranks) {
  KvTierLink link;
  link.disk = disk;
  const int parts = tier_parts(config);
  const bool split = config.kv_split;
  link.page_bytes = memory.page_bytes() * parts;
  link.window_page_bytes = memory.window_bytes() * parts;
  for (bool window : {false, true}) {
    auto& read = window ? link.read_window_page : link.read_page;
    auto& write = window ? link.write_window_page : link.write_page;
    if (!ranks.sender) {
      read = [window, &memory](int32_t page, uint8_t* host) { read_part(memory, window, page, host); };
      write = [window, &memory](int32_t page, const uint8_t* host) { write_part(memory, window, page, host); };
      continue;
    }
    read = [ranks, split, window, &memory](int32_t page, uint8_t* host) {
      ranks.sender->page_out(ranks.version, split, window, page, memory, host);
    };
    write = [ranks, split, window, &memory](int32_t page, const uint8_t* host) {
      ranks.sender->page_in(ranks.version, split, window, page, memory, host);
    };
  }
  return link;
}

RankVersion::RankVersion(StepSender& sender, int32_t version, const std::vector<std::string>& words, bool in_turn)
    : sender_(sender), version_(version) {
  sender_.load(version_, words, in_turn);
}

Status RankVersion::loaded() {
  const int failed = sender_.loaded(version_);
  if (failed == 0) return Status();
  return Status::error(std::to_string(failed) + " of the other " + std::to_string(sender_.ranks().size() - 1) +
                       " tensor-parallel ranks could not load it (their logs say why)");
}

Status follow_steps(Model& model, KvCache& cache, Collective& ranks) {
  for (;;) {
    Message message(ranks);
    if (message.kind() == k_end) return Status();
    if (message.version() != 0 || (message.kind() != k_step && message.kind() != k_page_out && message.kind() != k_page_in)) {
      return Status::error("rank " + std::to_string(ranks.rank()) + ": a message about model versions, which this command does not make");
    }
    if (message.kind() == k_step) {
      run_step(message, model, cache, ranks);
    } else {
      move_page(message, model, cache, ranks);
    }
  }
}

namespace {

// One version on a rank other than 0: loading (beside the steps, or in
// turn), then made or failed.
struct Followed {
  std::promise<std::optional<KvCacheOptions>> pages;
  bool pages_given = false;
  std::future<Result<FollowedVersion>> loading;
  std::optional<Result<FollowedVersion>> made;

  Result<FollowedVersion>& wait() {
    if (!made) made.emplace(loading.get());
    return *made;
  }
  void give_pages(std::optional<KvCacheOptions> options) {
    if (pages_given) return;
    pages_given = true;
    pages.set_value(options);
  }
};

}  // namespace

Status follow_versions(Collective& ranks, const VersionMaker& make) {
  std::map<int32_t, Followed> versions;
  const std::string me = "rank " + std::to_string(ranks.rank());
  const auto end = [&versions] {
    for (auto& [_, followed] : versions) {
      followed.give_pages(std::nullopt);
      followed.wait();
    }
    return Status();
  };
  for (;;) {
    Message message(ranks);
    const int32_t v = message.version();
    switch (message.kind()) {
      case k_end:
        return end();
      case k_load: {
        const bool in_turn = message.next() != 0;
        const std::vector<std::string> words = message.strings();
        Followed& followed = versions[v];
        if (!in_turn) {
          std::shared_future<std::optional<KvCacheOptions>> pages = followed.pages.get_future().share();
          followed.loading = std::async(std::launch::async, [make, words, pages] { return make(words, [pages] { return pages.get(); }); });
          break;
        }
        // In turn: the version's pages are the next message, unless rank 0 gave it up (its release) or ended.
        int32_t next_kind = k_pages;
        std::promise<Result<FollowedVersion>> done;
        followed.loading = done.get_future();
        done.set_value(make(words, [&]() -> std::optional<KvCacheOptions> {
          followed.pages_given = true;
          Message next(ranks);
          next_kind = next.kind();
          if (next_kind == k_pages && next.version() == v) return next.pages();
          return std::nullopt;
        }));
        if (next_kind == k_end) return end();
        if (next_kind == k_release) versions.erase(v);
        else if (next_kind != k_pages) return Status::error(me + ": rank 0 sent a message of kind " + std::to_string(next_kind) + " before a version's pages");
        break;
      }
      case k_pages:
        versions.at(v).give_pages(message.pages());
        break;
      case k_loaded: {
        Result<FollowedVersion>& made = versions.at(v).wait();
        if (!made.ok()) DS_LOG_ERROR("%s: version %d not loaded: %s", me.c_str(), v, made.message().c_str());
        float failed = made.ok() ? 0.0f : 1.0f;
        ranks.all_reduce_sum(&failed, 1);
        break;
      }
      case k_step:
      case k_page_out:
      case k_page_in: {
        // Rank 0 runs only a version every rank has loaded (StepSender::loaded).
        Result<FollowedVersion>& made = versions.at(v).wait();
        DS_CHECK(made.ok(), me + ": a step of a version it could not load");
        if (message.kind() == k_step) {
          run_step(message, *made.value().model, *made.value().cache, ranks);
        } else {
          move_page(message, *made.value().model, *made.value().cache, ranks);
        }
        break;
      }
      case k_release: {
        Followed& followed = versions.at(v);
        followed.give_pages(std::nullopt);  // given up before its pages were sized
        followed.wait();
        versions.erase(v);
        DS_LOG_INFO("%s: version %d released", me.c_str(), v);
        break;
      }
      default:
        return Status::error(me + ": a message of unknown kind " + std::to_string(message.kind()) + " from rank 0");
    }
  }
}

}  // namespace ds

#include "engine/step_broadcast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <mutex>
#include <cstring>
#include <thread>

namespace ds {
namespace {

// Two ranks as two threads of this process: each collective a meeting of
// both at a barrier, the values passed through shared buffers.
class ThreadRanks {
 public:
  class Rank : public Collective {
   public:
    Rank(ThreadRanks& all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return 2; }
    void broadcast(void* data, size_t bytes, int root) override {
      if (rank_ == root) all_.bytes_.assign(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + bytes);
      all_.meet_.arrive_and_wait();
      if (rank_ != root) std::memcpy(data, all_.bytes_.data(), bytes);
      all_.meet_.arrive_and_wait();
    }
    void all_gather(const float* in, int64_t n, float* out) override {
      all_.floats_[rank_].assign(in, in + n);
      all_.meet_.arrive_and_wait();
      for (int r = 0; r < 2; ++r) std::copy(all_.floats_[r].begin(), all_.floats_[r].end(), out + r * n);
      all_.meet_.arrive_and_wait();
    }
    void all_reduce_sum(float* data, int64_t n) override {
      std::vector<float> both(size_t(2 * n));
      all_gather(data, n, both.data());
      for (int64_t i = 0; i < n; ++i) data[i] = both[size_t(i)] + both[size_t(n + i)];
    }

   private:
    ThreadRanks& all_;
    int rank_;
  };

  Rank& operator[](int r) { return ranks_[r]; }

 private:
  std::barrier<> meet_{2};
  std::vector<uint8_t> bytes_;
  std::vector<float> floats_[2];
  Rank ranks_[2] = {Rank(*this, 0), Rank(*this, 1)};
};

// What rank 1 was asked to make, and what it was told of it.
struct Made {
  std::vector<std::string> words;
  std::optional<KvCacheOptions> pages;
};

TEST(StepBroadcast, VersionsAreLoadedSizedCheckedAndReleasedOnTheOtherRanks) {
  ThreadRanks ranks;
  std::vector<Made> made;
  std::mutex made_mutex;
  Status followed;
  std::thread rank1([&] {
    followed = follow_versions(ranks[1], [&](const std::vector<std::string>& words,
                                             const std::function<std::optional<KvCacheOptions>()>& pages) -> Result<FollowedVersion> {
      Made m{words, pages()};
      const bool refuse = words[0] == "refuse";
      std::lock_guard lock(made_mutex);
      made.push_back(m);
      if (refuse) return Status::error("refused, as the test asks");
      return FollowedVersion{};
    });
  });
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(char(b));
  const KvCacheOptions big{DType::q8_0, 64, int64_t(5) << 33, 7, 3};
  {
    StepSender sender(ranks[0]);
    {
      RankVersion first(sender, 0, {"first", every_byte, ""}, /*in_turn=*/true);
      EXPECT_EQ(first.cache_options(big).n_pages, big.n_pages);
      EXPECT_TRUE(first.loaded().ok());
      RankVersion beside(sender, 1, {"beside", "x"}, /*in_turn=*/false);
      beside.cache_options(KvCacheOptions{DType::f16, 16, 9, 0, 0});
      EXPECT_TRUE(beside.loaded().ok());
      RankVersion refused(sender, 2, {"refuse"}, false);
      refused.cache_options(big);
      const Status failed = refused.loaded();
      EXPECT_FALSE(failed.ok());  // not ASSERT: rank 1's thread is still to be joined
      EXPECT_NE(failed.message().find("1 of the other 1 tensor-parallel ranks could not load it"), std::string::npos) << failed.message();
      RankVersion given_up(sender, 3, {"given up"}, false);  // released before its pages are sized: rank 1 stops waiting
      RankVersion given_up_in_turn(sender, 4, {"given up in turn"}, true);
    }
    RankVersion pending(sender, 5, {"pending"}, false);  // the sender ends with it still unsized
  }
  rank1.join();
  ASSERT_TRUE(followed.ok()) << followed.message();
  ASSERT_EQ(made.size(), 6u);
  std::sort(made.begin(), made.end(), [](const Made& a, const Made& b) { return a.words[0] < b.words[0]; });
  // beside, first, given up, given up in turn, pending, refuse
  EXPECT_EQ(made[1].words, (std::vector<std::string>{"first", every_byte, ""}));
  ASSERT_TRUE(made[1].pages);
  EXPECT_EQ(made[1].pages->dtype, DType::q8_0);
  EXPECT_EQ(made[1].pages->n_pages, big.n_pages);
  EXPECT_EQ(made[1].pages->draft_tokens, 3);
  EXPECT_EQ(made[0].pages->n_pages, 9);
  for (size_t i : {2, 3, 4}) EXPECT_FALSE(made[i].pages) << made[i].words[0];
  EXPECT_TRUE(made[5].pages);
}

}  // namespace
}  // namespace ds

// The disk tier on its own, against a temporary directory: pages round-trip
// byte for byte (across a reopen, as after a restart); a flipped bit, a
// truncated file and another fingerprint's file are each detected, counted,
// removed, never returned; the directory stays within its budget (least
// recently used first), shared by two instances too; a full queue drops
// pages instead of growing.

#include "engine/kv_disk_tier.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace ds {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/kv_disk_tier_test_XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() { fs::remove_all(path); }
};

constexpr int64_t k_page_bytes = 4096;
constexpr int32_t k_page_tokens = 4;

KvDiskTierOptions options_for(const std::string& dir, int64_t max_bytes = int64_t(1) << 20, uint64_t fingerprint = 42) {
  KvDiskTierOptions o;
  o.dir = dir;
  o.max_bytes = max_bytes;
  o.fingerprint = fingerprint;
  o.page_bytes = k_page_bytes;
  o.page_tokens = k_page_tokens;
  return o;
}

PageKey key_of(int32_t first_token, uint64_t parent = 0) {
  const std::vector<int32_t> tokens = {first_token, first_token + 1, first_token + 2, first_token + 3};
  return make_page_key(parent, tokens, 7);
}

std::vector<uint8_t> payload_of(uint32_t seed) {
  std::vector<uint8_t> bytes(k_page_bytes);
  std::mt19937 random(seed);
  for (uint8_t& b : bytes) b = uint8_t(random());
  return bytes;
}

void put(KvDiskTier& tier, const PageKey& key, const std::vector<uint8_t>& payload) {
  tier.write(key, [&](uint8_t* out) { std::copy(payload.begin(), payload.end(), out); });
}

std::string only_file(const std::string& dir) {
  std::string found;
  for (const auto& entry : fs::directory_iterator(dir)) found = entry.path();
  return found;
}

int64_t directory_bytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) bytes += int64_t(entry.file_size());
  return bytes;
}

TEST(KvDiskTier, PagesRoundTripAcrossAReopen) {
  TempDir dir;
  const PageKey key = key_of(10);
  const std::vector<uint8_t> payload = payload_of(1);
  {
    auto tier = KvDiskTier::open(options_for(dir.path)).take();
    EXPECT_FALSE(tier->contains(key));
    put(*tier, key, payload);
    tier->flush();
    EXPECT_TRUE(tier->contains(key));
    EXPECT_EQ(tier->stats().pages_written, 1);
  }
  auto tier = KvDiskTier::open(options_for(dir.path)).take();
  EXPECT_EQ(tier->stats().files, 1) << "the index is rebuilt from the directory";
  ASSERT_TRUE(tier->contains(key));
  std::vector<uint8_t> back(k_page_bytes);
  ASSERT_TRUE(tier->read(key, back.data()));
  EXPECT_EQ(back, payload);
  EXPECT_EQ(tier->stats().hits, 1);
  EXPECT_FALSE(tier->contains(key_of(10, /*parent=*/99))) << "the same tokens after another prefix are another page";
  auto other_model = KvDiskTier::open(options_for(dir.path, int64_t(1) << 20, /*fingerprint=*/43)).take();
  EXPECT_FALSE(other_model->contains(key)) << "another fingerprint never finds it";
}

// Writes one page, then damages its file with `damage` and expects the read to fail, counted.
void expect_detected(const std::function<void(const std::string& path)>& damage) {
  TempDir dir;
  auto tier = KvDiskTier::open(options_for(dir.path)).take();
  const PageKey key = key_of(20);
  const std::vector<uint8_t> payload = payload_of(2);
  put(*tier, key, payload);
  tier->flush();
  damage(only_file(dir.path));
  std::vector<uint8_t> back(k_page_bytes);
  EXPECT_FALSE(tier->contains(key) && tier->read(key, back.data()));
  EXPECT_EQ(tier->stats().corrupt, 1);
  EXPECT_TRUE(fs::is_empty(dir.path)) << "the bad file is removed";
}

TEST(KvDiskTier, AFlippedBitIsDetected) {
  for (const int64_t offset : {int64_t(3), int64_t(40), int64_t(70), int64_t(64 + 16 + 1000)}) {  // magic, key, tokens, payload
    expect_detected([offset](const std::string& path) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(offset);
      char c = 0;
      f.get(c);
      f.seekp(offset);
      f.put(char(c ^ 0x10));
    });
  }
}

TEST(KvDiskTier, ATruncatedFileIsDetected) {
  expect_detected([](const std::string& path) { fs::resize_file(path, fs::file_size(path) - 100); });
  expect_detected([](const std::string& path) { fs::resize_file(path, 10); });
}

TEST(KvDiskTier, AnotherFingerprintsFileUnderThisNameIsDetected) {
  TempDir foreign_dir;
  auto foreign = KvDiskTier::open(options_for(foreign_dir.path, int64_t(1) << 20, 43)).take();
  const PageKey key = key_of(30);
  put(*foreign, key, payload_of(3));
  foreign->flush();
  const std::string foreign_file = only_file(foreign_dir.path);
  expect_detected([&](const std::string& path) { fs::copy_file(foreign_file, path, fs::copy_options::overwrite_existing); });
}

TEST(KvDiskTier, TheDirectoryStaysWithinItsBudgetLeastRecentlyUsedFirst) {
  TempDir dir;
  const int64_t file_bytes = 64 + 4 * 4 + k_page_bytes;
  const int64_t budget = 5 * file_bytes;
  auto tier = KvDiskTier::open(options_for(dir.path, budget)).take();
  const std::vector<uint8_t> payload = payload_of(4);
  put(*tier, key_of(0), payload);
  tier->flush();
  std::vector<uint8_t> back(k_page_bytes);
  for (int32_t i = 1; i < 40; ++i) {
    put(*tier, key_of(i * 10), payload);
    tier->flush();
    ASSERT_TRUE(tier->read(key_of(0), back.data())) << "the page in use stays";
    ASSERT_LE(directory_bytes(dir.path), budget);
  }
  EXPECT_EQ(tier->stats().files, 5);
  EXPECT_EQ(tier->stats().pages_evicted, 35);
  // A reopen with a smaller budget trims what the last run left.
  tier.reset();
  auto smaller = KvDiskTier::open(options_for(dir.path, 2 * file_bytes)).take();
  EXPECT_LE(directory_bytes(dir.path), 2 * file_bytes);
  EXPECT_TRUE(smaller->contains(key_of(0))) << "the most recently used survive";
}

TEST(KvDiskTier, InstancesSharingADirectoryKeepToOneBudget) {
  TempDir dir;
  const int64_t file_bytes = 64 + 4 * 4 + k_page_bytes;
  const int64_t budget = 6 * file_bytes;
  KvDiskTierOptions o = options_for(dir.path, budget);
  o.rescan_every = std::chrono::milliseconds(0);  // listed again at every write (50x a listing's time apart)
  auto first = KvDiskTier::open(o).take();
  auto second = KvDiskTier::open(o).take();
  const std::vector<uint8_t> payload = payload_of(6);
  for (int32_t i = 0; i < 30; ++i) {
    KvDiskTier& tier = i % 2 ? *second : *first;
    if (i >= 28) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // each one's last write after a listing
    put(tier, key_of(i * 10), payload);
    tier.flush();
  }
  // Each alone would keep 6 pages: 12 together, twice the budget.
  EXPECT_LE(directory_bytes(dir.path), budget);
  EXPECT_TRUE(first->contains(key_of(290))) << "one reads the other's page";
}

TEST(KvDiskTier, AFullQueueDropsPages) {
  TempDir dir;
  KvDiskTierOptions o = options_for(dir.path);
  o.max_queued_bytes = 2 * k_page_bytes;
  auto tier = KvDiskTier::open(o).take();
  const std::vector<uint8_t> payload = payload_of(5);
  for (int32_t i = 0; i < 200; ++i) put(*tier, key_of(i * 10), payload);
  tier->flush();
  const KvDiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.pages_written + stats.pages_dropped, 200);
  EXPECT_GT(stats.pages_dropped, 0) << "200 pages cannot all wait behind a queue of 2";
}

TEST(KvDiskTier, StaleTemporaryFilesOfDeadWritersAreRemoved) {
  TempDir dir;
  std::ofstream(dir.path + "/.tmp-999999999-0") << "a writer killed mid-write";
  auto tier = KvDiskTier::open(options_for(dir.path)).take();
  EXPECT_TRUE(fs::is_empty(dir.path));
}

}  // namespace
}  // namespace ds

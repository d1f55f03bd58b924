// The batch store's life cycle against a temporary directory: a batch's lines
// run once each, the files it ends with, tenants kept apart, expiry, and a
// file left on disk without its row (a kill between the rename and the
// commit) removed at the next open.

#include "server/batch_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/random_id.h"
#include "base/unix_time.h"

namespace ds {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/batch_store_test_XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

BatchRecord batch_of(const std::string& input, int64_t now, int64_t window) {
  BatchRecord b;
  b.id = random_id("batch_");
  b.endpoint = "/v1/completions";
  b.input_file_id = input;
  b.completion_window = "24h";
  b.status = "in_progress";
  b.created_at = b.in_progress_at = now;
  b.expires_at = now + window;
  return b;
}

std::vector<std::string> lines_of(const std::string& content) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < content.size();) {
    const size_t end = content.find('\n', at);
    lines.push_back(content.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

TEST(BatchStore, LinesRunOnceAndTheBatchEndsWithItsFiles) {
  TempDir dir;
  auto opened = BatchStore::open(dir.path);
  ASSERT_TRUE(opened.ok()) << opened.message();
  BatchStore& store = *opened.value();
  auto file = store.add_file("alpha", "in.jsonl", "batch", "three lines");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/files/" + file.value().id));
  EXPECT_FALSE(store.file("beta", file.value().id)) << "another tenant's file is not found";
  EXPECT_FALSE(store.file_content("beta", file.value().id));
  EXPECT_EQ(store.file_content("alpha", file.value().id).value(), "three lines");

  const int64_t now = unix_seconds();
  const BatchRecord b = batch_of(file.value().id, now, 3600);
  ASSERT_TRUE(store.create_batch("alpha", b, {{"a", "{}", std::nullopt}, {"b", "", "{\"error\":\"malformed\"}"}, {"c", "{}", std::nullopt}}).ok());
  EXPECT_FALSE(store.batch("beta", b.id));
  EXPECT_TRUE(store.list_batches("beta", "", 10).empty());
  const auto pending = store.pending_lines(10);
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].custom_id, "a");
  EXPECT_EQ(pending[0].tenant, "alpha");
  EXPECT_EQ(pending[1].index, 2);
  EXPECT_TRUE(store.batches_to_end(now).empty());

  EXPECT_TRUE(store.finish_line(b.id, 0, true, "{\"line\":0}"));
  EXPECT_FALSE(store.finish_line(b.id, 0, true, "{\"line\":0,\"again\":true}")) << "a finished line keeps its first result";
  EXPECT_TRUE(store.finish_line(b.id, 2, false, "{\"line\":2}"));
  EXPECT_TRUE(store.pending_lines(10).empty());
  const auto counted = store.batch("alpha", b.id).value();
  EXPECT_EQ(counted.total, 3);
  EXPECT_EQ(counted.completed, 1);
  EXPECT_EQ(counted.failed, 2);

  const auto ready = store.batches_to_end(now);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].second, "completed");
  ASSERT_TRUE(store.end_batch(b.id, "completed", now).ok());
  const auto done = store.batch("alpha", b.id).value();
  EXPECT_EQ(done.status, "completed");
  EXPECT_EQ(done.completed_at, now);
  EXPECT_EQ(store.file_content("alpha", done.output_file_id).value(), "{\"line\":0}\n");
  EXPECT_EQ(lines_of(store.file_content("alpha", done.error_file_id).value()),
            (std::vector<std::string>{"{\"error\":\"malformed\"}", "{\"line\":2}"}));
  EXPECT_TRUE(store.batches_to_end(now).empty());
  EXPECT_FALSE(store.cancel("alpha", b.id, now)->status == "cancelling") << "an ended batch is not cancelled";
}

TEST(BatchStore, CancelAndExpiry) {
  TempDir dir;
  auto store = BatchStore::open(dir.path).take();
  const auto file = store->add_file("alpha", "in.jsonl", "batch", "x").take();
  const int64_t now = unix_seconds();
  const BatchRecord cancelled = batch_of(file.id, now, 3600);
  const BatchRecord expiring = batch_of(file.id, now, 10);
  ASSERT_TRUE(store->create_batch("alpha", cancelled, {{"a", "{}", std::nullopt}, {"b", "{}", std::nullopt}}).ok());
  ASSERT_TRUE(store->create_batch("alpha", expiring, {{"a", "{}", std::nullopt}, {"b", "{}", std::nullopt}}).ok());
  EXPECT_FALSE(store->cancel("beta", cancelled.id, now)) << "another tenant cannot cancel it";
  EXPECT_EQ(store->cancel("alpha", cancelled.id, now)->status, "cancelling");
  EXPECT_EQ(store->pending_lines(10).size(), 2u) << "a cancelling batch's lines do not start";
  ASSERT_TRUE(store->finish_line(expiring.id, 0, true, "{\"ran\":0}"));

  const auto ready = store->batches_to_end(now + 10);
  ASSERT_EQ(ready.size(), 2u);
  for (const auto& [id, status] : ready) ASSERT_TRUE(store->end_batch(id, status, now + 10).ok());
  const auto c = store->batch("alpha", cancelled.id).value();
  EXPECT_EQ(c.status, "cancelled");
  EXPECT_TRUE(c.output_file_id.empty() && c.error_file_id.empty()) << "nothing ran, nothing failed";
  const auto e = store->batch("alpha", expiring.id).value();
  EXPECT_EQ(e.status, "expired");
  EXPECT_EQ(e.completed, 1);
  EXPECT_EQ(e.failed, 1);
  const auto error = nlohmann::json::parse(store->file_content("alpha", e.error_file_id).value());
  EXPECT_EQ(error["custom_id"], "b");
  EXPECT_EQ(error["error"]["code"], "batch_expired");
  EXPECT_EQ(error["id"], "batch_req_" + expiring.id.substr(6) + "_1");
}

TEST(BatchStore, FilesWithoutARowAreRemovedAtOpen) {
  TempDir dir;
  std::string kept;
  {
    auto store = BatchStore::open(dir.path).take();
    kept = store->add_file("alpha", "in.jsonl", "batch", "x").take().id;
  }
  std::ofstream(dir.path + "/files/file-orphan") << "renamed, never committed";
  std::ofstream(dir.path + "/files/file-half.tmp") << "never renamed";
  auto store = BatchStore::open(dir.path).take();
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/files/file-orphan"));
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/files/file-half.tmp"));
  EXPECT_EQ(store->file_content("alpha", kept).value(), "x");
  EXPECT_EQ(store->list_files("alpha", "batch", "", 10, false).size(), 1u);
  EXPECT_TRUE(store->remove_file("alpha", kept));
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/files/" + kept));
  EXPECT_FALSE(store->remove_file("alpha", kept));
}

}  // namespace
}  // namespace ds

#include "router/canary_release.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "router/router_config.h"

namespace ds {
namespace {

using json = nlohmann::json;

std::string fresh_db(const char* name) {
  const std::string path = ::testing::TempDir() + "/" + name + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  return path;
}

int64_t count_rows(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t n = -1;
  if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

CanaryConfig config() {
  CanaryConfig c;
  c.stable = "v1";
  c.canary = "v2";
  c.min_samples = 5;
  c.shadow_fraction = 1.0;
  c.tenants = {"beta"};
  c.client_cidrs = {"10.9.0.0/16"};
  c.thresholds.max_ttft_p99_increase.reset();  // latency is judged in the policy's own test
  c.thresholds.max_tpot_p99_increase.reset();
  return c;
}

AuditAnswer answer(const std::string& version, const std::string& output, int status = 200) {
  AuditAnswer a;
  a.version = version;
  a.status = status;
  a.output = output;
  a.latency_ms = 10;
  return a;
}

// One request through the release as the router sends it: the routed version
// answers; a shadowed one gets the canary's answer too.
void serve(CanaryRelease& release, const std::string& canary_output, int* canary_count = nullptr, int* shadow_count = nullptr) {
  const CanaryRelease::Route route = release.route("", "alpha", "127.0.0.1").value();
  if (route.stage < 0) return;
  AuditRequestRow row;
  row.request_id = "r";
  row.greedy = true;
  if (route.canary) {
    row.canary = answer("v2", canary_output);
    if (canary_count) ++*canary_count;
  } else if (route.shadow) {
    row.stable = answer("v1", "the answer");
    row.canary = answer("v2", canary_output);
    if (shadow_count) ++*shadow_count;
  } else {
    return release.observe_stable(route, answer("v1", "the answer"));
  }
  release.observe(route, row);
}

TEST(CanaryRelease, AnIdenticalCanaryAdvancesToPromotionAndEveryRowIsAudited) {
  const std::string db = fresh_db("identical");
  AuditConfig audit{db, false, {}};
  int canary = 0, shadow = 0;
  {
    auto release = CanaryRelease::open(config(), audit).take();
    for (int i = 0; i < 1000 && json::parse(release->status_json())["state"] == "running"; ++i) serve(*release, "the answer", &canary, &shadow);
    const json status = json::parse(release->status_json());
    EXPECT_EQ(status["state"], "promoted");
    EXPECT_EQ(status["stage_percent"], 100);
    std::vector<std::string> actions;
    for (const json& d : status["decisions"]) actions.push_back(d["action"].get<std::string>() + "@" + std::to_string(d["to_percent"].get<int>()));
    EXPECT_EQ(actions, (std::vector<std::string>{"start@1", "advance@10", "advance@50", "promote@100"}));
    // Promoted: everything goes to the canary, nothing is audited.
    const auto after = release->route("", "alpha", "127.0.0.1").value();
    EXPECT_EQ(after.version, "v2");
    EXPECT_EQ(after.stage, -1);
  }  // the log's queue is written when it closes
  EXPECT_EQ(count_rows(db, "SELECT count(*) FROM requests WHERE kind = 'canary'"), canary);
  EXPECT_EQ(count_rows(db, "SELECT count(*) FROM requests WHERE kind = 'shadow'"), shadow);
  EXPECT_EQ(count_rows(db, "SELECT count(*) FROM requests WHERE kind = 'shadow' AND exact_match = 1 AND token_overlap = 1.0"), shadow);
  EXPECT_EQ(count_rows(db, "SELECT count(*) FROM decisions"), 4);
  EXPECT_EQ(count_rows(db, "SELECT count(*) FROM requests WHERE input IS NOT NULL"), 0);
  // A restarted router resumes the ended release from its audit.
  auto again = CanaryRelease::open(config(), audit).take();
  EXPECT_EQ(json::parse(again->status_json())["state"], "promoted");
  EXPECT_EQ(again->route("", "alpha", "127.0.0.1").value().version, "v2");
  EXPECT_FALSE(again->rollback("operator:ops").ok());  // it has ended
}

TEST(CanaryRelease, ACanaryThatAnswersDifferentlyRollsBackInTheFirstStage) {
  const std::string db = fresh_db("broken");
  auto release = CanaryRelease::open(config(), AuditConfig{db, false, {}}).take();
  for (int i = 0; i < 1000 && json::parse(release->status_json())["state"] == "running"; ++i) serve(*release, "something else");
  const json status = json::parse(release->status_json());
  EXPECT_EQ(status["state"], "rolled_back");
  const json& last = status["decisions"].back();
  EXPECT_EQ(last["action"], "rollback");
  EXPECT_EQ(last["from_percent"], 1);
  EXPECT_EQ(last["by"], "policy");
  EXPECT_NE(last["reasons"].dump().find("exact match 0.0%"), std::string::npos) << last.dump();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(release->route("", "alpha", "127.0.0.1").value().version, "v1");
}

TEST(CanaryRelease, DyedTrafficGoesToTheCanaryAtEveryStage) {
  auto release = CanaryRelease::open(config(), AuditConfig{fresh_db("dyed"), false, {"beta"}}).take();
  EXPECT_TRUE(release->route("1", "alpha", "127.0.0.1").value().canary);
  EXPECT_FALSE(release->route("0", "beta", "10.9.1.1").value().canary);  // the header wins
  EXPECT_TRUE(release->route("", "beta", "127.0.0.1").value().canary);
  EXPECT_TRUE(release->route("", "alpha", "10.9.3.4").value().canary);
  EXPECT_FALSE(release->route("yes", "alpha", "127.0.0.1").ok());
  // Not a generation request: never audited or drawn; the dye still chooses the version.
  for (int i = 0; i < 200; ++i) {
    const auto other = release->route("", "beta", "10.9.3.4", false).value();
    EXPECT_EQ(other.version, "v1");
    EXPECT_EQ(other.stage, -1);
  }
  EXPECT_EQ(release->route("1", "alpha", "127.0.0.1", false).value().version, "v2");
  EXPECT_TRUE(release->keeps_input_of("beta"));
  EXPECT_FALSE(release->keeps_input_of("alpha"));
  int canary = 0;
  for (int i = 0; i < 2000; ++i) canary += release->route("", "alpha", "127.0.0.1").value().canary;
  EXPECT_LT(canary, 100);  // 1% of 2000 is 20; 100 is beyond any plausible draw (p < 1e-30)
  EXPECT_TRUE(release->rollback("operator:ops").ok());
  EXPECT_EQ(release->route("1", "beta", "10.9.3.4").value().version, "v1");  // no dye reaches a rolled-back canary
}

TEST(RouterConfigCanary, KeysAreParsedAndMistakesNamed) {
  const std::string instances = R"("instances": [{"id": "a", "version": "v1", "url": "http://127.0.0.1:9001"},
                                                 {"id": "b", "version": "v2", "url": "http://127.0.0.1:9002"}])";
  auto ok = RouterConfig::from_json("{" + instances + R"(, "canary": {"stable": "v1", "canary": "v2", "stages": [5, 100], "min_samples": 3,
      "shadow_fraction": 0.5, "select": {"header": "X-Beta", "tenants": ["t"], "client_cidrs": ["10.0.0.0/8"]},
      "thresholds": {"min_exact_match": null, "latency_slack_ms": 5}}, "audit": {"path": "a.db", "inputs": ["t"]}})");
  ASSERT_TRUE(ok.ok()) << ok.message();
  const CanaryConfig& c = *ok.value().canary;
  EXPECT_EQ(c.stages, (std::vector<int>{5, 100}));
  EXPECT_EQ(c.min_samples, 3);
  EXPECT_EQ(c.header, "X-Beta");
  EXPECT_FALSE(c.thresholds.min_exact_match);
  EXPECT_TRUE(c.thresholds.min_token_overlap);
  EXPECT_EQ(c.thresholds.latency_slack_ms, 5);
  EXPECT_EQ(ok.value().audit->input_tenants, (std::vector<std::string>{"t"}));
  const std::pair<std::string, std::string> mistakes[] = {
      {R"("canary": {"stable": "v1", "canary": "v2"})", "needs its 'audit'"},
      {R"("audit": {"path": "a.db"})", "give 'canary' too"},
      {R"("canary": {"stable": "v1", "canary": "v2", "stages": [50, 10, 100]}, "audit": {"path": "a"})", "'canary.stages'"},
      {R"("canary": {"stable": "v1", "canary": "v2", "stages": [100]}, "audit": {"path": "a"})", "'canary.stages'"},
      {R"("canary": {"stable": "v1", "canary": "v3"}, "audit": {"path": "a"})", "neither the canary's stable"},
      {R"("canary": {"stable": "v1", "canary": "v2", "shadow_fraction": 2}, "audit": {"path": "a"})", "'shadow_fraction'"},
      {R"("canary": {"stable": "v1", "canary": "v2", "thresholds": {"max_p99": 1}}, "audit": {"path": "a"})", "canary.thresholds.max_p99"},
      {R"("canary": {"stable": "v1", "canary": "v2", "select": {"client_cidrs": ["10.0.0.0/40"]}}, "audit": {"path": "a"})", "prefix length"},
      {R"("canary": {"stable": "v1", "canary": "v2"}, "audit": {"path": "a", "inputs": "some"})", "'audit.inputs'"},
  };
  for (const auto& [extra, expected] : mistakes) {
    auto bad = RouterConfig::from_json("{" + instances + ", " + extra + "}");
    ASSERT_FALSE(bad.ok()) << extra;
    EXPECT_NE(bad.message().find(expected), std::string::npos) << bad.message();
  }
}

}  // namespace
}  // namespace ds

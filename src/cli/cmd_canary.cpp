// dsinfer canary status|promote|rollback: an operator's view of, and say in,
// the router's canary release (GET /admin/canary, POST /admin/canary/promote
// and /rollback). The admin key comes from DSINFER_ADMIN_KEY or
// --admin-key-file (a file holding the key), never the command line, where
// any user could read it in the process list.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "router/upstream_client.h"

namespace ds {
namespace {

using json = nlohmann::json;

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer canary: %s\n", message.c_str());
  return 1;
}

Result<std::string> admin_key(const Args& a) {
  if (a.has("--admin-key-file")) {
    std::ifstream in(a.get("--admin-key-file"));
    std::string key;
    if (!(in >> key)) return Status::error("cannot read a key from '" + a.get("--admin-key-file") + "'");
    return key;
  }
  if (const char* key = std::getenv("DSINFER_ADMIN_KEY"); key && *key) return std::string(key);
  return Status::error("no admin key: set DSINFER_ADMIN_KEY or give --admin-key-file FILE");
}

std::string figure(const json& v, const char* unit = "") {
  if (v.is_null()) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%.3g%s", v.get<double>(), unit);
  return text;
}

void print_summary(const json& s) {
  std::printf("release   %s -> %s: %s at %d%%\n", s["stable"].get<std::string>().c_str(), s["canary"].get<std::string>().c_str(),
              s["state"].get<std::string>().c_str(), s["stage_percent"].get<int>());
  const json& f = s["stage"]["figures"];
  std::printf("stage     %s: ", s["stage"]["verdict"].get<std::string>().c_str());
  for (const json& reason : s["stage"]["reasons"]) std::printf("%s; ", reason.get<std::string>().c_str());
  std::printf("\n%-9s %9s %7s %12s %12s\n", "version", "requests", "errors", "ttft_p99", "tpot_p99");
  for (const char* side : {"stable", "canary"}) {
    const json& v = f[side];
    std::printf("%-9s %9lld %7lld %12s %12s\n", side, static_cast<long long>(v["requests"].get<int64_t>()),
                static_cast<long long>(v["errors"].get<int64_t>()), figure(v["ttft_p99_ms"], " ms").c_str(), figure(v["tpot_p99_ms"], " ms").c_str());
  }
  std::printf("agreement %lld greedy pairs, exact match %s, token overlap %s\n", static_cast<long long>(f["greedy_pairs"].get<int64_t>()),
              figure(f["exact_match"]).c_str(), figure(f["token_overlap"]).c_str());
  std::printf("audit     %s: %lld canary, %lld shadow requests; %lld rows written, %lld dropped\n", s["audit"]["path"].get<std::string>().c_str(),
              static_cast<long long>(s["audit"]["canary_requests"].get<int64_t>()), static_cast<long long>(s["audit"]["shadow_requests"].get<int64_t>()),
              static_cast<long long>(s["audit"]["rows_written"].get<int64_t>()), static_cast<long long>(s["audit"]["rows_dropped"].get<int64_t>()));
  std::printf("decisions\n");
  for (const json& d : s["decisions"]) {
    std::printf("  %-8s %3d%% -> %3d%%  %-12s by %s\n", d["action"].get<std::string>().c_str(), d["from_percent"].get<int>(), d["to_percent"].get<int>(),
                d["state"].get<std::string>().c_str(), d["by"].get<std::string>().c_str());
  }
}

}  // namespace

int cmd_canary(int argc, char** argv) {
  const OptionTable table = {
      {{"--router"}, "URL", "http://127.0.0.1:8000", "the router's address"},
      {{"--admin-key-file"}, "FILE", "", "a file holding the admin key (default: $DSINFER_ADMIN_KEY)"},
      {{"--json"}, "", "", "the router's answer as JSON"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer canary status|promote|rollback [options]",
                      "An operator's view of, and say in, the router's canary release.", table);
  }
  const Args& a = args.value();
  const auto& words = a.positional();
  if (words.size() != 1 || (words[0] != "status" && words[0] != "promote" && words[0] != "rollback")) {
    return fail("usage: dsinfer canary status|promote|rollback [--router http://127.0.0.1:8000] [--admin-key-file FILE] [--json]");
  }
  auto router = parse_endpoint_url(a.get("--router"));
  if (!router.ok()) return fail("--router: " + router.message());
  auto key = admin_key(a);
  if (!key.ok()) return fail(key.message());
  const bool status = words[0] == "status";
  auto answer = UpstreamClient::request(router.value(), status ? "GET" : "POST", status ? "/admin/canary" : "/admin/canary/" + words[0], "",
                                        std::chrono::seconds(10), {{"Authorization", "Bearer " + key.value()}});
  if (!answer.ok()) return fail("the router at " + router.value().text() + " did not answer: " + answer.message());
  const json body = json::parse(answer.value().second, nullptr, false);
  if (answer.value().first != 200) {
    const std::string message = body.is_object() && body.contains("error") ? body["error"].value("message", "") : answer.value().second;
    return fail(std::to_string(answer.value().first) + ": " + message);
  }
  if (a.has("--json") || !body.is_object()) {
    std::printf("%s\n", body.is_object() ? body.dump(2).c_str() : answer.value().second.c_str());
  } else {
    print_summary(body);
  }
  return 0;
}

}  // namespace ds

// dsinfer router --config FILE: many `dsinfer serve` instances behind one
// endpoint (src/router/). Starts the children the config names, probes every
// instance, and passes the OpenAI API through to the least-loaded healthy
// one. SIGTERM or SIGINT: stops listening, then each child drains and exits.

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "base/log.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "router/instance_pool.h"
#include "router/router_config.h"
#include "router/router_service.h"
#include "router/upstream_client.h"
#include "server/admission.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer router: %s\n", message.c_str());
  return 1;
}

std::string this_binary() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, size_t(n)) : "dsinfer";
}

// On SIGTERM the router stops taking connections; the streams it is relaying
// have this long to end before they are cut (the instances drain their own).
constexpr std::chrono::seconds k_router_stop_grace{5};

}  // namespace

int cmd_router(int argc, char** argv) {
  const OptionTable table = {
      {{"--config"}, "FILE", "", "the router's configuration, JSON (README: Router)"},
      {{"--check"}, "", "", "check the configuration file and exit, as nginx -t"},
      {{"--http-threads"}, "N", "2", "threads serving connections, 1..256"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer router --config FILE.json [options]",
                      "Many dsinfer instances behind one endpoint: health checks, a breaker, prefix affinity and an audited canary.", table);
  }
  const Args& a = args.value();
  if (!a.has("--config")) return fail("missing --config FILE (README: Router)");
  auto config = RouterConfig::from_file(a.get("--config"));
  if (!config.ok()) return fail(config.message());
  if (a.has("--check")) {  // as `nginx -t`: the file's structure (the keys files it names are read at start)
    std::printf("dsinfer router: %s is a valid configuration, %zu instances\n", a.get("--config").c_str(), config.value().instances.size());
    return 0;
  }
  auto http_threads = a.get_int("--http-threads");
  if (!http_threads.ok() || http_threads.value() < 1 || http_threads.value() > 256) return fail("--http-threads must be 1..256");
  const RouterConfig& c = config.value();
  if (c.api_keys.empty() && c.listen.host != "127.0.0.1" && c.listen.host != "localhost") {
    return fail("without 'api_keys' the router is open to anyone who reaches it: listen on 127.0.0.1 or give api_keys");
  }
  // Limits as serve's, from the configuration alone: a tenant's half of the
  // whole when the keys file names two or more tenants.
  auto n_tenants = Admission::count_tenants(c.api_keys);
  if (!n_tenants.ok()) return fail(n_tenants.message());
  const double share = n_tenants.value() >= 2 ? 0.5 : 1.0;
  const int64_t max_in_flight = 64 * int64_t(c.instances.size());
  const AdmissionLimits limits{1000.0, 2000.0, 1000.0 * share, 2000.0 * share, max_in_flight,
                               std::max<int64_t>(1, int64_t(double(max_in_flight) * share))};
  auto admission = Admission::create(c.api_keys, limits);
  if (!admission.ok()) return fail(admission.message());
  std::optional<KeyFile> admin_keys;
  if (!c.admin_keys.empty()) {
    auto keys = KeyFile::read(c.admin_keys, "admin_keys", "OPERATOR");
    if (!keys.ok()) return fail(keys.message());
    admin_keys = keys.take();
  }

  TrafficHistory history;
  InstancePool::Options pool_options;
  pool_options.history = &history;
  pool_options.dsinfer = this_binary();
  pool_options.routing = c.routing;
  pool_options.api_keys_file = c.api_keys;
  if (!admission.value()->open_access()) pool_options.probe_key = admission.value()->keys().names().begin()->first;
  InstancePool pool(c.instances, pool_options);
  if (Status s = pool.start(); !s.ok()) return fail(s.message());
  std::unique_ptr<CanaryRelease> canary;
  if (c.canary) {
    auto opened = CanaryRelease::open(*c.canary, *c.audit);
    if (!opened.ok()) return fail(opened.message());
    canary = opened.take();
  }
  UpstreamClient client(2);
  RouterService service(pool, client, *admission.value(), std::move(admin_keys), canary.get(), history);
  HttpServerOptions http_options;
  http_options.host = c.listen.host;
  http_options.port = c.listen.port;
  http_options.n_threads = int(http_threads.value());
  auto http = HttpServer::start(http_options, service);
  if (!http.ok()) return fail(http.message());
  std::thread stopper;  // stop() joins the server's threads: never from one of them
  http.value()->on_shutdown_signal([&](int signal) {
    if (stopper.joinable()) return;
    DS_LOG_INFO("router: signal %d: stopping; the instances drain", signal);
    stopper = std::thread([&] { http.value()->stop(k_router_stop_grace); });
  });
  std::printf("dsinfer router: listening on http://%s:%u, %zu instances\n", c.listen.host.c_str(), unsigned(http.value()->port()),
              c.instances.size());
  std::fflush(stdout);
  http.value()->wait();
  if (stopper.joinable()) stopper.join();
  client.stop();  // its handlers post to the server's connections: not after those are gone
  DS_LOG_INFO("router: stopped");
  return 0;
}

}  // namespace ds

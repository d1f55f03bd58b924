// dsinfer serve: the OpenAI-compatible server. Loads the first model version
// (model_version_loader.h: weights, KV pool, engine, warm-up), starts the
// HTTP server, then turns /ready true; with --admin-keys, the admin API swaps
// versions while serving (admin_api.h). On
// SIGTERM or SIGINT it drains: not ready, new requests 503, those in flight
// finish (up to --drain-timeout), exit 0; when the drain time runs out the
// rest end with an error event and the exit status is 3.
// --tensor-parallel N: rank 0 is the server; the others hold their parts of
// the model and follow its engine's steps (engine/step_broadcast.h).

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "base/log.h"
#include "base/memory_size.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/model_version_loader.h"
#include "cli/tensor_parallel_ranks.h"
#include "engine/step_broadcast.h"
#include "device/device.h"
#include "server/api_server.h"
#include "server/batch_api.h"
#include "server/batch_runner.h"
#include "server/batch_store.h"
#include "server/response_store.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer serve: %s\n", message.c_str());
  return 1;
}

// The exit status when --drain-timeout ended requests still running (0: a full drain).
constexpr int k_exit_drain_cut = 3;

// After the drain, how long a client reading slowly has to take the last bytes of its answer.
constexpr std::chrono::seconds k_final_bytes_grace{5};

OptionTable serve_option_table() {
  return join_options(
      {version_option_table(), device_option_table(), tensor_parallel_option_table(),
       {
           {{"--host"}, "ADDRESS", "127.0.0.1", "the address to listen on; another than loopback needs --api-keys"},
           {{"--port"}, "N", "8000", "the port to listen on; 0: any free one (logged)"},
           {{"--api-keys"}, "FILE", "", "tenants' keys, a line each: KEY NAME (default: no keys, loopback only)"},
           {{"--admin-keys"}, "FILE", "", "operators' keys for the admin API (swap versions, trace); without it there is none"},
           {{"--served-model-name"}, "NAME", "", "the model's name in the API (default: the file's name without .gguf)"},
           {{"--model-version"}, "LABEL", "", "the first version's label (default: from the file's name)"},
           {{"--trace"}, "FILE", "", "write every engine step of the first version to FILE (JSON lines)"},
           {{"--max-in-flight"}, "N", "", "requests admitted at once, 1..1048576 (default: 4 x --max-num-seqs)"},
           {{"--request-timeout"}, "SECONDS", "600", "a request running longer ends with an error"},
           {{"--drain-timeout"}, "SECONDS", "30", "on SIGTERM, how long requests in flight may finish"},
           {{"--rate"}, "PER_S", "", "requests a second admitted overall (default: 4 x --max-num-seqs)"},
           {{"--burst"}, "N", "", "the overall rate's burst (default: 2 x --max-in-flight)"},
           {{"--tenant-rate"}, "PER_S", "", "a tenant's rate (default: --rate, halved when the keys name two tenants or more)"},
           {{"--tenant-burst"}, "N", "", "a tenant's burst (default: --burst, halved likewise)"},
           {{"--tenant-max-in-flight"}, "N", "", "a tenant's requests at once (default: --max-in-flight, halved likewise)"},
           {{"--embedding-pooling"}, "last|mean", "last", "how /v1/embeddings pools a text's hidden states"},
           {{"--stall-timeout"}, "SECONDS", "0", "the engine is stalled after this long without a step; 0: 10 x the longest step, at least 10 s"},
           {{"--exit-on-stall"}, "", "", "exit with status 4 when the engine stalls, for a supervisor to restart it"},
           {{"--http-threads"}, "N", "2", "threads serving connections, 1..256"},
           {{"--prepare-threads"}, "N", "2", "threads rendering templates and tokenizing, 1..256"},
           {{"--max-body-bytes"}, "N", "8388608", "the largest request body"},
           {{"--client-header-timeout"}, "SECONDS", "10", "from a connection or its first byte to a whole request head"},
           {{"--client-body-timeout"}, "SECONDS", "60", "from the head to the whole body"},
           {{"--keepalive-timeout"}, "SECONDS", "60", "an idle connection between requests is closed after this"},
           {{"--send-timeout"}, "SECONDS", "60", "a write that makes no progress this long closes the connection"},
           {{"--max-connections"}, "N", "0", "open connections at once; 0: the open-file limit less 64"},
           {{"--max-connections-per-address"}, "N", "0", "open connections from one address; 0: a quarter of --max-connections"},
           {{"--log-prompts"}, "", "", "put each prompt's text in the access log (off: its token counts only)"},
           {{"--store-dir"}, "DIR", "", "keep stored Responses (DIR/responses.sqlite), files and batches (DIR/batches.sqlite, DIR/files/) across "
                                        "restarts; without it there are none"},
           {{"--batch-lines-in-flight"}, "N", "4", "with --store-dir: batch lines running at once, 1..1024 (below every online request)"},
           {{"--store-max-bytes"}, "SIZE", "1GiB", "with --store-dir: the stored responses' size at most; past it the oldest go"},
           {{"--store-tenant-max-bytes"}, "SIZE", "4GiB", "with --store-dir: what one tenant may store in files and batches; past it uploads and new batches get 413"},
           {{"--store-max-age"}, "DAYS", "30", "with --store-dir: a stored response goes after this many days"},
           {{"--metrics-public"}, "", "", "serve /metrics without a key"},
       }});
}

bool is_loopback(const std::string& host) { return host == "127.0.0.1" || host == "::1" || host == "localhost"; }

}  // namespace

int cmd_serve(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  const OptionTable table = serve_option_table();
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  const Args& a = args.value();
  if (a.wants_help()) {
    return print_help("dsinfer serve -m MODEL.gguf [options]",
                      "The OpenAI-compatible server: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health, /ready,\n"
                      "/metrics, /openapi.json; the admin API (/admin/...) with --admin-keys. SIGTERM or SIGINT drains it.",
                      table);
  }
  auto ranks = join_tensor_parallel_ranks(a, "serve", argc, argv);
  if (!ranks.ok()) return fail(ranks.message());
  // Rank 0's messages to the others; their loops end when it goes, however this process ends.
  const std::unique_ptr<StepSender> step_sender = lead_steps(ranks.value().get());
  // The device first: the threads started from here on inherit its cores.
  auto device = claim_device(a, ranks.value().get());
  if (!device.ok()) return fail(device.message());
  auto options = parse_model_options(a, ranks.value().get());
  if (!options.ok()) return fail(options.message());

  auto max_seqs = a.get_int("--max-num-seqs");
  auto port = a.get_int("--port");
  auto request_timeout = a.get_float("--request-timeout");
  auto drain_timeout = a.get_float("--drain-timeout");
  auto http_threads = a.get_int("--http-threads");
  auto max_body = a.get_int("--max-body-bytes");
  auto prepare_threads = a.get_int("--prepare-threads");
  auto max_connections = a.get_int("--max-connections");
  auto max_per_address = a.get_int("--max-connections-per-address");
  for (const Status& s : {max_seqs.status(), port.status(), request_timeout.status(), drain_timeout.status(),
                          http_threads.status(), max_body.status(), prepare_threads.status(), max_connections.status(),
                          max_per_address.status()}) {
    if (!s.ok()) return fail(s.message());
  }
  // Deadlines in seconds, nginx's names and defaults (keep-alive 60 s instead of 75).
  std::chrono::milliseconds deadlines[4];
  const char* deadline_names[4] = {"--client-header-timeout", "--client-body-timeout", "--keepalive-timeout", "--send-timeout"};
  for (int i = 0; i < 4; ++i) {
    auto seconds = a.get_float(deadline_names[i]);
    if (!seconds.ok()) return fail(seconds.message());
    if (!(seconds.value() > 0 && seconds.value() <= 86400)) return fail(std::string(deadline_names[i]) + " must be between 0 and 86400 seconds");
    deadlines[i] = std::chrono::milliseconds(int64_t(seconds.value() * 1000));
  }
  if (max_body.value() < 1 || max_body.value() > int64_t(1) << 30) return fail("--max-body-bytes must be 1..1073741824");
  if (prepare_threads.value() < 1 || prepare_threads.value() > 256) return fail("--prepare-threads must be 1..256");
  if (max_connections.value() < 0 || max_connections.value() > 1 << 20 || max_per_address.value() < 0 ||
      max_per_address.value() > 1 << 20) {
    return fail("--max-connections and --max-connections-per-address must be 0 (derived) .. 1048576");
  }
  if (port.value() < 0 || port.value() > 65535) return fail("--port must be 0..65535");
  if (!(request_timeout.value() > 0) || !(drain_timeout.value() >= 0)) return fail("--request-timeout must be > 0 and --drain-timeout >= 0");
  if (http_threads.value() < 1 || http_threads.value() > 256) return fail("--http-threads must be 1..256");
  const auto max_in_flight = a.get_int("--max-in-flight", 4 * max_seqs.value());
  if (!max_in_flight.ok() || max_in_flight.value() < 1 || max_in_flight.value() > 1 << 20) {
    return fail("--max-in-flight must be 1..1048576");
  }
  const std::string host = a.get("--host");
  if (!a.has("--api-keys") && !is_loopback(host)) {
    return fail("without --api-keys the server is open to anyone who reaches it: give --api-keys FILE to listen on " + host);
  }

  const std::string path = options.value().path;
  const size_t slash = path.find_last_of('/');
  std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".gguf") stem.resize(stem.size() - 5);
  ModelLoadRequest first;
  first.path = path;
  first.label = a.has("--model-version") ? a.get("--model-version") : version_label_from(stem);
  if (!valid_version_label(first.label)) return fail("--model-version '" + first.label + "': 1 to 64 letters, digits or . _ - : +");
  if (ranks.value() && a.has("--admin-keys") && options.value().model.backend != "cpu") {
    // A swap loads beside the running version, and a device's collectives are joined with calls of their own.
    return fail("--admin-keys (swapping versions) with --tensor-parallel on " + options.value().model.backend + " ranks is not implemented");
  }
  if (ranks.value() && ranks.value()->rank() != 0) {
    const Status followed = follow_served_versions(a, *ranks.value());
    return followed.ok() ? 0 : fail(followed.message());
  }
  const ModelLoader loader = model_version_loader(a, step_sender.get());
  auto plan = loader.plan(first);
  if (!plan.ok()) return fail(plan.message());
  auto loaded = plan.value().load();
  if (!loaded.ok()) return fail(loaded.message());
  ModelVersions versions(loaded.take());  // the only owner: a swap can free this version
  if (a.has("--trace")) {
    // Every step of this first version; a swapped-in one is traced through POST /admin/trace.
    if (Status s = versions.current()->engine->trace().start(a.get("--trace"), -1); !s.ok()) return fail("--trace: " + s.message());
  }

  // Limits from the configuration alone, so the same flags behave the same on
  // every machine: overall, 4 requests/s per sequence slot with a burst of
  // twice the requests in flight; per tenant, half of each when the keys file
  // names two or more tenants (admission.h), else the same as overall.
  const std::string keys_file = a.get("--api-keys");
  auto n_tenants = Admission::count_tenants(keys_file);
  if (!n_tenants.ok()) return fail(n_tenants.message());
  const double share = n_tenants.value() >= 2 ? 0.5 : 1.0;
  auto rate = a.get_float("--rate", 4.0 * double(max_seqs.value()));
  auto burst = a.get_float("--burst", 2.0 * double(max_in_flight.value()));
  if (!rate.ok()) return fail(rate.message());
  if (!burst.ok()) return fail(burst.message());
  auto tenant_rate = a.get_float("--tenant-rate", rate.value() * share);
  auto tenant_burst = a.get_float("--tenant-burst", std::max(1.0, std::floor(burst.value() * share)));
  auto tenant_in_flight = a.get_int("--tenant-max-in-flight", std::max<int64_t>(1, int64_t(double(max_in_flight.value()) * share)));
  for (const auto* v : {&rate, &burst, &tenant_rate, &tenant_burst}) {
    if (!v->ok()) return fail(v->message());
    if (!(v->value() > 0 && v->value() <= 1e9)) return fail("--rate, --burst, --tenant-rate and --tenant-burst must be in (0, 1e9]");
  }
  if (!tenant_in_flight.ok()) return fail(tenant_in_flight.message());
  if (tenant_in_flight.value() < 1 || tenant_in_flight.value() > max_in_flight.value()) {
    return fail("--tenant-max-in-flight must be 1..--max-in-flight");
  }
  const AdmissionLimits limits{rate.value(),  burst.value(), tenant_rate.value(), tenant_burst.value(), max_in_flight.value(),
                               tenant_in_flight.value()};
  auto admission = Admission::create(keys_file, limits);
  if (!admission.ok()) return fail(admission.message());

  std::unique_ptr<AdminApi> admin;
  if (a.has("--admin-keys")) {
    auto admin_keys = KeyFile::read(a.get("--admin-keys"), "--admin-keys", "OPERATOR");
    if (!admin_keys.ok()) return fail(admin_keys.message());
    for (const auto& [key, name] : admin_keys.value().names()) {
      if (admission.value()->keys().names().count(key)) return fail("--admin-keys: the key of '" + name + "' is also a tenant's key in --api-keys");
    }
    admin = std::make_unique<AdminApi>(versions, loader, admin_keys.take(), first,
                                       std::chrono::milliseconds(int64_t(drain_timeout.value() * 1000)));
  }

  ServerOptions server_options;
  server_options.model_name = a.get("--served-model-name", stem);
  server_options.request_timeout = std::chrono::milliseconds(int64_t(request_timeout.value() * 1000));
  server_options.log_prompts = a.has("--log-prompts");
  auto stall_timeout = a.get_float("--stall-timeout");
  if (!stall_timeout.ok() || stall_timeout.value() < 0 || stall_timeout.value() > 86400) {
    return fail("--stall-timeout must be 0 (10 x the longest step, at least 10 s) to 86400 seconds");
  }
  server_options.stall_timeout_seconds = stall_timeout.value();
  server_options.ranks = ranks.value().get();
  const bool exit_on_stall = a.has("--exit-on-stall");
  const std::string pooling = a.get("--embedding-pooling");
  if (pooling != "last" && pooling != "mean") return fail("--embedding-pooling must be last or mean");
  server_options.embedding_pooling = pooling == "mean" ? GenerationParams::Pooling::mean : GenerationParams::Pooling::last;
  server_options.metrics_public = a.has("--metrics-public");
  std::unique_ptr<ResponseStore> response_store;
  std::unique_ptr<BatchStore> batch_store;
  std::unique_ptr<BatchRunner> batch_runner;  // started once the server is ready; stopped before it goes
  std::unique_ptr<BatchApi> batch_api;
  if (a.has("--store-dir")) {
    auto max_bytes = parse_memory_size(a.get("--store-max-bytes"));
    auto tenant_max_bytes = parse_memory_size(a.get("--store-tenant-max-bytes"));
    auto max_days = a.get_float("--store-max-age");
    if (!max_bytes.ok()) return fail("--store-max-bytes: " + max_bytes.message());
    if (!tenant_max_bytes.ok()) return fail("--store-tenant-max-bytes: " + tenant_max_bytes.message());
    if (!max_days.ok() || !(max_days.value() > 0 && max_days.value() <= 3650)) return fail("--store-max-age must be 0..3650 days");
    auto opened = ResponseStore::open(a.get("--store-dir"), ResponseStoreLimits{max_bytes.value(), int64_t(max_days.value() * 86400)});
    if (!opened.ok()) return fail(opened.message());
    response_store = opened.take();
    server_options.response_store = response_store.get();
    auto batches = BatchStore::open(a.get("--store-dir"));
    if (!batches.ok()) return fail(batches.message());
    batch_store = batches.take();
    batch_api = std::make_unique<BatchApi>(
        *batch_store,
        [&batch_runner] {
          if (batch_runner) batch_runner->wake();
        },
        tenant_max_bytes.value());
    server_options.batch_api = batch_api.get();
  } else if (a.has("--store-max-bytes") || a.has("--store-tenant-max-bytes") || a.has("--store-max-age") || a.has("--batch-lines-in-flight")) {
    return fail("--store-max-bytes, --store-tenant-max-bytes, --store-max-age and --batch-lines-in-flight go with --store-dir: give --store-dir DIR");
  }
  auto batch_lines = a.get_int("--batch-lines-in-flight");
  if (!batch_lines.ok() || batch_lines.value() < 1 || batch_lines.value() > 1024) return fail("--batch-lines-in-flight must be 1..1024");
  server_options.prepare_threads = int(prepare_threads.value());
  server_options.max_prepare_queue = size_t(max_in_flight.value());  // no narrower than admission itself
  Server server(versions, *admission.value(), server_options, admin.get());

  HttpServerOptions http_options;
  http_options.host = host;
  http_options.port = uint16_t(port.value());
  http_options.n_threads = int(http_threads.value());
  http_options.max_body_bytes = size_t(max_body.value());
  http_options.head_timeout = deadlines[0];
  http_options.body_timeout = deadlines[1];
  http_options.keepalive_timeout = deadlines[2];
  http_options.send_timeout = deadlines[3];
  http_options.max_connections = int(max_connections.value());
  http_options.max_connections_per_address = int(max_per_address.value());
  auto http = HttpServer::start(http_options, server);
  if (!http.ok()) return fail(http.message());
  server.set_connection_stats([&http] { return http.value()->stats(); });

  std::atomic<bool> draining{false}, drain_cut{false};
  std::thread drainer;
  http.value()->on_shutdown_signal([&](int signal) {
    if (draining.exchange(true)) return;
    DS_LOG_INFO("signal %d: draining %lld requests in flight (up to %.0f s)", signal, (long long)server.in_flight(), drain_timeout.value());
    server.start_draining();
    drainer = std::thread([&] {
      const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(drain_timeout.value() * 1000));
      while (server.in_flight() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (server.in_flight() > 0) {
        drain_cut = true;
        DS_LOG_WARN("drain timeout after %.0f s: ending the %lld requests still in flight", drain_timeout.value(),
                    (long long)server.cut_drain_short());
        // Each ends within an engine step and writes its error event; this only bounds the wait.
        const auto grace = Clock::now() + std::chrono::seconds(5);
        while (server.in_flight() > 0 && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      // A request leaves the count before its answer's last bytes leave the socket.
      http.value()->stop(k_final_bytes_grace);
    });
  });
  // The watchdog: a stall is logged once (and with --exit-on-stall ends the
  // process, exit code 4, for a supervisor to restart it); so is the
  // recovery. A tensor-parallel rank dead or stopped always ends it, a
  // second after /health began saying so: no collective can go on without
  // that rank, and none can be cancelled. It also frees the retired model
  // versions whose last request has ended.
  std::atomic<bool> watching{true};
  std::thread watchdog([&] {
    bool was_stalled = false;
    std::optional<Clock::time_point> rank_fault_seen;
    while (watching) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      if (const std::optional<std::string> fault = ranks.value() ? ranks.value()->fault() : std::nullopt) {
        if (!rank_fault_seen) {
          rank_fault_seen = Clock::now();
          DS_LOG_ERROR("tensor parallel: %s: /health answers 503; exiting with code 4 in 1 s", fault->c_str());
        } else if (Clock::now() - *rank_fault_seen >= std::chrono::seconds(1)) {
          std::fflush(nullptr);
          std::_Exit(4);
        }
      }
      for (const std::string& label : versions.release_unheld()) {
        DS_LOG_INFO("version '%s' released after its last request (resident now %s)", label.c_str(),
                    format_memory_size(resident_memory_bytes()).c_str());
      }
      const std::optional<std::string> reason = server.stall_reason();
      if (reason && !was_stalled) {
        DS_LOG_ERROR("engine stalled: %s", reason->c_str());
        if (exit_on_stall) {
          DS_LOG_ERROR("--exit-on-stall: exiting with code 4");
          std::fflush(nullptr);
          std::_Exit(4);
        }
      } else if (!reason && was_stalled) {
        DS_LOG_INFO("engine progressing again");
      }
      was_stalled = reason.has_value();
    }
  });
  if (batch_store) {
    batch_runner = std::make_unique<BatchRunner>(*batch_store, [&server](const PendingLine& line, std::shared_ptr<HttpExchange> exchange) {
      server.run_batch_line(line, std::move(exchange));
    }, int(batch_lines.value()));
  }
  server.set_ready(true);
  const double cold_start = std::chrono::duration<double>(Clock::now() - started).count();
  {  // held only here: a swap may retire it at once
    const std::shared_ptr<ModelVersion> first_version = versions.current();
    const ModelVersion& version = *first_version;
    DS_LOG_INFO("ready in %.2f s (cold start, warm-up included): model '%s' version '%s', context %lld, chat template: %s, "
                "tool calls: %s; admin API %s",
                cold_start, server_options.model_name.c_str(), version.label.c_str(), (long long)version.engine->max_context(),
                version.chat_template ? version.chat_template->origin().c_str() : "no", tool_call_format_name(version.tool_call_format),
                admin ? "on (--admin-keys)" : "off");
    DS_LOG_INFO("limits: %.2f requests/s (burst %.0f) and %lld in flight overall; %.2f/s (burst %.0f) and %lld in flight per tenant; %s",
                limits.global_rate, limits.global_burst, (long long)limits.max_in_flight, limits.tenant_rate, limits.tenant_burst,
                (long long)limits.tenant_max_in_flight, admission.value()->open_access() ? "open access (loopback only)" : "API keys required");
    DS_LOG_INFO("connections: at most %d open, %d per client address; deadlines: head %.1f s, body %.1f s, keep-alive %.1f s, send %.1f s",
                http.value()->max_connections(), http.value()->max_connections_per_address(), deadlines[0].count() / 1e3,
                deadlines[1].count() / 1e3, deadlines[2].count() / 1e3, deadlines[3].count() / 1e3);
    std::printf("dsinfer serve: listening on http://%s:%u\n", host.c_str(), unsigned(http.value()->port()));
    std::printf("try: curl http://%s:%u/v1/%s -H 'Content-Type: application/json' -d '%s'\n", host.c_str(),
                unsigned(http.value()->port()), version.chat_template ? "chat/completions" : "completions",
                version.chat_template ? "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}"
                            : "{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}");
  }
  std::fflush(stdout);
  http.value()->wait();
  if (drainer.joinable()) drainer.join();
  // Its lines in flight are cancelled and stay unfinished: they run at the next start.
  if (batch_runner) batch_runner->stop();
  watching = false;
  watchdog.join();
  if (drain_cut) {
    DS_LOG_WARN("stopped: the drain was cut short by --drain-timeout");
    return k_exit_drain_cut;
  }
  DS_LOG_INFO("stopped");
  return 0;
}

}  // namespace ds

// dsinfer serve: the OpenAI-compatible server. Loads the model, sizes the KV
// pool, starts the engine and the HTTP server (/health answers at once),
// warms up (a real forward through the engine), then turns /ready true. On
// SIGTERM or SIGINT it drains: not ready, new requests 503, those in flight
// finish (up to --drain-timeout), exit 0; when the drain time runs out the
// rest end with an error event and the exit status is 3.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "base/log.h"
#include "base/memory_size.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "server/api_server.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer serve: %s\n", message.c_str());
  return 1;
}

// The exit status when --drain-timeout ended requests still running (0: a full drain).
constexpr int k_exit_drain_cut = 3;

bool is_loopback(const std::string& host) { return host == "127.0.0.1" || host == "::1" || host == "localhost"; }

}  // namespace

int cmd_serve(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  auto values = model_value_options();
  values.insert({"--host", "--port", "--api-keys", "--served-model-name", "--max-num-seqs", "--max-num-batched-tokens",
                 "--max-in-flight", "--request-timeout", "--drain-timeout", "--rate", "--burst", "--tenant-rate",
                 "--tenant-burst", "--tenant-max-in-flight", "--chat-template", "--tool-call-format", "--embedding-pooling", "--stall-timeout", "--http-threads", "--max-body-bytes",
                 "--client-header-timeout", "--client-body-timeout", "--keepalive-timeout", "--send-timeout",
                 "--max-connections", "--max-connections-per-address", "--prepare-threads"});
  auto flags = model_flags();
  flags.insert({"--log-prompts", "--no-prefix-cache", "--metrics-public", "--exit-on-stall"});
  auto args = Args::parse(argc, argv, values, flags);
  if (!args.ok()) return fail(args.message());
  const Args& a = args.value();
  auto options = parse_model_options(a);
  if (!options.ok()) return fail(options.message());

  auto max_seqs = a.get_int("--max-num-seqs", 16);
  auto batched = a.get_int("--max-num-batched-tokens", 512);
  auto port = a.get_int("--port", 8000);
  auto request_timeout = a.get_float("--request-timeout", 600);
  auto drain_timeout = a.get_float("--drain-timeout", 30);
  auto http_threads = a.get_int("--http-threads", 2);
  auto max_body = a.get_int("--max-body-bytes", 8 << 20);
  auto prepare_threads = a.get_int("--prepare-threads", 2);
  auto max_connections = a.get_int("--max-connections", 0);
  auto max_per_address = a.get_int("--max-connections-per-address", 0);
  for (const Status& s : {max_seqs.status(), batched.status(), port.status(), request_timeout.status(), drain_timeout.status(),
                          http_threads.status(), max_body.status(), prepare_threads.status(), max_connections.status(),
                          max_per_address.status()}) {
    if (!s.ok()) return fail(s.message());
  }
  // Deadlines in seconds, nginx's names and defaults (keep-alive 60 s instead of 75).
  std::chrono::milliseconds deadlines[4];
  const char* deadline_names[4] = {"--client-header-timeout", "--client-body-timeout", "--keepalive-timeout", "--send-timeout"};
  const double deadline_defaults[4] = {10, 60, 60, 60};
  for (int i = 0; i < 4; ++i) {
    auto seconds = a.get_float(deadline_names[i], deadline_defaults[i]);
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
  if (max_seqs.value() < 1 || max_seqs.value() > 4096) return fail("--max-num-seqs must be 1..4096");
  if (batched.value() < 1 || batched.value() > 1 << 20) return fail("--max-num-batched-tokens must be 1..1048576");
  if (port.value() < 0 || port.value() > 65535) return fail("--port must be 0..65535");
  if (!(request_timeout.value() > 0) || !(drain_timeout.value() >= 0)) return fail("--request-timeout must be > 0 and --drain-timeout >= 0");
  if (http_threads.value() < 1 || http_threads.value() > 256) return fail("--http-threads must be 1..256");
  const auto max_in_flight = a.get_int("--max-in-flight", 4 * max_seqs.value());
  if (!max_in_flight.ok() || max_in_flight.value() < 1 || max_in_flight.value() > 1 << 20) {
    return fail("--max-in-flight must be 1..1048576");
  }
  const std::string host = a.get("--host", "127.0.0.1");
  if (!a.has("--api-keys") && !is_loopback(host)) {
    return fail("without --api-keys the server is open to anyone who reaches it: give --api-keys FILE to listen on " + host);
  }

  auto model = Model::load(options.value().path, options.value().model);
  if (!model.ok()) return fail(model.message());
  const ModelConfig& config = model.value()->config();
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  if (!tokenizer.ok()) return fail(tokenizer.message());
  auto chat_template = ChatTemplate::choose(&model.value()->file(), a.get("--chat-template"));
  if (!chat_template.ok()) return fail(chat_template.message());
  if (!chat_template.value()) DS_LOG_WARN("the model has no tokenizer.chat_template: /v1/chat/completions is off (give --chat-template FILE|NAME)");
  const bool has_chat = chat_template.value().has_value();
  const std::string chat_origin = has_chat ? chat_template.value()->origin() : "no";
  ToolCallFormat tool_call_format = has_chat ? chat_template.value()->tool_call_format() : ToolCallFormat::none;
  if (a.has("--tool-call-format") && a.get("--tool-call-format") != "auto") {
    auto format = tool_call_format_from_name(a.get("--tool-call-format"));
    if (!format.ok()) return fail("--tool-call-format: " + format.message());
    tool_call_format = format.value();
  }

  int64_t n_ctx = options.value().n_ctx > 0 ? options.value().n_ctx : std::min<int64_t>(config.n_ctx_train, 4096);
  KvCacheOptions kv = options.value().kv;
  const int64_t context_pages = (n_ctx + kv.page_tokens - 1) / kv.page_tokens;
  // Default pool: every sequence slot can hold a full context, within a quarter of free memory.
  int64_t wanted_pages = context_pages * max_seqs.value();
  if (options.value().kv_memory_bytes == 0) {
    const int64_t page_bytes = KvCache::bytes_per_token(config, kv.dtype) * kv.page_tokens;
    const int64_t quarter_free = available_memory_bytes() / 4 / page_bytes;
    if (quarter_free > 0) wanted_pages = std::min(wanted_pages, std::max(quarter_free, context_pages));
  }
  auto n_pages = kv_pool_pages(options.value(), config, wanted_pages);
  if (!n_pages.ok()) return fail(n_pages.message());
  if (n_pages.value() < context_pages) {
    DS_LOG_WARN("the KV pool holds %lld tokens, less than the context of %lld: the context is cut to fit",
                (long long)(n_pages.value() * kv.page_tokens), (long long)n_ctx);
    n_ctx = n_pages.value() * kv.page_tokens;
  }
  kv.n_pages = n_pages.value();
  auto memory = KvCache::create(config, kv);
  if (!memory.ok()) return fail(memory.message());

  EngineCoreConfig engine_config;
  engine_config.scheduler = SchedulerConfig{int32_t(batched.value()), int32_t(max_seqs.value()), int32_t(n_ctx)};
  engine_config.prefix_cache = !a.has("--no-prefix-cache");
  Engine engine(*model.value(), *memory.value(), engine_config, *tokenizer.value());

  // Warm-up: page faults, thread start-up and a decode, before anyone is told we are ready.
  {
    EngineRequest warm;
    warm.prompt.assign(16, tokenizer.value()->vocab().bos != k_no_token ? tokenizer.value()->vocab().bos : 0);
    warm.params.sampling.temperature = 0.0f;
    warm.params.max_tokens = 8;
    warm.params.stop_at_end_of_generation = false;
    auto stream = engine.submit(std::move(warm));
    for (;;) {
      auto event = stream->next(std::chrono::seconds(600));
      if (!event) return fail("warm-up did not finish");
      if (event->finish == FinishReason::error) return fail("warm-up failed: " + event->error);
      if (event->finish != FinishReason::none) break;
    }
  }

  // Limits from the configuration alone, so the same flags behave the same on
  // every machine: overall, 4 requests/s per sequence slot with a burst of
  // twice the requests in flight; per tenant, half of each when the keys file
  // names two or more tenants (admission.h), else the same as overall.
  const std::string keys_file = a.get("--api-keys", "");
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

  ServerOptions server_options;
  const std::string path = options.value().path;
  const size_t slash = path.find_last_of('/');
  std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".gguf") stem.resize(stem.size() - 5);
  server_options.model_name = a.get("--served-model-name", stem);
  server_options.max_context = n_ctx;
  server_options.page_tokens = int32_t(kv.page_tokens);
  server_options.request_timeout = std::chrono::milliseconds(int64_t(request_timeout.value() * 1000));
  server_options.log_prompts = a.has("--log-prompts");
  server_options.tool_call_format = tool_call_format;
  server_options.embedding_width = config.n_embd;
  auto stall_timeout = a.get_float("--stall-timeout", 0.0);
  if (!stall_timeout.ok() || stall_timeout.value() < 0 || stall_timeout.value() > 86400) {
    return fail("--stall-timeout must be 0 (10 x the longest step, at least 10 s) to 86400 seconds");
  }
  server_options.stall_timeout_seconds = stall_timeout.value();
  const bool exit_on_stall = a.has("--exit-on-stall");
  const std::string pooling = a.get("--embedding-pooling", "last");
  if (pooling != "last" && pooling != "mean") return fail("--embedding-pooling must be last or mean");
  server_options.embedding_pooling = pooling == "mean" ? GenerationParams::Pooling::mean : GenerationParams::Pooling::last;
  server_options.metrics_public = a.has("--metrics-public");
  server_options.prepare_threads = int(prepare_threads.value());
  server_options.max_prepare_queue = size_t(max_in_flight.value());  // no narrower than admission itself
  Server server(engine, *tokenizer.value(), std::move(chat_template.value()), *admission.value(), server_options);

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
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the final bytes leave the socket buffers
      }
      http.value()->stop();
    });
  });
  // The watchdog: a stall is logged once (and with --exit-on-stall ends the
  // process, exit code 4, for a supervisor to restart it); so is the recovery.
  std::atomic<bool> watching{true};
  std::thread watchdog([&] {
    bool was_stalled = false;
    while (watching) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
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
  server.set_ready(true);
  const double cold_start = std::chrono::duration<double>(Clock::now() - started).count();
  DS_LOG_INFO("ready in %.2f s (cold start, warm-up included): model '%s', context %lld, %d sequences, chat template: %s, "
              "tool calls: %s",
              cold_start, server_options.model_name.c_str(), (long long)n_ctx, int(max_seqs.value()), chat_origin.c_str(),
              tool_call_format_name(tool_call_format));
  DS_LOG_INFO("limits: %.2f requests/s (burst %.0f) and %lld in flight overall; %.2f/s (burst %.0f) and %lld in flight per tenant; %s",
              limits.global_rate, limits.global_burst, (long long)limits.max_in_flight, limits.tenant_rate, limits.tenant_burst,
              (long long)limits.tenant_max_in_flight, admission.value()->open_access() ? "open access (loopback only)" : "API keys required");
  DS_LOG_INFO("connections: at most %d open, %d per client address; deadlines: head %.1f s, body %.1f s, keep-alive %.1f s, send %.1f s",
              http.value()->max_connections(), http.value()->max_connections_per_address(), deadlines[0].count() / 1e3,
              deadlines[1].count() / 1e3, deadlines[2].count() / 1e3, deadlines[3].count() / 1e3);
  std::printf("dsinfer serve: listening on http://%s:%u\n", host.c_str(), unsigned(http.value()->port()));
  std::printf("try: curl http://%s:%u/v1/%s -H 'Content-Type: application/json' -d '%s'\n", host.c_str(),
              unsigned(http.value()->port()), has_chat ? "chat/completions" : "completions",
              has_chat ? "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}"
                          : "{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}");
  std::fflush(stdout);
  http.value()->wait();
  if (drainer.joinable()) drainer.join();
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

#include "server/metrics.h"

#include <cstdio>

#include "base/status.h"

namespace ds {
namespace {

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

const std::vector<double> k_latency_bounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160};
const std::vector<double> k_token_time_bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

}  // namespace

Metrics::Metrics() {
  declare("dsinfer:http_requests_total", "counter", "HTTP requests by path and status.");
  declare("dsinfer:request_success_total", "counter", "Finished generation requests by finish reason.");
  declare("dsinfer:request_rejected_total", "counter", "Generation requests refused before the engine, by reason.");
  declare("dsinfer:prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  declare("dsinfer:generation_tokens_total", "counter", "Generated tokens of finished requests.");
  declare("dsinfer:time_to_first_token_seconds", "histogram", "Time from arrival to the first token.", k_latency_bounds);
  declare("dsinfer:time_per_output_token_seconds", "histogram", "Mean time between output tokens, per request.", k_token_time_bounds);
  declare("dsinfer:e2e_request_latency_seconds", "histogram", "Time from arrival to the end of a request.", k_latency_bounds);
  declare("dsinfer:request_queue_time_seconds", "histogram", "Time from arrival to the first scheduled step.", k_latency_bounds);
}

void Metrics::declare(const std::string& name, const std::string& type, const std::string& help, std::vector<double> bounds) {
  Family& f = families_[name];
  f.help = help;
  f.type = type;
  f.bucket_counts.assign(bounds.size(), 0);
  f.bounds = std::move(bounds);
}

void Metrics::add(const std::string& family, const std::string& labels, double value) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(family);
  DS_CHECK(it != families_.end() && it->second.type == "counter", "undeclared counter");
  it->second.series[labels] += value;
}

void Metrics::observe(const std::string& family, double value) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(family);
  DS_CHECK(it != families_.end() && it->second.type == "histogram", "undeclared histogram");
  Family& f = it->second;
  for (size_t i = 0; i < f.bounds.size(); ++i) {
    if (value <= f.bounds[i]) ++f.bucket_counts[i];
  }
  f.sum += value;
  ++f.count;
}

std::string Metrics::render(const EngineStats& e, int64_t in_flight) const {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + number(value) + "\n";
  };
  gauge("dsinfer:num_requests_running", "Requests in the engine's running set.", e.n_running);
  gauge("dsinfer:num_requests_waiting", "Requests waiting for the engine (new or preempted).", e.n_waiting);
  gauge("dsinfer:num_requests_in_flight", "Generation requests the server holds open.", double(in_flight));
  gauge("dsinfer:kv_cache_usage_perc", "Fraction of KV pages held by requests.", e.pages_total ? double(e.pages_held) / e.pages_total : 0.0);
  gauge("dsinfer:kv_pages_total", "KV pages in the pool.", e.pages_total);
  gauge("dsinfer:kv_pages_held", "KV pages held by at least one request.", e.pages_held);
  gauge("dsinfer:kv_pages_cached", "KV pages registered in the prefix cache.", e.pages_cached);
  gauge("dsinfer:kv_window_pages_total", "KV window pages (a sliding window's and a compressor's last positions; 0: the model has none).",
        e.window_pages_total);
  gauge("dsinfer:kv_window_pages_held", "KV window pages held by requests.", e.window_pages_held);
  gauge("dsinfer:kv_page_bytes", "Bytes of one KV page across all layers.", double(e.page_bytes));
  gauge("dsinfer:kv_fragmentation", "Allocated KV slots not holding a token, as a fraction of allocated.", e.fragmentation);
  gauge("dsinfer:num_preemptions", "Sequences preempted since start (monotonic).", double(e.n_preemptions));
  gauge("dsinfer:prefix_cache_queries", "Prompt tokens looked up in the prefix cache since start (monotonic).", double(e.prefix_query_tokens));
  gauge("dsinfer:prefix_cache_hits", "Prompt tokens found in the prefix cache since start (monotonic).", double(e.prefix_hit_tokens));
  gauge("dsinfer:engine_steps", "Engine steps since start (monotonic).", double(e.steps));
  gauge("dsinfer:last_step_tokens", "Tokens computed in the last step.", e.last_step_tokens);
  gauge("dsinfer:last_step_seconds", "Duration of the last step.", e.last_step_seconds);
  gauge("dsinfer:grammar_mask_seconds", "Time spent masking logits for constrained output since start (monotonic).",
        e.grammar_mask_seconds);
  gauge("dsinfer:spec_drafts", "Drafts verified by speculative decoding (a sequence's draft tokens in one step) since start "
        "(monotonic).", double(e.drafts));
  gauge("dsinfer:spec_draft_tokens", "Draft tokens verified by speculative decoding since start (monotonic).",
        double(e.draft_tokens));
  gauge("dsinfer:spec_accepted_tokens", "Draft tokens accepted (the target sampled the same token) since start (monotonic).",
        double(e.accepted_draft_tokens));
  if (const auto& d = e.kv_disk) {  // --kv-disk-dir
    gauge("dsinfer:kv_disk_hits", "KV pages read back from the disk tier since start (monotonic).", double(d->hits));
    gauge("dsinfer:kv_disk_misses", "Prefix lookups the disk tier could not continue since start (monotonic).", double(d->misses));
    gauge("dsinfer:kv_disk_read_bytes", "Bytes read from the disk tier since start (monotonic).", double(d->bytes_read));
    gauge("dsinfer:kv_disk_written_bytes", "Bytes written to the disk tier since start (monotonic).", double(d->bytes_written));
    gauge("dsinfer:kv_disk_pages_written", "KV pages written to the disk tier since start (monotonic).", double(d->pages_written));
    gauge("dsinfer:kv_disk_pages_dropped", "KV pages not written: the queue was full or the write failed (monotonic).",
          double(d->pages_dropped));
    gauge("dsinfer:kv_disk_pages_evicted", "Page files removed to keep the directory within its budget (monotonic).",
          double(d->pages_evicted));
    gauge("dsinfer:kv_disk_corrupt_pages", "Page files that failed a check (torn, truncated, foreign, corrupted), removed (monotonic).",
          double(d->corrupt));
    gauge("dsinfer:kv_disk_bytes", "Bytes of page files in the disk tier's directory, as this instance knows it.", double(d->bytes));
    gauge("dsinfer:kv_disk_foreign_files", "Page files of another model or setting found at start (never read).", double(d->foreign_files));
    gauge("dsinfer:kv_disk_writes_disabled", "1 once the disk refused writes (full, read-only, failing): no more pages are written.",
          d->writes_disabled ? 1.0 : 0.0);
  }
  if (!e.expert_tokens.empty()) {
    out += "# HELP dsinfer:expert_tokens Tokens each routed expert took in the last step, summed over MoE layers.\n"
           "# TYPE dsinfer:expert_tokens gauge\n";
    for (size_t i = 0; i < e.expert_tokens.size(); ++i) {
      out += "dsinfer:expert_tokens{expert=\"" + std::to_string(i) + "\"} " + std::to_string(e.expert_tokens[i]) + "\n";
    }
  }

  std::lock_guard lock(mutex_);
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
    if (f.type == "counter") {
      if (f.series.empty()) out += name + " 0\n";
      for (const auto& [labels, value] : f.series) out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
      continue;
    }
    for (size_t i = 0; i < f.bounds.size(); ++i) {
      out += name + "_bucket{le=\"" + number(f.bounds[i]) + "\"} " + std::to_string(f.bucket_counts[i]) + "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(f.count) + "\n";
    out += name + "_sum " + number(f.sum) + "\n" + name + "_count " + std::to_string(f.count) + "\n";
  }
  return out;
}

}  // namespace ds

#include "router/router_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file_text.h"
#include "router/address_range.h"

namespace ds {
namespace {

using json = nlohmann::json;

Status only_keys(const json& object, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (allowed.count(key)) continue;
    return Status::error("config: unknown key '" + (where.empty() ? key : where + "." + key) + "'");
  }
  return Status();
}

Result<std::string> string_field(const json& object, const char* key, const std::string& where, bool required) {
  if (!object.contains(key)) {
    if (required) return Status::error("config: " + where + "'" + key + "' is required");
    return std::string();
  }
  if (!object[key].is_string() || object[key].get<std::string>().empty()) {
    return Status::error("config: " + where + "'" + key + "' must be a non-empty string");
  }
  return object[key].get<std::string>();
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// A number at `object[key]` within [low, high]; nullopt when absent.
Result<std::optional<double>> number_field(const json& object, const char* key, const std::string& where, double low, double high) {
  if (!object.contains(key)) return std::optional<double>();
  const json& v = object[key];
  if (!v.is_number() || v.get<double>() < low || v.get<double>() > high) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", low, high);
    return Status::error("config: " + where + "'" + key + "' must be a number in " + range);
  }
  return std::optional<double>(v.get<double>());
}

Result<std::vector<std::string>> string_list(const json& object, const char* key, const std::string& where) {
  std::vector<std::string> out;
  if (!object.contains(key)) return out;
  if (!object[key].is_array()) return Status::error("config: " + where + "'" + key + "' must be an array of strings");
  for (const json& item : object[key]) {
    if (!item.is_string() || item.get<std::string>().empty()) return Status::error("config: " + where + "'" + key + "' must be an array of strings");
    out.push_back(item);
  }
  return out;
}

Status parse_thresholds(const json& t, CanaryThresholds& out) {
  if (!t.is_object()) return Status::error("config: 'canary.thresholds' must be an object");
  DS_RETURN_IF_ERROR(only_keys(t, {"max_error_rate_increase", "max_ttft_p99_increase", "max_tpot_p99_increase", "latency_slack_ms",
                                   "min_exact_match", "min_token_overlap"},
                               "canary.thresholds"));
  const std::string where = "canary.thresholds.";
  // null turns a judgement off; absent keeps the default.
  const std::pair<const char*, std::optional<double>*> judged[] = {
      {"max_error_rate_increase", &out.max_error_rate_increase}, {"max_ttft_p99_increase", &out.max_ttft_p99_increase},
      {"max_tpot_p99_increase", &out.max_tpot_p99_increase},     {"min_exact_match", &out.min_exact_match},
      {"min_token_overlap", &out.min_token_overlap}};
  for (const auto& [key, field] : judged) {
    if (t.contains(key) && t[key].is_null()) {
      field->reset();
      continue;
    }
    const bool fraction = std::string(key).rfind("min_", 0) == 0 || std::string(key) == "max_error_rate_increase";
    auto value = number_field(t, key, where, 0.0, fraction ? 1.0 : 1e6);
    if (!value.ok()) return value.status();
    if (value.value()) *field = *value.value();
  }
  auto slack = number_field(t, "latency_slack_ms", where, 0.0, 1e7);
  if (!slack.ok()) return slack.status();
  if (slack.value()) out.latency_slack_ms = *slack.value();
  return Status();
}

Result<CanaryConfig> parse_canary(const json& c) {
  if (!c.is_object()) return Status::error("config: 'canary' must be an object");
  DS_RETURN_IF_ERROR(only_keys(c, {"stable", "canary", "stages", "min_samples", "shadow_fraction", "select", "thresholds"}, "canary"));
  CanaryConfig out;
  auto stable = string_field(c, "stable", "canary.", true);
  auto canary = string_field(c, "canary", "canary.", true);
  if (!stable.ok()) return stable.status();
  if (!canary.ok()) return canary.status();
  out.stable = stable.take();
  out.canary = canary.take();
  if (out.stable == out.canary) return Status::error("config: 'canary.stable' and 'canary.canary' must be two versions");
  if (c.contains("stages")) {
    const json& stages = c["stages"];
    out.stages.clear();
    if (stages.is_array()) {
      for (const json& s : stages) {
        if (!s.is_number_integer() || s.get<int>() < 1 || s.get<int>() > 100 || (!out.stages.empty() && s.get<int>() <= out.stages.back())) {
          out.stages.clear();
          break;
        }
        out.stages.push_back(s);
      }
    }
    if (out.stages.size() < 2 || out.stages.back() != 100) {
      return Status::error("config: 'canary.stages' must be rising percentages 1..100 ending at 100, at least one below it, e.g. [1, 10, 50, 100]");
    }
  }
  auto min_samples = number_field(c, "min_samples", "canary.", 1, 1e9);
  auto shadow = number_field(c, "shadow_fraction", "canary.", 0.0, 1.0);
  if (!min_samples.ok()) return min_samples.status();
  if (!shadow.ok()) return shadow.status();
  if (min_samples.value()) {
    if (*min_samples.value() != std::floor(*min_samples.value())) return Status::error("config: 'canary.min_samples' must be a whole number");
    out.min_samples = int64_t(*min_samples.value());
  }
  if (shadow.value()) out.shadow_fraction = *shadow.value();
  if (c.contains("select")) {
    const json& select = c["select"];
    if (!select.is_object()) return Status::error("config: 'canary.select' must be an object");
    DS_RETURN_IF_ERROR(only_keys(select, {"header", "tenants", "client_cidrs"}, "canary.select"));
    auto header = string_field(select, "header", "canary.select.", false);
    auto tenants = string_list(select, "tenants", "canary.select.");
    auto cidrs = string_list(select, "client_cidrs", "canary.select.");
    if (!header.ok()) return header.status();
    if (!tenants.ok()) return tenants.status();
    if (!cidrs.ok()) return cidrs.status();
    if (!header.value().empty()) out.header = header.take();
    out.tenants = tenants.take();
    out.client_cidrs = cidrs.take();
    for (const std::string& cidr : out.client_cidrs) {
      auto range = AddressRange::parse(cidr);
      if (!range.ok()) return Status::error("config: 'canary.select.client_cidrs': " + range.message());
    }
  }
  if (c.contains("thresholds")) DS_RETURN_IF_ERROR(parse_thresholds(c["thresholds"], out.thresholds));
  return out;
}

Result<AuditConfig> parse_audit(const json& a) {
  if (!a.is_object()) return Status::error("config: 'audit' must be an object");
  DS_RETURN_IF_ERROR(only_keys(a, {"path", "inputs"}, "audit"));
  AuditConfig out;
  auto path = string_field(a, "path", "audit.", true);
  if (!path.ok()) return path.status();
  out.path = path.take();
  if (a.contains("inputs")) {
    const json& inputs = a["inputs"];
    if (inputs == "all") {
      out.all_inputs = true;
    } else if (inputs.is_array()) {
      auto tenants = string_list(a, "inputs", "audit.");
      if (!tenants.ok()) return tenants.status();
      out.input_tenants = tenants.take();
    } else if (inputs != "none") {
      return Status::error("config: 'audit.inputs' must be \"none\", \"all\" or an array of tenants whose inputs are kept");
    }
  }
  return out;
}

// Instances name one directory alike however it is spelled ("kv/", "./kv"):
// children run in the router's working directory.
std::string normal_directory(const std::string& dir) {
  std::string normal = std::filesystem::absolute(dir).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

// A child's --kv-disk-dir (either spelling), normalised; "" without one.
std::string kv_disk_dir_of(const std::vector<std::string>& args) {
  constexpr std::string_view flag = "--kv-disk-dir";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return normal_directory(args[i + 1]);
    if (args[i].rfind(std::string(flag) + "=", 0) == 0) return normal_directory(args[i].substr(flag.size() + 1));
  }
  return "";
}

}  // namespace

Result<RouterConfig> RouterConfig::from_file(const std::string& path) {
  const std::optional<std::string> text = read_file_text(path);
  if (!text) return Status::error("config: cannot read '" + path + "'");
  return from_json(*text);
}

Result<RouterConfig> RouterConfig::from_json(const std::string& text) {
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return Status::error("config: not a JSON object");
  DS_RETURN_IF_ERROR(only_keys(root, {"listen", "api_keys", "admin_keys", "routing", "instances", "canary", "audit"}, ""));
  RouterConfig config;
  auto listen = string_field(root, "listen", "", false);
  if (!listen.ok()) return listen.status();
  if (!listen.value().empty()) {
    auto endpoint = parse_endpoint_url("http://" + listen.value());
    if (!endpoint.ok()) return Status::error("config: 'listen' must be HOST:PORT, e.g. 127.0.0.1:8000");
    config.listen = endpoint.take();
  }
  for (const char* key : {"api_keys", "admin_keys"}) {
    auto file = string_field(root, key, "", false);
    if (!file.ok()) return file.status();
    (std::string(key) == "api_keys" ? config.api_keys : config.admin_keys) = file.take();
  }
  if (root.contains("routing")) {
    const json& routing = root["routing"];
    if (routing != "prefix_affinity" && routing != "least_loaded" && routing != "random") {
      return Status::error("config: 'routing' must be \"prefix_affinity\", \"least_loaded\" or \"random\"");
    }
    config.routing = routing.get<std::string>();
  }
  if (!root.contains("instances") || !root["instances"].is_array() || root["instances"].empty()) {
    return Status::error("config: 'instances' must be a non-empty array");
  }
  std::set<std::string> ids;
  for (size_t i = 0; i < root["instances"].size(); ++i) {
    const json& item = root["instances"][i];
    const std::string where = "instances[" + std::to_string(i) + "].";
    if (!item.is_object()) return Status::error("config: " + where.substr(0, where.size() - 1) + " must be an object");
    DS_RETURN_IF_ERROR(only_keys(item, {"id", "version", "url", "model", "device", "args", "kv_disk_dir"}, where.substr(0, where.size() - 1)));
    InstanceSpec spec;
    auto id = string_field(item, "id", where, true);
    auto version = string_field(item, "version", where, true);
    auto url = string_field(item, "url", where, false);
    auto model = string_field(item, "model", where, false);
    auto device = string_field(item, "device", where, false);
    auto kv_disk_dir = string_field(item, "kv_disk_dir", where, false);
    for (const auto* field : {&id, &version, &url, &model, &device, &kv_disk_dir}) {
      if (!field->ok()) return field->status();
    }
    spec.id = id.take();
    spec.version = version.take();
    spec.url = url.take();
    spec.model = model.take();
    spec.device = device.take();
    spec.kv_disk_dir = kv_disk_dir.take();
    if (!valid_id(spec.id)) return Status::error("config: " + where + "'id' must be 1-64 letters, digits or - _ .");
    if (!ids.insert(spec.id).second) return Status::error("config: instance id '" + spec.id + "' is given twice");
    if (spec.url.empty() == spec.model.empty()) {
      return Status::error("config: " + where + " needs exactly one of 'url' (an instance to front) and 'model' (a child to start)");
    }
    if (!spec.url.empty()) {
      if (!spec.device.empty() || item.contains("args")) {
        return Status::error("config: " + where + "'device' and 'args' are for a child ('model'), not a fronted 'url'");
      }
      if (!spec.kv_disk_dir.empty()) spec.kv_disk_dir = normal_directory(spec.kv_disk_dir);
      auto endpoint = parse_endpoint_url(spec.url);
      if (!endpoint.ok()) return Status::error("config: " + where + "'url': " + endpoint.message());
    }
    if (item.contains("args")) {
      if (!item["args"].is_array()) return Status::error("config: " + where + "'args' must be an array of strings");
      for (const json& arg : item["args"]) {
        if (!arg.is_string()) return Status::error("config: " + where + "'args' must be an array of strings");
        const std::string a = arg;
        for (const char* owned : {"-m", "--model", "--port", "--host", "--model-version", "--device", "--api-keys"}) {
          if (a == owned) return Status::error("config: " + where + "'args' may not hold " + a + ": the router sets it");
        }
        spec.args.push_back(a);
      }
    }
    if (spec.child()) {
      if (!spec.kv_disk_dir.empty()) {
        return Status::error("config: " + where + "'kv_disk_dir' is for a fronted 'url'; a child's is the --kv-disk-dir of its 'args'");
      }
      spec.kv_disk_dir = kv_disk_dir_of(spec.args);
    }
    config.instances.push_back(std::move(spec));
  }
  if (root.contains("canary") != root.contains("audit")) {
    return Status::error(root.contains("canary") ? "config: a 'canary' release needs its 'audit' (the SQLite file its requests and decisions go to)"
                                                 : "config: 'audit' records a canary release: give 'canary' too, or remove it");
  }
  if (root.contains("canary")) {
    auto canary = parse_canary(root["canary"]);
    if (!canary.ok()) return canary.status();
    auto audit = parse_audit(root["audit"]);
    if (!audit.ok()) return audit.status();
    config.canary = canary.take();
    config.audit = audit.take();
    std::set<std::string> versions;
    for (const InstanceSpec& spec : config.instances) {
      if (spec.version != config.canary->stable && spec.version != config.canary->canary) {
        return Status::error("config: instance '" + spec.id + "' is of version '" + spec.version + "', neither the canary's stable ('" +
                             config.canary->stable + "') nor its canary ('" + config.canary->canary + "')");
      }
      versions.insert(spec.version);
    }
    if (versions.size() != 2) return Status::error("config: a canary release needs instances of both its versions");
  }
  return config;
}

}  // namespace ds

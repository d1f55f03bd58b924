#include "router/router_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace ds {
namespace {

using json = nlohmann::json;

Status only_keys(const json& object, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (allowed.count(key)) continue;
    if (where.empty() && (key == "canary" || key == "audit")) {
      return Status::error("config: '" + key + "' (canary releases and their audit) is not implemented yet; remove it");
    }
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

}  // namespace

Result<RouterConfig> RouterConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error("config: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str());
}

Result<RouterConfig> RouterConfig::from_json(const std::string& text) {
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return Status::error("config: not a JSON object");
  DS_RETURN_IF_ERROR(only_keys(root, {"listen", "api_keys", "admin_keys", "routing", "instances"}, ""));
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
    DS_RETURN_IF_ERROR(only_keys(item, {"id", "version", "url", "model", "device", "args"}, where.substr(0, where.size() - 1)));
    InstanceSpec spec;
    auto id = string_field(item, "id", where, true);
    auto version = string_field(item, "version", where, true);
    auto url = string_field(item, "url", where, false);
    auto model = string_field(item, "model", where, false);
    auto device = string_field(item, "device", where, false);
    for (const auto* field : {&id, &version, &url, &model, &device}) {
      if (!field->ok()) return field->status();
    }
    spec.id = id.take();
    spec.version = version.take();
    spec.url = url.take();
    spec.model = model.take();
    spec.device = device.take();
    if (!valid_id(spec.id)) return Status::error("config: " + where + "'id' must be 1-64 letters, digits or - _ .");
    if (!ids.insert(spec.id).second) return Status::error("config: instance id '" + spec.id + "' is given twice");
    if (spec.url.empty() == spec.model.empty()) {
      return Status::error("config: " + where + " needs exactly one of 'url' (an instance to front) and 'model' (a child to start)");
    }
    if (!spec.url.empty()) {
      if (!spec.device.empty() || item.contains("args")) {
        return Status::error("config: " + where + "'device' and 'args' are for a child ('model'), not a fronted 'url'");
      }
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
    config.instances.push_back(std::move(spec));
  }
  return config;
}

}  // namespace ds

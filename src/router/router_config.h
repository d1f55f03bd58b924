#pragma once
// `dsinfer router --config FILE`: one JSON object. Every key is honoured or
// refused by name (README, "Router"):
//
//   {"listen": "127.0.0.1:8000",
//    "api_keys": "keys.txt", "admin_keys": "admin.txt",         (optional, as serve's flags)
//    "routing": "prefix_affinity" | "least_loaded" | "random",  (optional)
//    "instances": [{"id": "a", "version": "v1", "model": "M.gguf", "device": "cpu:0", "args": ["--ctx-size", "4096"]},
//                  {"id": "b", "version": "v1", "url": "http://127.0.0.1:8001"}]}
//
// An instance with "model" is a child process the router starts (and
// restarts), `dsinfer serve` on loopback; one with "url" is fronted as it is.

#include <string>
#include <vector>

#include "base/status.h"
#include "router/upstream_client.h"

namespace ds {

struct InstanceSpec {
  std::string id, version;
  std::string url;           // a fronted instance, or
  std::string model, device;  // a child's model file and --device ("" for none)
  std::vector<std::string> args;  // more `dsinfer serve` flags for the child
  bool child() const { return url.empty(); }
};

struct RouterConfig {
  Endpoint listen{"127.0.0.1", 8000};
  std::string api_keys, admin_keys;  // files, as for serve; empty: none
  std::vector<InstanceSpec> instances;
  // How an instance is chosen: "prefix_affinity" (default: where the prompt's
  // prefix probably is, unless that instance is much busier than the least
  // busy), "least_loaded", or "random" (a baseline to measure the others against).
  std::string routing = "prefix_affinity";

  static Result<RouterConfig> from_file(const std::string& path);
  static Result<RouterConfig> from_json(const std::string& text);
};

}  // namespace ds

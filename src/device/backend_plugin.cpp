#include "device/backend_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace ds {
namespace {

std::string plugin_dir() {
  if (const char* dir = std::getenv("DSINFER_BACKEND_DIR"); dir && *dir) return dir;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  const std::string path(exe, size_t(n));
  return path.substr(0, path.rfind('/'));
}

// Every plugin's entry point: `dsinfer_<library>_backend`.
using Factory = Backend* (*)(int device, int n_host_threads, char* error, size_t error_size);

}  // namespace

std::string plugin_backend_path(const std::string& library) { return plugin_dir() + "/libdsinfer_" + library + ".so"; }

Result<void*> load_plugin_symbol(const std::string& library, const std::string& symbol, const std::string& what) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  const std::string path = plugin_backend_path(library);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    return Status::error(what + ": this build has no " + library + " plugin (" + dlerror() +
                         "; it is built where its compiler and libraries are present, and installed beside the binary)");
  }
  void* entry = dlsym(handle, symbol.c_str());
  if (!entry) return Status::error(path + " has no " + symbol);
  return entry;
}

Result<std::unique_ptr<Backend>> load_plugin_backend(const std::string& library, int device, int n_host_threads) {
  auto entry = load_plugin_symbol(library, "dsinfer_" + library + "_backend", "device " + library + ":" + std::to_string(device));
  if (!entry.ok()) return entry.status();
  auto factory = reinterpret_cast<Factory>(entry.value());
  char error[512] = "";
  Backend* backend = factory(device, n_host_threads, error, sizeof error);
  if (!backend) return Status::error("device " + library + ":" + std::to_string(device) + ": " + error);
  return std::unique_ptr<Backend>(backend);
}

}  // namespace ds

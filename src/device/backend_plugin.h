#pragma once
// Backends built as shared objects beside the binary (libdsinfer_cuda.so,
// later Ascend's), loaded on first use, as llama.cpp loads its dynamic
// backends: the binary links nothing of a device's libraries, so it runs
// where they are absent. The directory is $DSINFER_BACKEND_DIR, else the
// binary's own. The device collectives (libdsinfer_nccl.so: parallel/) load
// the same way.

#include <memory>
#include <string>

#include "device/backend.h"

namespace ds {

// Where the plugin `library` (e.g. "cuda") is looked for.
std::string plugin_backend_path(const std::string& library);

// The entry point `symbol` of the plugin `library`, loaded once and never
// unloaded (what it makes runs its code until the process ends); `what`
// names the user's request in the error where the plugin is absent.
Result<void*> load_plugin_symbol(const std::string& library, const std::string& symbol, const std::string& what);

// The backend `library` (e.g. "cuda") makes for device number `device`.
Result<std::unique_ptr<Backend>> load_plugin_backend(const std::string& library, int device, int n_host_threads);

}  // namespace ds

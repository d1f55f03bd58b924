// dsinfer --version: what this binary is (version, the commit it was built
// from, the build type), what it can run on (backends, tensor parallel) and
// the kernels it picks on this CPU. On stdout, for bug reports.

#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/version.h"
#include "build_info.h"
#include "cli/commands.h"
#include "device/backend_plugin.h"
#include "kernels/cpu_features.h"
#include "parallel/mpi_collective.h"

namespace ds {

int cmd_version() {
  std::printf("dsinfer %s\n", k_dsinfer_version);
  std::printf("commit: %s\n", DSINFER_COMMIT);
  std::printf("build: %s, %s\n", DSINFER_BUILD_TYPE, DSINFER_COMPILER);
  const std::string cuda = plugin_backend_path("cuda");
  std::printf("backends: cpu, cuda %s\n", access(cuda.c_str(), R_OK) == 0 ? ("(plugin " + cuda + ")").c_str() : "(not built: no plugin here)");
  std::printf("tensor parallel: %s\n", have_mpi() ? "MPI" : "not built (no MPI at build time)");
  const CpuFeatures& f = cpu_features();
  std::string isa;
  const std::pair<bool, const char*> named[] = {{f.avx2, "avx2"},           {f.fma, "fma"},
                                                {f.f16c, "f16c"},           {f.avx512f, "avx512f"},
                                                {f.avx512bw, "avx512bw"},   {f.avx512vl, "avx512vl"},
                                                {f.avx512vnni, "avx512_vnni"}, {f.avx512bf16, "avx512_bf16"},
                                                {f.amx_tile, "amx_tile"},   {f.amx_int8, "amx_int8"},
                                                {f.amx_bf16, "amx_bf16"}};
  for (const auto& [present, name] : named) {
    if (present) isa += std::string(isa.empty() ? "" : " ") + name;
  }
  std::printf("cpu: %s\n", isa.empty() ? "(none of the ISA extensions the kernels use)" : isa.c_str());
  std::printf("kernels: %s (DSINFER_ISA caps them)\n", kernel_isa_name());
  return 0;
}

}  // namespace ds

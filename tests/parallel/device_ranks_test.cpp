#include "parallel/device_ranks.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "device/forwarding_backend.h"
#include "support/one_rank_collective.h"

namespace ds {
namespace {

// The CPU backend as another device would present itself.
struct OtherDevice : ForwardingBackend {
  OtherDevice(const char* api, bool host_memory) : ForwardingBackend(create_backend("cpu", 1).take()), api_(api), host_memory_(host_memory) {}
  bool reads_host_memory() const override { return host_memory_; }
  NativeQueue native_queue() override { return api_ ? NativeQueue{api_, 0, nullptr} : NativeQueue{}; }
  const char* api_;
  bool host_memory_;
};

TEST(DeviceRanks, TheCpuSumsOverTheHostsCollectives) {
  OneRankCollective host;
  auto cpu = create_backend("cpu", 1);
  ASSERT_TRUE(cpu.ok());
  auto joined = join_device_ranks(*cpu.value(), host);
  ASSERT_TRUE(joined.ok()) << joined.message();
  EXPECT_EQ(joined.value(), nullptr);  // the host's serve
}

TEST(DeviceRanks, ADeviceWithoutCollectivesIsRefusedByName) {
  OneRankCollective host;
  OtherDevice npu("npu", false);
  auto refused = join_device_ranks(npu, host);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("no collectives for npu devices"), std::string::npos) << refused.message();
  OtherDevice unnamed(nullptr, false);
  refused = join_device_ranks(unnamed, host);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("has no collectives between ranks"), std::string::npos) << refused.message();
}

TEST(DeviceRanks, CudaWithoutTheNcclPluginIsRefusedNamingIt) {
  const std::filesystem::path empty = std::filesystem::temp_directory_path() / ("dsinfer-no-plugins-" + std::to_string(getpid()));
  std::filesystem::create_directories(empty);
  ASSERT_EQ(setenv("DSINFER_BACKEND_DIR", empty.c_str(), 1), 0);
  OneRankCollective host;
  OtherDevice cuda("cuda", false);
  auto refused = join_device_ranks(cuda, host);
  unsetenv("DSINFER_BACKEND_DIR");
  std::filesystem::remove_all(empty);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("this build has no nccl plugin"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace ds

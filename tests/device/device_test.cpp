#include "device/device.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ds {
namespace {

TEST(Device, ParsesCoreListsAndRefusesWhatIsNotACpuDevice) {
  auto one = parse_device("cpu:0");
  ASSERT_TRUE(one.ok()) << one.message();
  EXPECT_EQ(one.value().cores, std::vector<int>{0});
  EXPECT_EQ(one.value().numa_node, -1);
  if (sysconf(_SC_NPROCESSORS_CONF) >= 2) {
    auto list = parse_device("cpu:1,0-1");
    ASSERT_TRUE(list.ok()) << list.message();
    EXPECT_EQ(list.value().cores, (std::vector<int>{0, 1}));  // sorted, each once
  }
  for (const char* bad : {"cpu", "cpu:", "cpu:x", "cpu:1-0", "cpu:-1", "cpu:0-", "tpu:0", "cpu:numa", "cpu:numaX", "cpu:0,,"}) {
    EXPECT_FALSE(parse_device(bad).ok()) << bad;
  }
  auto absent = parse_device("cpu:" + std::to_string(sysconf(_SC_NPROCESSORS_CONF)));
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.message().find("does not exist"), std::string::npos) << absent.message();
  auto cuda = parse_device("cuda:1");
  ASSERT_TRUE(cuda.ok()) << cuda.message();
  EXPECT_EQ(cuda.value().gpu, 1);
  EXPECT_TRUE(cuda.value().cores.empty());
  EXPECT_EQ(cuda.value().backend(), "cuda:1");
  EXPECT_EQ(parse_device("cpu:0").value().backend(), "cpu");
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "npu:0"}) EXPECT_FALSE(parse_device(bad).ok()) << bad;
}

TEST(Device, ListsOneDevicePerRank) {
  if (sysconf(_SC_NPROCESSORS_CONF) >= 3) {
    auto two = parse_devices("cpu:0,2,cpu:1");
    ASSERT_TRUE(two.ok()) << two.message();
    ASSERT_EQ(two.value().size(), 2u);
    EXPECT_EQ(two.value()[0].cores, (std::vector<int>{0, 2}));  // an item without a kind is the previous device's
    EXPECT_EQ(two.value()[1].cores, std::vector<int>{1});
  }
  auto gpus = parse_devices("cuda:0,cuda:1");
  ASSERT_TRUE(gpus.ok()) << gpus.message();
  EXPECT_EQ(gpus.value()[1].backend(), "cuda:1");
  EXPECT_EQ(parse_devices("cpu:0").value().size(), 1u);
  for (const char* bad : {"", ",cpu:0", "cpu:0,", "cpu:0,,cpu:0", "2,cpu:0", "cpu:0,tpu:1"}) {
    EXPECT_FALSE(parse_devices(bad).ok()) << bad;
  }
  // Ranks of different hosts may name the same cores (each host's locks keep one host's ranks apart).
  EXPECT_EQ(parse_devices("cpu:0,cpu:0").value().size(), 2u);
}

TEST(Device, NumaNodesComeFromSysfs) {
  const bool has_node0 = std::filesystem::exists("/sys/devices/system/node/node0/cpulist");
  auto node = parse_device("cpu:numa0");
  ASSERT_EQ(node.ok(), has_node0) << node.message();
  if (has_node0) {
    EXPECT_EQ(node.value().numa_node, 0);
    EXPECT_FALSE(node.value().cores.empty());
  }
  EXPECT_FALSE(parse_device("cpu:numa100000").ok());
}

// The core this test may run on (pinning to it changes nothing the test relies on).
int some_usable_core() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return 0;
}

TEST(Device, AClaimIsExclusiveNamesItsHolderAndEndsWithIt) {
  const std::string dir = std::filesystem::temp_directory_path() / ("dsinfer-device-test-" + std::to_string(getpid()));
  auto spec = parse_device("cpu:" + std::to_string(some_usable_core()));
  ASSERT_TRUE(spec.ok()) << spec.message();
  {
    auto first = DeviceClaim::claim(spec.value(), dir);
    ASSERT_TRUE(first.ok()) << first.message();
    EXPECT_EQ(usable_cpu_count(), 1);  // pinned
    // flock conflicts between open files, within one process too: a second claim is refused.
    auto second = DeviceClaim::claim(spec.value(), dir);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.message().find("held by dsinfer PID " + std::to_string(getpid())), std::string::npos) << second.message();
  }
  auto again = DeviceClaim::claim(spec.value(), dir);  // the first claim's end released it
  EXPECT_TRUE(again.ok()) << again.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ds

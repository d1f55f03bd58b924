#include "router/address_range.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(AddressRange, Ipv4AndIpv6Prefixes) {
  const AddressRange net = AddressRange::parse("10.1.0.0/16").value();
  EXPECT_TRUE(net.contains("10.1.2.3"));
  EXPECT_TRUE(net.contains("::ffff:10.1.200.1"));  // IPv4-mapped, as a dual-stack socket gives it
  EXPECT_FALSE(net.contains("10.2.0.1"));
  EXPECT_FALSE(net.contains("fd00::1"));
  EXPECT_FALSE(net.contains("not an address"));
  const AddressRange odd = AddressRange::parse("192.168.1.128/25").value();
  EXPECT_TRUE(odd.contains("192.168.1.200"));
  EXPECT_FALSE(odd.contains("192.168.1.127"));
  const AddressRange v6 = AddressRange::parse("fd00::/8").value();
  EXPECT_TRUE(v6.contains("fd12::1"));
  EXPECT_FALSE(v6.contains("fe80::1"));
  const AddressRange one = AddressRange::parse("127.0.0.1").value();
  EXPECT_TRUE(one.contains("127.0.0.1"));
  EXPECT_FALSE(one.contains("127.0.0.2"));
  EXPECT_TRUE(AddressRange::parse("0.0.0.0/0").value().contains("8.8.8.8"));
}

TEST(AddressRange, MalformedRangesAreRefused) {
  for (const char* bad : {"10.1.0.0/33", "10.1.0.0/", "10.1.0/16", "fd00::/129", "10.0.0.0/1a", "", "host/8"}) {
    EXPECT_FALSE(AddressRange::parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ds

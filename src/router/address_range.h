#pragma once
// A client address range in CIDR notation ("10.1.0.0/16", "fd00::/8", or one
// address), and whether an address is in it: how the canary dyes the traffic
// of a network.

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace ds {

class AddressRange {
 public:
  static Result<AddressRange> parse(const std::string& cidr);
  // `address` as the HTTP server gives the peer ("127.0.0.1", "::1", "::ffff:10.0.0.1");
  // an IPv4-mapped IPv6 address matches IPv4 ranges.
  bool contains(const std::string& address) const;

 private:
  bool v6_ = false;
  std::array<uint8_t, 16> bytes_{};
  int prefix_bits_ = 0;
};

}  // namespace ds

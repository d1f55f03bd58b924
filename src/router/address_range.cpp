#include "router/address_range.h"

#include <arpa/inet.h>

#include <cstring>
#include <optional>

namespace ds {
namespace {

struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
};

std::optional<Address> parse_address(const std::string& text) {
  Address a;
  if (inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) return a;
  if (inet_pton(AF_INET6, text.c_str(), a.bytes.data()) != 1) return std::nullopt;
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.bytes.data(), mapped, 12) == 0) {  // ::ffff:a.b.c.d is a.b.c.d
    std::memmove(a.bytes.data(), a.bytes.data() + 12, 4);
    std::memset(a.bytes.data() + 4, 0, 12);
    return a;
  }
  a.v6 = true;
  return a;
}

}  // namespace

Result<AddressRange> AddressRange::parse(const std::string& cidr) {
  const size_t slash = cidr.find('/');
  const auto address = parse_address(cidr.substr(0, slash));
  if (!address) return Status::error("'" + cidr + "' is not an address range (ADDRESS/BITS, e.g. 10.1.0.0/16)");
  AddressRange range;
  range.v6_ = address->v6;
  range.bytes_ = address->bytes;
  const int max_bits = range.v6_ ? 128 : 32;
  range.prefix_bits_ = max_bits;
  if (slash != std::string::npos) {
    const std::string bits = cidr.substr(slash + 1);
    if (bits.empty() || bits.size() > 3 || bits.find_first_not_of("0123456789") != std::string::npos || std::stoi(bits) > max_bits) {
      return Status::error("'" + cidr + "': the prefix length must be 0.." + std::to_string(max_bits));
    }
    range.prefix_bits_ = std::stoi(bits);
  }
  return range;
}

bool AddressRange::contains(const std::string& text) const {
  const auto address = parse_address(text);
  if (!address || address->v6 != v6_) return false;
  for (int bit = 0; bit < prefix_bits_; ++bit) {
    const uint8_t mask = uint8_t(0x80 >> (bit % 8));
    if ((address->bytes[size_t(bit / 8)] & mask) != (bytes_[size_t(bit / 8)] & mask)) return false;
  }
  return true;
}

}  // namespace ds

#pragma once
// How a register-tiled kernel walks a range of rows (tokens, queries, keys)
// in tiles of at most four, the tile size a compile-time constant: included by
// the ISA objects, so everything here has internal linkage.

#include <cstdint>
#include <type_traits>

namespace ds {
namespace {

// step(std::integral_constant<int, T>{}, first) for the tiles of T rows
// starting at first: fours, then one tile of the remaining one to three.
template <typename Step>
inline void for_tiles_of_four(int64_t n, Step step) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) step(std::integral_constant<int, 4>{}, i);
  switch (n - i) {
    case 3: step(std::integral_constant<int, 3>{}, i); break;
    case 2: step(std::integral_constant<int, 2>{}, i); break;
    case 1: step(std::integral_constant<int, 1>{}, i); break;
    default: break;
  }
}

}  // namespace
}  // namespace ds

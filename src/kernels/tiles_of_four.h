#pragma once
// How a register-tiled kernel walks a range of rows (tokens, queries, keys)
// in tiles of at most four (or another bound), the tile size a compile-time constant: included by
// the ISA objects, so everything here has internal linkage.

#include <cstdint>
#include <type_traits>

namespace ds {
namespace {

// step(std::integral_constant<int, T>{}, first) for the last tile, of
// `left` rows (0 < left <= T: a compile-time size for each).
template <int T, typename Step>
inline void remainder_tile(int64_t left, int64_t first, Step step) {
  if constexpr (T > 0) {
    if (left == T) step(std::integral_constant<int, T>{}, first);
    else remainder_tile<T - 1>(left, first, step);
  }
}

// step(std::integral_constant<int, T>{}, first) for the tiles of T rows
// starting at first: tiles of Max, then one of the remaining 1 to Max - 1.
template <int Max, typename Step>
inline void for_tiles_of(int64_t n, Step step) {
  int64_t i = 0;
  for (; i + Max <= n; i += Max) step(std::integral_constant<int, Max>{}, i);
  remainder_tile<Max - 1>(n - i, i, step);
}

template <typename Step>
inline void for_tiles_of_four(int64_t n, Step step) {
  for_tiles_of<4>(n, step);
}

}  // namespace
}  // namespace ds

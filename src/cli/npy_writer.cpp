#include "cli/npy_writer.h"

#include <cstdio>

namespace ds {

Status write_npy(const std::string& path, const float* data, int64_t n_rows, int64_t n_cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n_rows) + ", " +
                       std::to_string(n_cols) + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes and ended by a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::error("cannot write '" + path + "'");
  const uint16_t header_length = uint16_t(header.size());
  bool ok = std::fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8;
  ok = ok && std::fwrite(&header_length, 2, 1, f) == 1;
  ok = ok && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  ok = ok && std::fwrite(data, sizeof(float), size_t(n_rows * n_cols), f) == size_t(n_rows * n_cols);
  ok = std::fclose(f) == 0 && ok;
  return ok ? Status() : Status::error("short write to '" + path + "'");
}

}  // namespace ds

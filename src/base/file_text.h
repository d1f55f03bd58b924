#pragma once
// A whole file read into memory, for the small files commands and configs name.

#include <optional>
#include <string>

namespace ds {

// The file's bytes; nullopt when it cannot be opened (each caller says what it wanted).
std::optional<std::string> read_file_text(const std::string& path);

}  // namespace ds

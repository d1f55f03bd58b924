#pragma once
// multipart/form-data (RFC 7578), as clients upload files (POST /v1/files):
// the parts of a body already read whole, each with its field name, its
// filename when it is a file, and its bytes. Anything malformed is an error
// saying what; nothing is guessed.

#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

struct FormPart {
  std::string name;
  std::string filename;  // empty for a plain field
  bool is_file = false;  // a filename parameter was given (possibly empty)
  std::string content_type;
  std::string body;
};

// The parts of `body` sent with Content-Type `content_type`.
Result<std::vector<FormPart>> parse_multipart_form(const std::string& content_type, const std::string& body);

}  // namespace ds

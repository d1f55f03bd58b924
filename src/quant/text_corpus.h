#pragma once
// The texts a calibration or an evaluation runs through a model: a plain text
// file is one document; a file named *.jsonl holds one document per line, a
// JSON object whose "text" is the document (or a bare JSON string).

#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

Result<std::vector<std::string>> read_text_corpus(const std::string& path);

}  // namespace ds

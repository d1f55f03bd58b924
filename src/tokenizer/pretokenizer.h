#pragma once
// Splits text into words before byte-level BPE, with the regular expressions
// a `tokenizer.ggml.pre` name stands for. Each expression in turn splits every
// piece so far into matches and the gaps between them (as llama.cpp does).

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ds {

class Pretokenizer {
 public:
  // Errors name the unknown pre-tokenizer and list the known ones.
  static Result<std::unique_ptr<Pretokenizer>> create(const std::string& pre_name);
  ~Pretokenizer();

  // Thread-safe: any number of threads may split at once.
  std::vector<std::string> split(std::string_view text) const;
  // True for rule sets whose words are looked up whole before merging (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  Pretokenizer() = default;
  struct Compiled;
  std::vector<Compiled*> regexes_;
  bool ignore_merges_ = false;
};

}  // namespace ds

#include "quant/text_corpus.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ds {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<std::string> jsonl_document(const std::string& line, size_t line_number, const std::string& path) {
  const std::string where = path + " line " + std::to_string(line_number);
  const nlohmann::json value = nlohmann::json::parse(line, nullptr, false);
  if (value.is_discarded()) return Status::error(where + ": not JSON");
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object() || !value.contains("text") || !value["text"].is_string())
    return Status::error(where + ": expected a string or an object with a string \"text\"");
  return value["text"].get<std::string>();
}

}  // namespace

Result<std::vector<std::string>> read_text_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("cannot read " + path);
  std::vector<std::string> documents;
  if (!ends_with(path, ".jsonl")) {
    std::ostringstream text;
    text << in.rdbuf();
    documents.push_back(text.str());
  } else {
    std::string line;
    for (size_t number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto document = jsonl_document(line, number, path);
      if (!document.ok()) return document.status();
      documents.push_back(document.take());
    }
  }
  size_t bytes = 0;
  for (const std::string& d : documents) bytes += d.size();
  if (bytes == 0) return Status::error(path + " holds no text");
  return documents;
}

}  // namespace ds

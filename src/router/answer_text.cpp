#include "router/answer_text.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace ds {

using json = nlohmann::json;

void AnswerReader::append(size_t choice, const std::string& piece) {
  if (piece.empty()) return;
  const size_t room = k_max_text - std::min(k_max_text, stored_);
  if (piece.size() > room) truncated_ = true;
  const size_t n = std::min(room, piece.size());
  text_[choice] += piece.substr(0, n);
  stored_ += n;
}

void AnswerReader::read_object(const std::string& json_text, bool event, Clock::time_point now) {
  const json object = json::parse(json_text, nullptr, false);
  if (!object.is_object()) return;
  if (object.contains("error") && object["error"].is_object()) {
    error_ = object["error"].value("message", std::string("error"));
    return;
  }
  if (object.contains("usage") && object["usage"].is_object() && object["usage"].contains("completion_tokens") &&
      object["usage"]["completion_tokens"].is_number_integer()) {
    usage_tokens_ = object["usage"]["completion_tokens"].get<int64_t>();
  }
  if (!object.contains("choices") || !object["choices"].is_array()) return;
  bool had_text = false;
  for (const json& choice : object["choices"]) {
    if (!choice.is_object()) continue;
    const size_t index = choice.value("index", size_t(0));
    const json* part = nullptr;
    if (choice.contains(event ? "delta" : "message") && choice[event ? "delta" : "message"].is_object()) part = &choice[event ? "delta" : "message"];
    std::string piece;
    const auto take = [&piece](const json& from, const char* key) {
      if (from.contains(key) && from[key].is_string()) piece += from[key].get<std::string>();
    };
    take(choice, "text");
    if (part) {
      take(*part, "reasoning_content");
      take(*part, "content");
      if (part->contains("tool_calls") && (*part)["tool_calls"].is_array()) {
        for (const json& call : (*part)["tool_calls"]) {
          if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
          take(call["function"], "name");
          take(call["function"], "arguments");
        }
      }
    }
    if (!piece.empty()) had_text = true;
    append(index, piece);
  }
  if (had_text && event) {
    ++text_events_;
    if (!first_text_at_) first_text_at_ = now;
  }
}

void AnswerReader::add(const std::string& piece, Clock::time_point now) {
  if (!stream_) {
    if (pending_.size() < (64u << 20)) pending_ += piece;
    return;
  }
  pending_ += piece;
  // SSE: events end with a blank line; each "data: " line is one JSON object (or [DONE]).
  for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
    const std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    size_t start = 0;
    while (start < event.size()) {
      size_t line_end = event.find('\n', start);
      if (line_end == std::string::npos) line_end = event.size();
      const std::string line = event.substr(start, line_end - start);
      if (line.rfind("data:", 0) == 0) {
        const std::string data = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
        if (data != "[DONE]") read_object(data, true, now);
      }
      start = line_end + 1;
    }
  }
  if (pending_.size() > (1u << 20)) pending_.clear();  // no event is this long: not SSE
}

void AnswerReader::finish() {
  if (!stream_) read_object(pending_, false, Clock::now());
  pending_.clear();
}

std::string AnswerReader::text() const {
  std::string out;
  for (const auto& [index, text] : text_) {
    if (!out.empty()) out += '\n';
    out += text;
  }
  return out;
}

std::vector<std::string> word_tokens(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c >= 0x80) {
      word += ch;
      continue;
    }
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
    if (!std::isspace(c)) words.emplace_back(1, ch);
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

double token_overlap(const std::string& a, const std::string& b) {
  const std::vector<std::string> x = word_tokens(a), y = word_tokens(b);
  if (x.empty() && y.empty()) return 1.0;
  if (x.empty() || y.empty()) return 0.0;
  std::unordered_map<std::string, int64_t> count;
  for (const std::string& w : x) ++count[w];
  int64_t common = 0;
  for (const std::string& w : y) {
    auto it = count.find(w);
    if (it != count.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  return 2.0 * double(common) / double(x.size() + y.size());
}

}  // namespace ds

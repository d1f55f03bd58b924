#include "hub/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "base/file_text.h"
#include "hub/json_file.h"

namespace ds {
namespace {

using json = nlohmann::json;

constexpr int32_t k_normal = 1, k_control = 3, k_user_defined = 4, k_unused = 5;

// The tokenizer.json Split regexes of the families dsinfer's pre-tokenizer rules implement.
constexpr const char* k_llama3_split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_qwen2_split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::vector<std::string> k_deepseek_v3_splits = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// DeepSeek's own beginning of sentence: the R1 distillations of Qwen2 carry it (llama.cpp names their rules deepseek-r1-qwen).
constexpr const char* k_deepseek_bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";

// The pre-tokenizer's Split regexes and whether a ByteLevel step splits with GPT-2's own rules.
struct PreSteps {
  std::vector<std::string> splits;
  bool byte_level = false, byte_level_regex = false;
};

Status collect(const json& step, PreSteps& out) {
  const std::string type = step.value("type", "");
  if (type == "Sequence") {
    for (const json& s : step.value("pretokenizers", json::array())) DS_RETURN_IF_ERROR(collect(s, out));
    return Status();
  }
  if (type == "ByteLevel") {
    if (step.value("add_prefix_space", false)) return Status::error("a ByteLevel pre-tokenizer that adds a prefix space");
    out.byte_level = true;
    out.byte_level_regex = step.value("use_regex", true);
    return Status();
  }
  if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex") && step.value("behavior", "") == "Isolated" &&
      !step.value("invert", false)) {
    out.splits.push_back(step["pattern"]["Regex"]);
    return Status();
  }
  if (type == "Digits" && !step.value("individual_digits", false)) {
    out.splits.push_back(R"(\p{N}+)");
    return Status();
  }
  return Status::error("a " + (type.empty() ? std::string("typeless") : type) + " pre-tokenizer step " + step.dump().substr(0, 120));
}

Result<std::string> pre_name(const json& tokenizer, const std::map<std::string, int64_t>& vocab) {
  const json pre = tokenizer.value("pre_tokenizer", json());
  PreSteps steps;
  if (!pre.is_object()) return Status::error("tokenizer.json has no pre-tokenizer");
  const Status collected = collect(pre, steps);
  if (!collected.ok()) return Status::error("tokenizer.json: " + collected.message() + " is not a pre-tokenizer dsinfer converts");
  if (!steps.byte_level) return Status::error("tokenizer.json's pre-tokenizer has no ByteLevel step: not a byte-level BPE dsinfer converts");
  if (steps.splits.empty() && steps.byte_level_regex) return std::string("gpt-2");
  if (!steps.byte_level_regex) {
    if (steps.splits == std::vector<std::string>{k_llama3_split}) return std::string("llama-bpe");
    if (steps.splits == std::vector<std::string>{k_qwen2_split}) return std::string(vocab.count(k_deepseek_bos) ? "deepseek-r1-qwen" : "qwen2");
    if (steps.splits == k_deepseek_v3_splits) return std::string("deepseek-v3");
  }
  std::string listed;
  for (const std::string& s : steps.splits) listed += (listed.empty() ? "" : ", ") + s.substr(0, 60);
  return Status::error("tokenizer.json's pre-tokenizer (splits: " + listed +
                       ") is none of the families dsinfer converts (GPT-2, Llama 3, Qwen2, DeepSeek-V3)");
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> token_text(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) return entry["content"].get<std::string>();
  return std::nullopt;
}

bool looks_special(const std::string& t) {
  const auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.rfind(open, 0) == 0 && t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
}

}  // namespace

Result<GgufTokenizer> read_hf_tokenizer(const std::string& dir, const json& config, int64_t n_vocab) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir + "/tokenizer.json")) {
    return Status::error(dir + ": no tokenizer.json" + std::string(fs::exists(dir + "/tokenizer.model") ? " (a SentencePiece tokenizer.model is not converted)" : ""));
  }
  auto read = read_json_object(dir + "/tokenizer.json");
  if (!read.ok()) return read.status();
  const json& tokenizer = read.value();
  json tokenizer_config = json::object();
  if (fs::exists(dir + "/tokenizer_config.json")) {
    auto c = read_json_object(dir + "/tokenizer_config.json");
    if (!c.ok()) return c.status();
    tokenizer_config = c.take();
  }
  const json model = tokenizer.value("model", json());
  if (!model.is_object() || model.value("type", "") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object()) {
    return Status::error("tokenizer.json: the model is not a BPE vocabulary (type " + (model.is_object() ? model.value("type", "?") : std::string("?")) + ")");
  }
  if (tokenizer.contains("normalizer") && !tokenizer["normalizer"].is_null() && tokenizer["normalizer"].value("type", "") != "NFC") {
    return Status::error("tokenizer.json: the normalizer " + tokenizer["normalizer"].dump().substr(0, 120) + " is not converted");
  }

  GgufTokenizer out;
  std::map<std::string, int64_t> vocab;
  std::map<int64_t, std::string> by_id;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) return Status::error("tokenizer.json: the id of '" + token + "' is not a token id");
    vocab[token] = id;
    by_id[id] = token;
  }
  struct Added {
    std::string content;
    bool special;
  };
  std::map<int64_t, Added> added;
  for (const json& a : tokenizer.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string()) {
      return Status::error("tokenizer.json: an added token without an id and content");
    }
    const int64_t id = a["id"];
    added[id] = {a["content"], a.value("special", false)};
    by_id[id] = a["content"];
    vocab[a["content"]] = id;
  }
  const int64_t size = n_vocab > 0 ? n_vocab : int64_t(by_id.size());
  if (!by_id.empty() && by_id.rbegin()->first >= size) {
    return Status::error("tokenizer.json: token id " + std::to_string(by_id.rbegin()->first) + " is past the model's vocab_size " + std::to_string(size));
  }
  auto pre = pre_name(tokenizer, vocab);
  if (!pre.ok()) return pre.status();
  out.pre = pre.take();
  for (int64_t i = 0; i < size; ++i) {
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      out.tokens.push_back("[PAD" + std::to_string(i) + "]");
      out.types.push_back(k_unused);
      continue;
    }
    std::string token = it->second;
    const auto a = added.find(i);
    if (a == added.end()) {
      out.types.push_back(k_normal);
    } else if (a->second.special || looks_special(token)) {
      out.types.push_back(k_control);
    } else {
      replace_all(token, "\xe2\x96\x81", " ");  // user-defined tokens' spaces pre-normalised
      out.types.push_back(k_user_defined);
    }
    out.tokens.push_back(token);
  }
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      out.merges.push_back(m);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      // Pairs (transformers 4.45 on): spaces inside a part written as U+0120, as llama.cpp's vocabulary reads them.
      std::string left = m[0], right = m[1];
      replace_all(left, " ", "\xc4\xa0");
      replace_all(right, " ", "\xc4\xa0");
      out.merges.push_back(left + " " + right);
    } else {
      return Status::error("tokenizer.json: a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  // Whether BOS and EOS are added: the post-processor's template, then tokenizer_config.json.
  std::optional<std::string> bos = token_text(tokenizer_config.value("bos_token", json())),
                             eos = token_text(tokenizer_config.value("eos_token", json()));
  std::map<std::string, bool> add;
  const json post = tokenizer.value("post_processor", json());
  if (post.is_object()) {
    json processors = post.value("type", "") == "Sequence" ? post.value("processors", json::array()) : json::array({post});
    for (const json& p : processors) {
      const std::string type = p.value("type", "");
      if (type == "ByteLevel") {
        add.emplace("bos", false);
        add.emplace("eos", false);
      } else if (type == "TemplateProcessing") {
        const json single = p.value("single", json::array());
        if (single.size() > 1) {
          const auto special = [](const json& piece) { return piece.value("SpecialToken", json::object()).value("id", std::string()); };
          const std::string first = special(single.front()), last = special(single.back());
          if (!first.empty()) {
            if (!bos) bos = first;
            add["bos"] = first == *bos;
          }
          if (!last.empty()) {
            if (!eos) eos = last;
            add["eos"] = last == *eos;
          }
        }
      } else {
        return Status::error("tokenizer.json: a " + type + " post-processor is not converted");
      }
    }
  }
  static const char* const k_types[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::map<std::string, uint32_t> ids;
  const auto set_id = [&](const std::string& type, const json& id) {
    if (ids.count(type) || !id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= size) return;
    ids[type] = uint32_t(id.get<int64_t>());
  };
  for (const char* type : k_types) {
    const json flag = tokenizer_config.value(std::string("add_") + type + "_token", json());
    if (flag.is_boolean()) add.emplace(type, flag.get<bool>());
    std::optional<std::string> text = token_text(tokenizer_config.value(std::string(type) + "_token", json()));
    if (std::string(type) == "bos" && bos) text = bos;
    if (std::string(type) == "eos" && eos) text = eos;
    if (!text) continue;
    for (const auto& [id, a] : added) {
      if (a.content == *text) {
        set_id(type, id);
        break;
      }
    }
  }
  for (const char* type : k_types) set_id(type, config.value(std::string(type) + "_token_id", json()));
  for (const char* type : k_types) {
    if (ids.count(type)) out.special_ids.emplace_back(type, ids[type]);
  }
  for (const char* type : k_types) {
    if (add.count(type)) out.add_special.emplace_back(type, add[type]);
  }

  json chat_template = tokenizer_config.value("chat_template", json());
  if (chat_template.is_null() && fs::exists(dir + "/chat_template.jinja")) {
    const std::optional<std::string> text = read_file_text(dir + "/chat_template.jinja");
    if (text) chat_template = *text;
  }
  if (chat_template.is_string()) {
    out.chat_template = chat_template.get<std::string>();
  } else if (!chat_template.is_null()) {
    return Status::error("tokenizer_config.json: a chat_template that is not one string (named templates) is not converted");
  }
  return out;
}

}  // namespace ds

// dsinfer template: shows the prompt text a conversation becomes, as the
// model's chat template (or --chat-template NAME) renders it.

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer template: %s\n", message.c_str());
  return 1;
}

Result<std::vector<ChatMessage>> read_messages(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (!json.is_array()) return Status::error("--messages must hold a JSON array of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& m = json[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return Status::error("message " + std::to_string(i) + " needs string fields role and content");
    }
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

}  // namespace

int cmd_template(int argc, char** argv) {
  auto args = Args::parse(argc, argv, {"-m", "--model", "--chat-template", "--messages", "--bos"},
                          {"--no-generation-prompt"});
  if (!args.ok()) return fail(args.message());
  const Args& a = args.value();
  auto messages = read_messages(a.get("--messages"));
  if (!messages.ok()) return fail(messages.message());

  std::string bos = a.get("--bos");
  Result<ChatFormat> format = Status::error("give -m MODEL.gguf or --chat-template NAME");
  const std::string path = first_value(a, {"-m", "--model"});
  if (!path.empty()) {
    auto file = GgufFile::open(path);
    if (!file.ok()) return fail(file.message());
    auto vocab = Vocab::from_gguf(*file.value());
    if (!vocab.ok()) return fail(vocab.message());
    if (vocab.value().bos != k_no_token && !a.has("--bos")) bos = vocab.value().tokens[size_t(vocab.value().bos)];
    auto jinja = chat_template_of(*file.value());
    if (!jinja.ok()) return fail(jinja.message());
    if (!a.has("--chat-template")) {
      format = jinja.value() ? detect_chat_format(*jinja.value())
                             : Result<ChatFormat>(Status::error("the model has no tokenizer.chat_template; give --chat-template NAME"));
    }
  }
  if (a.has("--chat-template")) format = chat_format_from_name(a.get("--chat-template"));
  if (!format.ok()) return fail(format.message());
  auto text = render_chat(format.value(), messages.value(), !a.has("--no-generation-prompt"), bos);
  if (!text.ok()) return fail(text.message());
  std::fwrite(text.value().data(), 1, text.value().size(), stdout);
  return 0;
}

}  // namespace ds

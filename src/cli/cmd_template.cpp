// dsinfer template: shows the prompt text a conversation becomes, as the
// model's chat template (or --chat-template FILE|NAME) renders it.
//
//   --messages FILE   a JSON array of messages, or an object with messages,
//                     tools, add_generation_prompt and any template variables
//   --contexts FILE   a JSON array of such objects: prints a JSON array of
//                     {"prompt": text} or {"error": message}, one per object

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file_text.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/model_source.h"
#include "template/chat_template.h"
#include "tokenizer/vocab.h"

namespace ds {
namespace {

using jinja::Value;

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer template: %s\n", message.c_str());
  return 1;
}

Result<Value> read_json(const std::string& path) {
  const std::optional<std::string> text = read_file_text(path);
  if (!text) return Status::error("cannot read '" + path + "'");
  auto value = Value::parse_json(*text);
  if (!value.ok()) return Status::error(path + ": " + value.message());
  return value;
}

// An object's messages, tools and add_generation_prompt; every other key is a template variable.
Result<ChatInput> chat_input(const Value& v, bool add_generation_prompt, ChatSpecialTokens& tokens) {
  ChatInput input;
  input.add_generation_prompt = add_generation_prompt;
  input.kwargs = Value(jinja::make_dict());
  if (v.is_list()) {
    input.messages = v;
    return input;
  }
  if (!v.is_dict()) return Status::error("expected a JSON array of messages or an object holding messages");
  for (const auto& [key, value] : v.as_dict().items) {
    if (key == "messages") input.messages = value;
    else if (key == "tools") input.tools = value;
    else if (key == "add_generation_prompt") input.add_generation_prompt = value.truthy();
    else if (key == "bos_token") tokens.bos = value.str();
    else if (key == "eos_token") tokens.eos = value.str();
    else input.kwargs.as_dict().set(key, value);
  }
  if (!input.messages.is_list()) return Status::error("the object has no messages array");
  for (const Value& m : input.messages.as_list()) {
    if (!m.is_dict()) return Status::error("each message must be an object");
  }
  return input;
}

}  // namespace

int cmd_template(int argc, char** argv) {
  const OptionTable table = {
      {{"-m", "--model"}, "FILE", "", "the model (a GGUF file or hf://OWNER/NAME/FILE) whose chat template and special tokens are used"},
      {{"--chat-template"}, "FILE|NAME", "", "a Jinja file or a built-in template's name, in place of the model's"},
      {{"--messages"}, "FILE", "", "a JSON array of messages, or an object with messages, tools, add_generation_prompt and template variables"},
      {{"--contexts"}, "FILE", "", "a JSON array of such objects: prints a JSON array of {\"prompt\": text} or {\"error\": message}"},
      {{"--bos"}, "TEXT", "", "the beginning-of-sequence token's text (default: the model's)"},
      {{"--eos"}, "TEXT", "", "the end-of-sequence token's text (default: the model's)"},
      {{"--no-generation-prompt"}, "", "", "end after the last message, without the assistant's turn opened"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer template (-m MODEL.gguf | --chat-template FILE|NAME) (--messages FILE | --contexts FILE)",
                      "Shows the prompt text a conversation becomes under the chat template.", table);
  }
  const Args& a = args.value();
  if (a.has("--messages") == a.has("--contexts")) return fail("give one of --messages FILE and --contexts FILE");

  ChatSpecialTokens tokens{a.get("--bos"), a.get("--eos")};
  if (a.get("--model").empty() && !a.has("--chat-template")) return fail("give -m MODEL.gguf or --chat-template FILE|NAME");
  std::unique_ptr<GgufFile> file;
  if (!a.get("--model").empty()) {
    auto path = model_source_path(a.get("--model"));
    if (!path.ok()) return fail(path.message());
    auto opened = GgufFile::open(path.value());
    if (!opened.ok()) return fail(opened.message());
    file = opened.take();
    auto vocab = Vocab::from_gguf(*file);
    if (!vocab.ok()) return fail(vocab.message());
    const Vocab& v = vocab.value();
    if (v.bos != k_no_token && !a.has("--bos")) tokens.bos = v.tokens[size_t(v.bos)];
    if (v.eos != k_no_token && !a.has("--eos")) tokens.eos = v.tokens[size_t(v.eos)];
  }
  auto chat = ChatTemplate::choose(file.get(), a.get("--chat-template"));
  if (!chat.ok()) return fail(chat.message());
  if (!chat.value()) return fail("the model has no tokenizer.chat_template; give --chat-template FILE|NAME");
  const ChatTemplate& tmpl = *chat.value();
  const bool generation_prompt = !a.has("--no-generation-prompt");

  if (a.has("--messages")) {
    auto json = read_json(a.get("--messages"));
    if (!json.ok()) return fail(json.message());
    auto input = chat_input(json.value(), generation_prompt, tokens);
    if (!input.ok()) return fail(input.message());
    auto text = tmpl.render(input.value(), tokens);
    if (!text.ok()) return fail(text.message());
    std::fwrite(text.value().data(), 1, text.value().size(), stdout);
    return 0;
  }
  auto cases = read_json(a.get("--contexts"));
  if (!cases.ok()) return fail(cases.message());
  if (!cases.value().is_list()) return fail("--contexts must hold a JSON array");
  nlohmann::json results = nlohmann::json::array();
  for (const Value& c : cases.value().as_list()) {
    ChatSpecialTokens case_tokens = tokens;
    auto input = chat_input(c, generation_prompt, case_tokens);
    auto text = input.ok() ? tmpl.render(input.value(), case_tokens) : Result<std::string>(input.status());
    results.push_back(text.ok() ? nlohmann::json{{"prompt", text.value()}} : nlohmann::json{{"error", text.message()}});
  }
  const std::string out = results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace ds

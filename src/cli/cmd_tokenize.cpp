// dsinfer tokenize: text to token ids with a model's vocabulary (a vocab-only
// GGUF is enough). With --jsonl FILE, each line of FILE is a JSON string and
// each output line a JSON object {"ids": [...], "decoded": "..."}.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/model_source.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "dsinfer tokenize: %s\n", message.c_str());
  return 1;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  const OptionTable table = {
      {{"-m", "--model"}, "FILE", "", "the model, a GGUF file or hf://OWNER/NAME/FILE (its vocabulary alone is enough)"},
      {{"--jsonl"}, "FILE", "", "tokenize each line of FILE, a JSON string; print {\"ids\": [...], \"decoded\": \"...\"} for each"},
      {{"--no-bos"}, "", "", "do not add the beginning-of-sequence token"},
      {{"--pieces"}, "", "", "print each token's text beside its id"},
      {{"--no-parse-special"}, "", "", "special tokens' text in TEXT is plain text, not the tokens"},
  };
  auto args = Args::parse(argc, argv, table);
  if (!args.ok()) return fail(args.message());
  if (args.value().wants_help()) {
    return print_help("dsinfer tokenize -m MODEL.gguf [options] TEXT", "Text to token ids with the model's vocabulary.", table);
  }
  const Args& a = args.value();
  if (a.get("--model").empty()) return fail("missing -m MODEL.gguf");
  auto path = model_source_path(a.get("--model"));
  if (!path.ok()) return fail(path.message());
  auto file = GgufFile::open(path.value());
  if (!file.ok()) return fail(file.message());
  auto tokenizer = Tokenizer::from_gguf(*file.value());
  if (!tokenizer.ok()) return fail(tokenizer.message());
  const Tokenizer& tok = *tokenizer.value();
  const bool add_special = !a.has("--no-bos");
  const bool parse_special = !a.has("--no-parse-special");

  if (a.has("--jsonl")) {
    std::ifstream in(a.get("--jsonl"));
    if (!in) return fail("cannot read '" + a.get("--jsonl") + "'");
    std::string line;
    for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
      const nlohmann::json text = nlohmann::json::parse(line, nullptr, false);
      if (!text.is_string()) return fail("line " + std::to_string(line_number) + " of --jsonl is not a JSON string");
      const std::vector<int32_t> ids = tok.encode(text.get<std::string>(), add_special, parse_special);
      nlohmann::json out = {{"ids", ids}, {"decoded", tok.decode(ids, parse_special)}};
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    return 0;
  }
  if (a.positional().empty()) return fail("missing TEXT");
  std::string text;
  for (const std::string& word : a.positional()) text += (text.empty() ? "" : " ") + word;
  for (int32_t id : tok.encode(text, add_special, parse_special)) {
    if (a.has("--pieces")) {
      std::printf("%d\t'%s'\n", id, tok.token_to_piece(id, true).c_str());
    } else {
      std::printf("%d\n", id);
    }
  }
  return 0;
}

}  // namespace ds

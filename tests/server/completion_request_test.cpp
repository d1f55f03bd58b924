#include "server/completion_request.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

ApiError error_of(Endpoint endpoint, const std::string& body) {
  auto parsed = parse_completion_request(endpoint, body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed)) << body;
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

TEST(CompletionRequest, ChatFieldsAndOpenAiDefaults) {
  auto parsed = parse_completion_request(Endpoint::chat, R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
      "max_completion_tokens": 7, "stop": "END", "seed": 5, "logprobs": true, "top_logprobs": 3,
      "stream": true, "stream_options": {"include_usage": true}, "frequency_penalty": null, "tools": null})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << std::get<ApiError>(parsed).message;
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  const jinja::List& messages = r.chat.input.messages.as_list();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_TRUE(r.sampling.logit_bias.empty());
  EXPECT_EQ(messages[1].as_dict().find("content")->as_string(), "hi there");
  EXPECT_EQ(r.chat.tool_choice.mode, ToolChoice::Mode::none);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.seed, 5u);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.frequency_penalty, 0.0f);
}

TEST(CompletionRequest, PromptForms) {
  for (const char* body : {R"({"prompt": [1, 2, 3]})", R"({"prompt": [[1, 2, 3]]})"}) {
    auto parsed = parse_completion_request(Endpoint::completion, body);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << body;
    EXPECT_EQ(std::get<CompletionRequest>(parsed).prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  }
  auto text = parse_completion_request(Endpoint::completion, R"({"prompt": ["once"], "logprobs": 2})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(text));
  EXPECT_EQ(std::get<CompletionRequest>(text).prompt_text, "once");
  EXPECT_EQ(std::get<CompletionRequest>(text).logprobs, 2);
}

TEST(CompletionRequest, EveryRejectionNamesItsField) {
  EXPECT_EQ(error_of(Endpoint::chat, "{not json").message, "the request body is not valid JSON");
  EXPECT_EQ(error_of(Endpoint::chat, "[1]").status, 400);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": {}, "text": ""}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 2.5})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 18446744073709551615})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 17})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": 1}})", "stream_options"},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": -3})", "presence_penalty"},
      // Nothing is ignored: a misspelled field, one dsinfer does not implement, or one of another endpoint.
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokns": 5})", "max_tokns"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function", "function": {"name": "g"}}})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})", "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "strict": true}}]})",
       "tools"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
           "function": {"name": "f", "arguments": "not json"}}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "r", "schema": {"type": "integer", "multipleOf": 2}}}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"a\"", "response_format": {"type": "text"}})", "grammar"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": -101}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"five": 1}})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": [1]})", "logit_bias"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})", "prompt"},
      {R"({"messages": [{"role": "user", "content": "x", "audio": "bob"}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache": 1}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true, "x": 1}})", "stream_options"},
  };
  for (const auto& [body, field] : cases) {
    const ApiError e = error_of(Endpoint::chat, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, field) << body;
    EXPECT_NE(e.message.find(field), std::string::npos) << e.message;
  }
  for (const char* body : {R"({})", R"({"prompt": 5})", R"({"prompt": []})", R"({"prompt": ["a", "b"]})", R"({"prompt": [-1]})",
                           R"({"prompt": "x", "logprobs": 21})", R"({"prompt": "x", "echo": "yes"})", R"({"prompt": "x", "max_tokens": 0})", R"({"prompt": "x", "suffix": "y"})",
                           R"({"prompt": "x", "best_of": 2})", R"({"prompt": "x", "top_logprobs": 2})"}) {
    const ApiError e = error_of(Endpoint::completion, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_FALSE(e.param.empty()) << body;
  }
}

}  // namespace
}  // namespace ds

// Choosing a chat template, the built-in formats' refusals, and the
// reasoning-prefill rule. Jinja rendering itself is compared with Python
// jinja2 over every fixture template in tests/reference/test_jinja_templates.py.

#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace ds {
namespace {

using jinja::make_dict;
using jinja::Value;

Value conversation(std::vector<std::pair<std::string, std::string>> turns) {
  jinja::List messages;
  for (auto& [role, content] : turns) messages.emplace_back(make_dict({{"role", Value(role)}, {"content", Value(content)}}));
  return Value(std::move(messages));
}

TEST(ChatTemplate, BuiltinNamesAndTheirAliases) {
  EXPECT_EQ(ChatTemplate::builtin("deepseek3").value().origin(), "built-in deepseek3");
  EXPECT_TRUE(ChatTemplate::builtin("qwen2").ok());
  auto bad = ChatTemplate::builtin("vicuna");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("deepseek-r1"), std::string::npos);
}

TEST(ChatTemplate, BuiltinsRefuseWhatTheyCannotRender) {
  const ChatTemplate chatml = ChatTemplate::builtin("chatml").take();
  ChatInput input;
  input.messages = conversation({{"wizard", "hi"}});
  auto text = chatml.render(input, {});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("wizard"), std::string::npos);

  input.messages = conversation({{"user", "hi"}});
  input.tools = Value(jinja::List{});
  text = chatml.render(input, {});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("tools"), std::string::npos);

  input.tools = Value();
  input.kwargs = Value(make_dict({{"enable_thinking", Value(false)}}));
  text = chatml.render(input, {});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("enable_thinking"), std::string::npos);
}

TEST(ChatTemplate, DeepSeekDropsReasoningFromEarlierTurns) {
  ChatInput input;
  input.messages = conversation({{"user", "a"}, {"assistant", "<think>x</think>b"}, {"user", "c"}});
  auto text = ChatTemplate::builtin("deepseek-r1").take().render(input, {"<B>", ""});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "<B><｜User｜>a<｜Assistant｜>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, JinjaSeesTheRequestAndItsKwargs) {
  auto t = ChatTemplate::from_jinja(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if tools %}{{ tools | length }} tools{% endif %}{% if add_generation_prompt %}>{% endif %}"
      "{{ '!' if enable_thinking is defined and not enable_thinking }}",
      "test");
  ASSERT_TRUE(t.ok()) << t.message();
  ChatInput input;
  input.messages = conversation({{"user", "hi"}});
  input.tools = Value(jinja::List{Value(make_dict())});
  input.kwargs = Value(make_dict({{"enable_thinking", Value(false)}}));
  auto text = t.value().render(input, {"<s>", "</s>"});
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(text.value(), "<s>[user:hi]1 tools>!");
}

TEST(ChatTemplate, TemplateErrorsNameTheOriginAndLine) {
  auto t = ChatTemplate::from_jinja("line one\n{% if x %}\n{{ raise_exception('no system role') }}\n{% endif %}", "tokenizer.chat_template");
  ASSERT_TRUE(t.ok());
  ChatInput input;
  input.messages = conversation({});
  input.kwargs = Value(make_dict({{"x", Value(true)}}));
  auto text = t.value().render(input, {});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("tokenizer.chat_template"), std::string::npos) << text.message();
  EXPECT_NE(text.message().find("line 3"), std::string::npos) << text.message();
  EXPECT_NE(text.message().find("no system role"), std::string::npos) << text.message();

  auto broken = ChatTemplate::from_jinja("ok\n{% for m in messages %}\n{{ m | nosuchfilter }}\n{% endfor %}", "file t.jinja");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.message().find("line 3"), std::string::npos) << broken.message();
  EXPECT_NE(broken.message().find("nosuchfilter"), std::string::npos) << broken.message();
}

TEST(ChatTemplate, ReasoningOpensOnlyWhenThePromptEndsInThink) {
  EXPECT_TRUE(opens_reasoning("<｜Assistant｜><think>\n"));
  EXPECT_TRUE(opens_reasoning("<think>"));
  EXPECT_FALSE(opens_reasoning("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(ChatTemplate::builtin("deepseek-r1").value().has_reasoning());
  EXPECT_FALSE(ChatTemplate::builtin("chatml").value().has_reasoning());
}

}  // namespace
}  // namespace ds

// Recognising formats and error messages. The rendered text is compared with
// the models' own Jinja templates in tests/reference/test_chat_template.py.

#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace ds {
namespace {

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(DSINFER_FIXTURES) + "/chat-templates/" + name + ".jinja");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ChatTemplate, RecognisesTheFixtureTemplates) {
  EXPECT_EQ(detect_chat_format(read_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")).value(), ChatFormat::deepseek_r1);
  EXPECT_EQ(detect_chat_format(read_template("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")).value(), ChatFormat::deepseek_r1);
  EXPECT_EQ(detect_chat_format(read_template("deepseek-ai-DeepSeek-V3.1")).value(), ChatFormat::deepseek_r1);
  EXPECT_EQ(detect_chat_format(read_template("Qwen-Qwen2.5-7B-Instruct")).value(), ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format(read_template("meta-llama-Llama-3.1-8B-Instruct")).value(), ChatFormat::llama3);
}

TEST(ChatTemplate, UnknownTemplatesSayHowToChoose) {
  auto unknown = detect_chat_format("{{ messages }}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("--chat-template"), std::string::npos);
  auto bad_name = chat_format_from_name("vicuna");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.message().find("deepseek-r1"), std::string::npos);
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  auto text = render_chat(ChatFormat::chatml, {{"wizard", "hi"}}, true, "");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("wizard"), std::string::npos);
}

TEST(ChatTemplate, DeepSeekDropsReasoningFromEarlierTurns) {
  auto text = render_chat(ChatFormat::deepseek_r1,
                          {{"user", "a"}, {"assistant", "<think>x</think>b"}, {"user", "c"}}, true, "<B>");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "<B><｜User｜>a<｜Assistant｜>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜><think>\n");
}

}  // namespace
}  // namespace ds

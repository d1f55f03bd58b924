// Request::append, the one place where a sampled token is judged: an end or
// stop token ends the reply and is not text; a stop string ends it with the
// text cut before it (text that could begin one is held back); max_tokens
// ends it and lets the held-back text out.

#include "engine/request.h"

#include <gtest/gtest.h>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

struct StoriesTokenizer {
  std::unique_ptr<GgufFile> file = GgufFile::open(std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf").take();
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(*file).take();
};

// Appends the tokens of `text` one at a time; returns the text let out and the last verdict.
Request::Appended append_text(Request& request, const Tokenizer& tokenizer, const std::string& text, std::string& shown) {
  Request::Appended last;
  for (int32_t token : tokenizer.encode(text, false, false)) {
    last = request.append(token, tokenizer.vocab().end_of_generation);
    shown += last.text;
    if (last.finish != FinishReason::none) break;
  }
  return last;
}

TEST(Request, AnEndTokenEndsTheReplyAndIsNotText) {
  StoriesTokenizer t;
  GenerationParams params;
  params.max_tokens = 50;
  Request request(1, {1}, params, params.max_tokens, t.tokenizer.get());
  std::string shown;
  EXPECT_EQ(append_text(request, *t.tokenizer, "Once upon", shown).finish, FinishReason::none);
  const Request::Appended end = request.append(t.tokenizer->vocab().eos, t.tokenizer->vocab().end_of_generation);
  EXPECT_EQ(end.finish, FinishReason::stop);
  EXPECT_FALSE(end.in_reply);
  EXPECT_EQ(shown + end.text, " Once upon");  // SentencePiece: each word its leading space
  // Unless the request keeps going past it (ignore_eos).
  params.stop_at_end_of_generation = false;
  Request going_on(2, {1}, params, params.max_tokens, t.tokenizer.get());
  EXPECT_EQ(going_on.append(t.tokenizer->vocab().eos, t.tokenizer->vocab().end_of_generation).finish, FinishReason::none);
}

TEST(Request, AStopTokenEndsTheReplyAsAnEndTokenDoes) {
  StoriesTokenizer t;
  GenerationParams params;
  params.max_tokens = 50;
  params.stop_tokens = {t.tokenizer->encode(" upon", false, false).back()};
  Request request(1, {1}, params, params.max_tokens, t.tokenizer.get());
  std::string shown;
  const Request::Appended last = append_text(request, *t.tokenizer, "Once upon a time", shown);
  EXPECT_EQ(last.finish, FinishReason::stop);
  EXPECT_FALSE(last.in_reply);
  EXPECT_EQ(shown, " Once");
}

TEST(Request, AStopStringCutsTheTextBeforeIt) {
  StoriesTokenizer t;
  GenerationParams params;
  params.max_tokens = 50;
  params.stop = {" a t"};  // ends inside the token " time"
  Request request(1, {1}, params, params.max_tokens, t.tokenizer.get());
  std::string shown;
  const Request::Appended last = append_text(request, *t.tokenizer, "Once upon a time there", shown);
  EXPECT_EQ(last.finish, FinishReason::stop);
  EXPECT_TRUE(last.in_reply);  // its token's text led up to the stop
  EXPECT_EQ(shown, " Once upon");
}

TEST(Request, MaxTokensEndsTheReplyAndLetsHeldTextOut) {
  StoriesTokenizer t;
  GenerationParams params;
  params.stop = {" upon a castle"};
  const std::vector<int32_t> tokens = t.tokenizer->encode("Once upon a", false, false);
  Request request(1, {1}, params, int32_t(tokens.size()), t.tokenizer.get());
  std::string shown;
  const Request::Appended last = append_text(request, *t.tokenizer, "Once upon a", shown);
  EXPECT_EQ(last.finish, FinishReason::length);
  EXPECT_EQ(shown, " Once upon a");
  EXPECT_EQ(request.n_generated(), int32_t(tokens.size()));
  // With room left, " upon a" (the start of the stop string) is held back.
  Request longer(2, {1}, params, 50, t.tokenizer.get());
  std::string so_far;
  EXPECT_EQ(append_text(longer, *t.tokenizer, "Once upon a", so_far).finish, FinishReason::none);
  EXPECT_EQ(so_far, " Once");
}

TEST(Request, WithoutATokenizerThereIsNoText) {
  GenerationParams params;
  Request request(1, {1, 2}, params, 2, nullptr);
  const Request::Appended first = request.append(7, {});
  EXPECT_EQ(first.finish, FinishReason::none);
  EXPECT_TRUE(first.text.empty());
  EXPECT_EQ(request.append(8, {}).finish, FinishReason::length);
  EXPECT_EQ(request.seq.tokens, (std::vector<int32_t>{1, 2, 7, 8}));
}

}  // namespace
}  // namespace ds

// The threaded engine: many clients at once get the same text as single
// runs, stop strings cut the text before the stop, cancellation ends a stream
// within a step, a request that can never fit fails at once, and admit()
// answers from the admission rule and the pages the engine holds.

#include "engine/engine.h"

#include <gtest/gtest.h>

#include <thread>

namespace ds {
namespace {

const std::string k_stories = std::string(DSINFER_FIXTURES) + "/models/stories260K.gguf";
constexpr auto k_wait = std::chrono::seconds(30);

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<KvCache> memory;
  Fixture(int32_t n_pages = 512) {
    model = Model::load(k_stories, ModelOptions{2, LoadMode::mmap}).take();
    tokenizer = Tokenizer::from_gguf(model->file()).take();
    memory = KvCache::create(model->backend(), model->config(), KvCacheOptions{DType::f16, 16, n_pages}).take();
  }
};

struct Reply {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  std::string error;
  std::optional<RequestMetrics> metrics;
};

Reply collect(RequestStream& stream) {
  Reply reply;
  const auto deadline = std::chrono::steady_clock::now() + k_wait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto event = stream.next(std::chrono::milliseconds(100));
    if (!event) continue;
    reply.text += event->text;
    reply.tokens.insert(reply.tokens.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish != FinishReason::none) {
      reply.finish = event->finish;
      reply.error = event->error;
      reply.metrics = event->metrics;
      return reply;
    }
  }
  ADD_FAILURE() << "stream did not finish";
  return reply;
}

EngineRequest greedy(const Tokenizer& tok, const std::string& prompt, int32_t max_tokens) {
  EngineRequest r;
  r.prompt = tok.encode(prompt, true, false);
  r.params.sampling.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  return r;
}

TEST(Engine, ConcurrentClientsGetTheTextOfSingleRuns) {
  Fixture f;
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily wanted to", "One day, a bird",
                                            "Tom and Sue went", "The sun was", "She saw a big", "He was very"};
  std::vector<Reply> alone;
  {
    Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
    for (const std::string& p : prompts) alone.push_back(collect(*engine.submit(greedy(*f.tokenizer, p, 40))));
  }
  Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
  std::vector<Reply> together(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { together[i] = collect(*engine.submit(greedy(*f.tokenizer, prompts[i], 40))); });
  }
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << prompts[i];
    EXPECT_EQ(together[i].text, alone[i].text) << prompts[i];
    EXPECT_TRUE(together[i].finish == FinishReason::length || together[i].finish == FinishReason::stop);
    std::string pieces;  // the stream's text is its tokens' pieces, nothing lost or repeated
    for (int32_t t : together[i].tokens) pieces += f.tokenizer->token_to_piece(t, false);
    EXPECT_EQ(together[i].text, pieces);
    // Usage and latency figures come with the last event.
    ASSERT_TRUE(together[i].metrics.has_value());
    const RequestMetrics& m = *together[i].metrics;
    EXPECT_EQ(m.n_prompt_tokens, int32_t(f.tokenizer->encode(prompts[i], true, false).size()));
    EXPECT_EQ(m.n_output_tokens, int32_t(together[i].tokens.size()) + (together[i].finish == FinishReason::stop));
    EXPECT_GT(m.ttft_seconds, 0.0);
    EXPECT_GE(m.ttft_seconds, m.queue_seconds);
    EXPECT_GE(m.e2e_seconds, m.ttft_seconds);
    EXPECT_GT(m.tpot_seconds, 0.0);
  }
}

TEST(Engine, StopStringsEndTheTextBeforeTheStop) {
  Fixture f;
  Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
  const Reply full = collect(*engine.submit(greedy(*f.tokenizer, "Once upon a time", 60)));
  ASSERT_NE(full.text.find(" Lily"), std::string::npos) << full.text;
  EngineRequest request = greedy(*f.tokenizer, "Once upon a time", 60);
  request.params.stop = {" Lily", "never-appears"};
  const Reply stopped = collect(*engine.submit(std::move(request)));
  EXPECT_EQ(stopped.finish, FinishReason::stop);
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(" Lily")));
  ASSERT_TRUE(stopped.metrics.has_value());
  EXPECT_LT(stopped.metrics->n_output_tokens, 60);
}

TEST(Engine, CancelEndsAStreamAndFreesItsPages) {
  Fixture f;
  Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
  EngineRequest request = greedy(*f.tokenizer, "Once upon a time", 1000);
  request.params.stop_at_end_of_generation = false;
  auto stream = engine.submit(std::move(request));
  ASSERT_TRUE(stream->next(k_wait).has_value());  // it is running
  engine.cancel(stream->id());
  const Reply rest = collect(*stream);
  EXPECT_EQ(rest.finish, FinishReason::cancelled);
  EXPECT_LT(rest.tokens.size(), 999u);
  // The statistics show the pages back within a second.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (engine.stats().pages_held != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine.stats().pages_held, 0);
  // All pages came back: a request needing the whole pool runs.
  EngineRequest big = greedy(*f.tokenizer, "Once", 512 * 16 - 8);
  big.params.stop_at_end_of_generation = false;
  big.params.max_tokens = 8;
  EXPECT_EQ(collect(*engine.submit(std::move(big))).finish, FinishReason::length);
}

TEST(Engine, LogprobsComeWithEachTokenWhenAsked) {
  Fixture f;
  Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
  EngineRequest request = greedy(*f.tokenizer, "Once upon a time", 12);
  request.params.logprobs = 3;
  auto stream = engine.submit(std::move(request));
  size_t n_tokens = 0, n_logprobs = 0;
  for (auto event = stream->next(k_wait); event; event = stream->next(k_wait)) {
    n_tokens += event->tokens.size();
    n_logprobs += event->logprobs.size();
    for (size_t i = 0; i < event->logprobs.size(); ++i) {
      const TokenLogprobs& lp = event->logprobs[i];
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.top[0].first, event->tokens[i]);  // greedy: the chosen token is the most likely
      EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
      EXPECT_LE(lp.logprob, 0.0f);
    }
    if (event->finish != FinishReason::none) break;
  }
  EXPECT_GT(n_tokens, 0u);
  EXPECT_EQ(n_logprobs, n_tokens);
}

TEST(Engine, ARequestThatCanNeverFitFailsAtOnce) {
  Fixture f(4);  // 64 token slots
  Engine engine(*f.model, *f.memory, EngineCoreConfig{}, *f.tokenizer);
  const Reply reply = collect(*engine.submit(greedy(*f.tokenizer, "Once upon a time", 100)));
  EXPECT_EQ(reply.finish, FinishReason::error);
  EXPECT_NE(reply.error.find("KV pages"), std::string::npos) << reply.error;
}

TEST(Engine, AdmitAnswersFromTheRuleAndThePagesHeld) {
  Fixture f(8);  // 128 token slots
  EngineCoreConfig config;
  config.scheduler.max_context = 128;
  config.scheduler.kv_reserve = 0.125;  // one page
  Engine engine(*f.model, *f.memory, config, *f.tokenizer);
  EXPECT_EQ(engine.max_context(), 128);
  GenerationParams params;
  params.max_tokens = 8;
  const std::vector<int32_t> short_prompt(10, 100), long_prompt(120, 100);
  EXPECT_TRUE(engine.admit(short_prompt, params).fits());
  const Admit too_long = engine.admit(long_prompt, params);  // 8 pages and the reserve
  EXPECT_EQ(too_long.verdict, Admit::Verdict::never_fits);
  EXPECT_NE(too_long.reason.find("never fit"), std::string::npos) << too_long.reason;
  EXPECT_EQ(engine.admit_at_least(200, params).limit, Admit::Limit::context);

  // A request holding 5 or 6 pages (80 prompt tokens and 8 more), each step
  // made to take 200 ms so it holds them for 1.6 s at least: a 40-token
  // prompt (3 pages and the reserve) must wait, a 10-token one fits.
  engine.set_debug_step_delay(std::chrono::milliseconds(200));
  EngineRequest holder{std::vector<int32_t>(80, 100), params};
  holder.params.stop_at_end_of_generation = false;
  auto stream = engine.submit(std::move(holder));
  const auto deadline = std::chrono::steady_clock::now() + k_wait;  // a guard against a hang
  while (engine.stats().pages_held < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(engine.stats().pages_held, 5);
  const Admit later = engine.admit(std::vector<int32_t>(40, 100), params);
  EXPECT_EQ(later.verdict, Admit::Verdict::not_now) << later.reason;
  EXPECT_TRUE(engine.admit(short_prompt, params).fits());
  engine.cancel(stream->id());
  EXPECT_EQ(collect(*stream).finish, FinishReason::cancelled);
}

}  // namespace
}  // namespace ds

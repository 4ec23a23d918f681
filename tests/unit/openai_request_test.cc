// RequestParser (runtime/serve/openai_request.h): request bodies of `llmrt serve` mapped to
// engine requests, and the 400 / 404 errors for what is wrong, without an engine or a server.
// Uses a small in-memory tokenizer and a ChatML-like template (tiny_chat_tokenizer.h).
#include "runtime/serve/openai_request.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/unit/tiny_chat_tokenizer.h"

namespace llmrt {
namespace {

constexpr int kMaxModelLen = 64;

class OpenAIRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::tiny_chat_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    parser_ = make_parser(*tokenizer_, RequestParserOptions{});
    ASSERT_NE(parser_, nullptr);
  }

  std::unique_ptr<RequestParser> make_parser(const Tokenizer& t, RequestParserOptions o) {
    o.model_name = "tiny-model";
    o.max_model_len = kMaxModelLen;
    o.vocab_size = t.vocab_size();
    auto p = RequestParser::create(t, std::move(o));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  ParsedRequest ok(const std::string& body, Endpoint ep = Endpoint::kCompletions) {
    ParsedRequest r;
    auto e = parser_->parse(body, ep, &r);
    EXPECT_FALSE(e.has_value()) << body << " → " << (e ? e->message : "");
    return r;
  }

  ApiError error(const std::string& body, Endpoint ep = Endpoint::kCompletions) {
    ParsedRequest r;
    auto e = parser_->parse(body, ep, &r);
    EXPECT_TRUE(e.has_value()) << body << " was accepted";
    return e.value_or(ApiError{0, "", ""});
  }

  std::vector<int32_t> encode(const std::string& text, bool add_special) {
    auto ids = tokenizer_->encode(text, add_special);
    EXPECT_TRUE(ids.ok());
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<RequestParser> parser_;
};

TEST_F(OpenAIRequestTest, CompletionMapsEveryField) {
  ParsedRequest r = ok(R"({"model": "tiny-model", "prompt": "hello world", "max_tokens": 8,
      "temperature": 0.25, "top_p": 0.5, "top_k": 7, "min_p": 0.125, "presence_penalty": 1.5,
      "frequency_penalty": -1, "repetition_penalty": 1.25, "seed": 42, "n": 3,
      "stop": ["x", "", "yz"], "stop_token_ids": [3, 4], "logprobs": 2, "ignore_eos": true,
      "priority": -5, "logit_bias": {"10": -100, "11": 2.5}, "stream": true,
      "stream_options": {"include_usage": true}, "include_stop_str_in_output": true})");
  EXPECT_FALSE(r.chat);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], encode("hello world", /*add_special=*/true));
  EXPECT_EQ(r.prompts[0].front(), tokenizer_->bos_id());  // add_bos
  EXPECT_EQ(r.echo_texts, std::vector<std::string>{"hello world"});
  EXPECT_EQ(r.base.max_tokens, 8);
  EXPECT_FLOAT_EQ(r.base.sampling.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.base.sampling.top_p, 0.5f);
  EXPECT_EQ(r.base.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(r.base.sampling.min_p, 0.125f);
  EXPECT_FLOAT_EQ(r.base.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(r.base.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r.base.sampling.repetition_penalty, 1.25f);
  EXPECT_TRUE(r.base.has_seed);
  EXPECT_EQ(r.base.sampling.seed, 42u);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.base.n, 3);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));  // the empty one dropped
  EXPECT_EQ(r.base.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(r.legacy_logprobs, 2);
  EXPECT_EQ(r.base.logprobs, 2);
  EXPECT_EQ(r.base.prompt_logprobs, -1);  // no echo
  EXPECT_TRUE(r.base.ignore_eos);
  EXPECT_EQ(r.base.priority, -5);
  ASSERT_EQ(r.base.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.base.sampling.logit_bias[0].first, 10);
  EXPECT_FLOAT_EQ(r.base.sampling.logit_bias[0].second, -100.0f);
  EXPECT_EQ(r.base.sampling.logit_bias[1].first, 11);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.include_stop);
  EXPECT_TRUE(r.base.prompt.empty());
}

TEST_F(OpenAIRequestTest, CompletionDefaults) {
  ParsedRequest r = ok(R"({"prompt": "hello", "model": null, "seed": null})");
  EXPECT_FALSE(r.base.has_seed);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.base.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(r.base.logprobs, -1);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  // Near the end of the context the default shrinks to what is left.
  std::string long_text(kMaxModelLen - 6, 'q');  // one token per byte (+ BOS)
  r = ok(R"({"prompt": ")" + long_text + R"("})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.base.max_tokens, kMaxModelLen - static_cast<int>(r.prompts[0].size()));
}

TEST_F(OpenAIRequestTest, TokenPromptsAndEchoScoring) {
  ParsedRequest r = ok(R"({"prompt": [[104, 105], [106]], "max_tokens": 0, "echo": true, "logprobs": 1})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{104, 105}));
  EXPECT_EQ(r.prompts[1], (std::vector<int32_t>{106}));
  EXPECT_EQ(r.echo_texts[0], tokenizer_->decode(r.prompts[0]));
  EXPECT_TRUE(r.echo_only);
  EXPECT_EQ(r.base.max_tokens, 1);
  EXPECT_EQ(r.base.prompt_logprobs, 1);
  r = ok(R"({"prompt": [104, 105.0]})");
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{104, 105}}));
}

TEST_F(OpenAIRequestTest, ChatRendersTheTemplate) {
  ParsedRequest r = ok(R"({"messages": [{"role": "user", "content": "hello"}], "logprobs": true,
      "top_logprobs": 2, "max_completion_tokens": 5, "seed": -1})", Endpoint::kChat);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.echo_texts.size(), 1u);
  EXPECT_EQ(r.echo_texts[0], "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], encode(r.echo_texts[0], /*add_special=*/false));
  EXPECT_NE(r.prompts[0].front(), tokenizer_->bos_id());  // the template decides about BOS
  EXPECT_TRUE(r.chat_logprobs);
  EXPECT_EQ(r.base.logprobs, 2);
  EXPECT_EQ(r.base.max_tokens, 5);
  EXPECT_TRUE(r.base.has_seed);
  EXPECT_EQ(r.base.sampling.seed, ~uint64_t{0});
  // Without max_tokens and without a generation_config default: until the context is full.
  r = ok(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}], "add_generation_prompt": false,
      "chat_template_kwargs": {"greeting": "hey"}})", Endpoint::kChat);
  EXPECT_EQ(r.echo_texts[0], "hey\n<|im_start|>user\na\nb<|im_end|>\n");
  EXPECT_EQ(r.base.max_tokens, -1);
  EXPECT_EQ(r.base.logprobs, -1);
}

TEST_F(OpenAIRequestTest, GenerationDefaultsApplyWhenLeftOut) {
  RequestParserOptions o;
  o.sampling_defaults.temperature = 0.6f;
  o.sampling_defaults.top_p = 0.9f;
  o.sampling_defaults.top_k = 20;
  o.default_max_new_tokens = 10;
  auto p = make_parser(*tokenizer_, o);
  ASSERT_NE(p, nullptr);
  ParsedRequest r;
  ASSERT_FALSE(p->parse(R"({"messages": [{"role": "user", "content": "hi"}], "top_k": 3})", Endpoint::kChat, &r));
  EXPECT_FLOAT_EQ(r.base.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(r.base.sampling.top_p, 0.9f);
  EXPECT_EQ(r.base.sampling.top_k, 3);  // the request's own value wins
  EXPECT_EQ(r.base.max_tokens, 10);
}

struct BadField {
  Endpoint endpoint;
  const char* body;
  const char* param;  // "" → none
};

TEST_F(OpenAIRequestTest, EachBadFieldIs400NamingIt) {
  const Endpoint C = Endpoint::kCompletions, H = Endpoint::kChat;
  const BadField cases[] = {
      {C, R"({"prompt": "hi", "max_tokens": "8"})", "max_tokens"},
      {C, R"({"prompt": "hi", "max_tokens": -1})", "max_tokens"},
      {C, R"({"prompt": "hi", "max_tokens": 0})", "max_tokens"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {C, R"({"prompt": "hi", "max_tokens": 62})", "max_tokens"},  // [BOS, h, i] + 62 > 64
      {C, R"({"prompt": "hi", "temperature": -0.5})", "temperature"},
      {C, R"({"prompt": "hi", "temperature": "hot"})", "temperature"},
      {C, R"({"prompt": "hi", "top_p": 0})", "top_p"},
      {C, R"({"prompt": "hi", "top_p": 1e-50})", "top_p"},  // 0 as a float (fuzz finding)
      {C, R"({"prompt": "hi", "repetition_penalty": 1e-60})", "repetition_penalty"},
      {C, R"({"prompt": "hi", "top_k": -2})", "top_k"},
      {C, R"({"prompt": "hi", "min_p": 1.5})", "min_p"},
      {C, R"({"prompt": "hi", "presence_penalty": 3})", "presence_penalty"},
      {C, R"({"prompt": "hi", "frequency_penalty": -2.5})", "frequency_penalty"},
      {C, R"({"prompt": "hi", "repetition_penalty": 0})", "repetition_penalty"},
      {C, R"({"prompt": "hi", "seed": 1.5})", "seed"},
      {C, R"({"prompt": "hi", "n": 0})", "n"},
      {C, R"({"prompt": "hi", "n": 17})", "n"},
      {C, R"({"prompt": "hi", "stop": 5})", "stop"},
      {C, R"({"prompt": "hi", "stop": ["a", 1]})", "stop"},
      {C, R"({"prompt": "hi", "stop_token_ids": [100000]})", "stop_token_ids"},
      {C, R"({"prompt": "hi", "logit_bias": {"x": 1}})", "logit_bias"},
      {C, R"({"prompt": "hi", "logit_bias": {"1": 101}})", "logit_bias"},
      {C, R"({"prompt": "hi", "logprobs": 21})", "logprobs"},
      {C, R"({"prompt": "hi", "echo": "yes"})", "echo"},
      {C, R"({"prompt": "hi", "stream": 1})", "stream"},
      {C, R"({"prompt": "hi", "stream_options": {"include_usage": "y"}})", "stream_options"},
      {C, R"({"prompt": "hi", "user": 3})", "user"},
      {C, R"({"prompt": 5})", "prompt"},
      {C, R"({"prompt": []})", "prompt"},
      {C, R"({"prompt": [[]]})", "prompt"},
      {C, R"({"prompt": [-1]})", "prompt"},
      {C, R"({"max_tokens": 4})", "prompt"},
      {C, R"({"model": 7, "prompt": "hi"})", "model"},
      {H, R"({"messages": []})", "messages"},
      {H, R"({"messages": "hi"})", "messages"},
      {H, R"({"messages": ["hi"]})", "messages"},
      {H, R"({"messages": [{"content": "hi"}]})", "messages"},
      {H, R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": {}})", "tools"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": []})", "chat_template_kwargs"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": 1})", "add_generation_prompt"},
  };
  for (const BadField& c : cases) {
    const std::string body = c.body;
    ApiError e = error(body, c.endpoint);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, c.param) << body;
    EXPECT_FALSE(e.message.empty()) << body;
    if (*c.param) {
      EXPECT_NE(e.message.find(c.param), std::string::npos) << body << " → " << e.message;
    }
  }
}

TEST_F(OpenAIRequestTest, MalformedBodiesAre400) {
  for (std::string body : {std::string("{"), std::string("[1, 2]"), std::string("\"x\""), std::string(""),
                           std::string(200, '[') + std::string(200, ']'),
                           std::string("{\"prompt\": \"a\xff\"}")}) {
    ApiError e = error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_FALSE(e.message.empty());
  }
  // Over-long prompt: the context check names the prompt.
  ApiError e = error(R"({"prompt": ")" + std::string(kMaxModelLen, 'q') + R"("})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("maximum context length"), std::string::npos);
}

TEST_F(OpenAIRequestTest, UnknownModelIs404) {
  ApiError e = error(R"({"model": "gpt-4", "prompt": "hi"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
  e = error(R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChat);
  EXPECT_EQ(e.status, 404);
  ok(R"({"model": "tiny-model", "prompt": "hi"})");
}

TEST_F(OpenAIRequestTest, ChatWithoutTemplateIs400) {
  auto t = testing::tiny_chat_tokenizer(/*chat_template=*/"");
  ASSERT_NE(t, nullptr);
  auto p = make_parser(*t, RequestParserOptions{});
  ASSERT_NE(p, nullptr);
  ParsedRequest r;
  auto e = p->parse(R"({"messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChat, &r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "messages");
  EXPECT_NE(e->message.find("no chat template"), std::string::npos);
  EXPECT_FALSE(p->parse(R"({"prompt": "hi"})", Endpoint::kCompletions, &r).has_value());
}

TEST_F(OpenAIRequestTest, BrokenTemplateFailsCreate) {
  auto t = testing::tiny_chat_tokenizer("{% for m in messages %}");
  ASSERT_NE(t, nullptr);
  RequestParserOptions o;
  o.max_model_len = kMaxModelLen;
  o.vocab_size = t->vocab_size();
  EXPECT_FALSE(RequestParser::create(*t, o).ok());
}

}  // namespace
}  // namespace llmrt

// libFuzzer target: an HTTP request body of `llmrt serve` → RequestParser::parse, as the server
// runs it (runtime/serve/openai_request.h). The first byte picks the endpoint (odd: chat, even:
// completions); the rest is the body. Uses a small in-memory byte-level BPE tokenizer with ChatML
// control tokens and a ChatML-like template (tests/unit/tiny_chat_tokenizer.h), max_model_len 64.
//
// Any bytes must give either an ApiError (status 400 or 404, non-empty message) or a request the
// engine would accept: non-empty prompts of in-vocabulary ids shorter than max_model_len,
// max_tokens within the context, sampling parameters validate_sampling_params accepts, ranges
// of n / logprobs the engine checks. Anything else traps. Seeds: corpus/openai_request/ (names
// say what each is; 'p' + body is a completion, 'c' + body a chat request). For longer runs:
//   openai_request_fuzz -dict=tests/fuzz/openai_request.dict -max_total_time=600 <scratch> <seeds>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "runtime/sampler/sampler.h"
#include "runtime/serve/openai_request.h"
#include "tests/unit/tiny_chat_tokenizer.h"

namespace {

constexpr int kMaxModelLen = 64;

struct Fixture {
  std::unique_ptr<llmrt::Tokenizer> tokenizer;
  std::unique_ptr<llmrt::RequestParser> parser;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.tokenizer = llmrt::testing::tiny_chat_tokenizer();
    if (!f.tokenizer) {
      std::fprintf(stderr, "openai_request_fuzz: the test tokenizer does not build\n");
      std::abort();
    }
    llmrt::RequestParserOptions o;
    o.model_name = "tiny-model";
    o.max_model_len = kMaxModelLen;
    o.vocab_size = f.tokenizer->vocab_size();
    o.default_max_new_tokens = 0;
    auto p = llmrt::RequestParser::create(*f.tokenizer, o);
    if (!p.ok()) {
      std::fprintf(stderr, "openai_request_fuzz: %s\n", p.status().to_string().c_str());
      std::abort();
    }
    f.parser = std::move(p).value();
    return f;
  }();
  return f;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "openai_request_fuzz: %s\n", what);
  std::abort();
}

void check_accepted(const llmrt::ParsedRequest& r, bool chat, int32_t vocab) {
  if (r.chat != chat) fail("chat flag does not match the endpoint");
  if (r.prompts.empty()) fail("accepted without a prompt");
  if (chat && r.prompts.size() != 1) fail("chat request with more than one prompt");
  if (r.echo_texts.size() != r.prompts.size()) fail("echo_texts and prompts differ in number");
  for (const auto& p : r.prompts) {
    if (p.empty()) fail("empty prompt accepted");
    if (static_cast<int64_t>(p.size()) >= kMaxModelLen) fail("prompt of max_model_len tokens or more accepted");
    for (int32_t id : p)
      if (id < 0 || id >= vocab) fail("prompt token outside the vocabulary");
    const int32_t m = r.base.max_tokens;
    if (m == 0 || m < -1) fail("max_tokens resolved to 0 or below -1");
    if (!r.echo_only && m > 0 && static_cast<int64_t>(p.size()) + m > kMaxModelLen)
      fail("prompt + max_tokens exceeds max_model_len");
  }
  if (!chat && !r.echo_only && r.base.max_tokens < 1) fail("completion without a token budget");
  if (r.n < 1 || r.n > 16 || r.base.n != r.n) fail("n out of range");
  if (r.base.logprobs < -1 || r.base.logprobs > 20) fail("logprobs out of range");
  if (r.base.prompt_logprobs < -1 || r.base.prompt_logprobs > 20) fail("prompt_logprobs out of range");
  for (int32_t id : r.base.stop_token_ids)
    if (id < 0 || id >= vocab) fail("stop token id outside the vocabulary");
  for (const auto& s : r.stop)
    if (s.empty()) fail("empty stop string kept");
  if (!r.base.prompt.empty()) fail("base request carries a prompt");
  llmrt::Status s = llmrt::validate_sampling_params(r.base.sampling, vocab);
  if (!s.ok()) {
    std::fprintf(stderr, "openai_request_fuzz: sampling params the engine rejects: %s\n", s.to_string().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Fixture& f = fixture();
  const bool chat = (data[0] & 1) != 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  llmrt::ParsedRequest r;
  auto e = f.parser->parse(body, chat ? llmrt::Endpoint::kChat : llmrt::Endpoint::kCompletions, &r);
  if (e) {
    if (e->status != 400 && e->status != 404 && e->status != 413) fail("error status other than 400/404/413");
    if (e->message.empty()) fail("error without a message");
    if (e->status == 404 && e->param != "model") fail("404 not about the model");
    return 0;
  }
  check_accepted(r, chat, f.tokenizer->vocab_size());
  return 0;
}

// Parsing of the OpenAI-compatible request bodies of `llmrt serve` (POST /v1/completions and
// POST /v1/chat/completions), apart from the engine and the HTTP server so that it can be tested
// and fuzzed on its own (tests/unit/openai_request_test.cc, tests/fuzz/openai_request_fuzz.cc).
//
// A body is untrusted bytes: RequestParser::parse() checks it once (JSON nesting, types, ranges,
// token ids against the vocabulary, prompt lengths against max_model_len) and either fills a
// ParsedRequest or returns an ApiError: 400 for anything malformed, 404 for an unknown model.
// (413, body too large, is decided before parsing by the HTTP server.)
//
// Thread safety: parse() is const and may run on many threads at once (the Tokenizer and the
// ChatTemplate are safe to share).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serve/engine.h"

namespace llmrt {

class ChatTemplate;
class Tokenizer;

/// An error as the API reports it: {"error": {"message", "type", "param", "code": status}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // "" → null
};

enum class Endpoint { kCompletions, kChat };

/// What a completion or chat request asks for, checked.
struct ParsedRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  bool echo = false;             // completions
  bool echo_only = false;        // completions with echo and max_tokens 0: prompt scoring only
  int n = 1;
  int legacy_logprobs = -1;      // completions: logprobs k
  bool chat_logprobs = false;    // chat: logprobs true (top_logprobs in base.logprobs)
  std::vector<std::string> stop; // stop strings (empty ones dropped)
  bool include_stop = false;     // include_stop_str_in_output
  std::vector<std::vector<int32_t>> prompts;  // one engine request per prompt (chat: one)
  std::vector<std::string> echo_texts;        // per prompt: its text (chat: the rendered one)
  EngineRequest base;            // everything but the prompt; max_tokens resolved (>= 1, or -1)
};

struct RequestParserOptions {
  std::string model_name;           // the only "model" accepted (absent or null: this one)
  int max_model_len = 0;            // prompt + max_tokens must fit
  int vocab_size = 0;               // token ids (prompts, logit_bias, stop_token_ids) below this
  SamplingParams sampling_defaults; // what a request leaves out (generation_config.json)
  int default_max_new_tokens = 0;   // chat without max_tokens (0: until the context is full)
};

class RequestParser {
 public:
  /// `tokenizer` must outlive the parser. Chat requests render with the tokenizer's chat
  /// template (bos_token / eos_token passed to it); fails when that template cannot be parsed.
  /// Without a template, chat requests get a 400 saying so.
  static StatusOr<std::unique_ptr<RequestParser>> create(const Tokenizer& tokenizer,
                                                         RequestParserOptions options);
  ~RequestParser();

  /// Parses one request body. On success fills `*out` (reset first) and returns nullopt;
  /// otherwise returns the error, whose status is 400 or 404 and whose message is not empty.
  std::optional<ApiError> parse(std::string_view body, Endpoint endpoint, ParsedRequest* out) const;

  const RequestParserOptions& options() const { return options_; }

 private:
  RequestParser(const Tokenizer& tokenizer, RequestParserOptions options);

  const Tokenizer* tokenizer_;
  RequestParserOptions options_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::string chat_template_error_;       // why chat is unavailable, when chat_template_ is null
  nlohmann::ordered_json template_extra_; // bos_token / eos_token
};

}  // namespace llmrt

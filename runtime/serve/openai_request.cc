// Request-body parsing of the OpenAI-compatible server (see openai_request.h).
#include "runtime/serve/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "runtime/chat/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxN = 16;
constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxPrompts = 256;
constexpr int kMaxJsonDepth = 128;

// nlohmann's parser recurses once per nesting level: refuse absurd nesting before parsing so a
// hostile body cannot exhaust the stack.
bool nesting_within(std::string_view body, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    else if (ch == '[' || ch == '{') {
      if (++depth > limit) return false;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<ApiError> parse_body(std::string_view body, json* out) {
  if (!nesting_within(body, kMaxJsonDepth))
    return ApiError{400, "request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels", ""};
  *out = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return ApiError{400, "request body is not valid JSON", ""};
  if (!out->is_object()) return ApiError{400, "request body must be a JSON object", ""};
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Typed access to request fields: the first wrong type or range becomes a 400 naming the field.

class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  /// The field, or nullptr when absent or null (null means "default" as in OpenAI's API).
  const json* find(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const char* name) const { return find(name) != nullptr; }
  void fail(const std::string& param, const std::string& message) {
    if (!error) error = ApiError{400, message, param};
  }

  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    auto out = as_integer(*v);
    if (!out) {
      fail(name, std::string("'") + name + "' must be an integer");
      return std::nullopt;
    }
    if (*out < lo || *out > hi) {
      fail(name, std::string("'") + name + "' must be " + range_text(lo, hi) + ", got " + std::to_string(*out));
      return std::nullopt;
    }
    return out;
  }

  std::optional<double> number(const char* name, double lo, double hi, bool lo_open = false) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) {
      fail(name, std::string("'") + name + "' must be a number");
      return std::nullopt;
    }
    double d = v->get<double>();
    // Each number ends up a float: one that rounds to an open bound (top_p 1e-50 → 0) is out too.
    if (!std::isfinite(d) || d < lo || d > hi ||
        (lo_open && (d == lo || static_cast<float>(d) == static_cast<float>(lo)))) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "'%s' must be in %s%g, %g], got %g", name, lo_open ? "(" : "[", lo, hi, d);
      fail(name, buf);
      return std::nullopt;
    }
    return d;
  }

  std::optional<bool> boolean(const char* name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) {
      fail(name, std::string("'") + name + "' must be a boolean");
      return std::nullopt;
    }
    return v->get<bool>();
  }

  std::optional<std::string> string(const char* name) {
    const json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) {
      fail(name, std::string("'") + name + "' must be a string");
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  static std::optional<int64_t> as_integer(const json& v) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::numeric_limits<int64_t>::max();
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // 16.0 is accepted as 16, as pydantic does
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    return std::nullopt;
  }

  std::optional<ApiError> error;

 private:
  static std::string range_text(int64_t lo, int64_t hi) {
    if (hi == std::numeric_limits<int64_t>::max()) return ">= " + std::to_string(lo);
    return "between " + std::to_string(lo) + " and " + std::to_string(hi);
  }
  const json& body_;
};

std::optional<ApiError> check_model(const json& body, const std::string& model_name) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;  // vLLM: the served model
  if (!it->is_string()) return ApiError{400, "'model' must be a string", "model"};
  if (it->get<std::string>() != model_name)
    return ApiError{404, "The model `" + it->get<std::string>() + "` does not exist.", "model"};
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(Fields& f, bool chat, const RequestParserOptions& opt,
                                       ParsedRequest* job) {
  // Parameters the request leaves out come from generation_config.json, as in vLLM.
  SamplingParams sp;
  sp.temperature = opt.sampling_defaults.temperature;
  sp.top_p = opt.sampling_defaults.top_p;
  sp.top_k = opt.sampling_defaults.top_k;
  sp.min_p = opt.sampling_defaults.min_p;
  sp.repetition_penalty = opt.sampling_defaults.repetition_penalty;
  const int vocab_size = opt.vocab_size;
  constexpr double kBig = 1e9;
  if (auto v = f.number("temperature", 0.0, kBig)) sp.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0.0, 1.0, /*lo_open=*/true)) sp.top_p = static_cast<float>(*v);
  if (auto v = f.integer("top_k", -1, std::numeric_limits<int32_t>::max())) sp.top_k = *v <= 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = f.number("min_p", 0.0, 1.0)) sp.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2.0, 2.0)) sp.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2.0, 2.0)) sp.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 0.0, kBig, /*lo_open=*/true)) sp.repetition_penalty = static_cast<float>(*v);
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    sp.seed = static_cast<uint64_t>(*v);
    job->base.has_seed = true;
  }
  if (const json* bias = f.find("logit_bias")) {
    if (!bias->is_object()) {
      f.fail("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    } else {
      for (auto it = bias->begin(); it != bias->end(); ++it) {
        char* end = nullptr;
        errno = 0;
        long long id = std::strtoll(it.key().c_str(), &end, 10);
        if (it.key().empty() || *end != '\0' || errno != 0 || id < 0 || id >= vocab_size) {
          f.fail("logit_bias", "'logit_bias' key '" + it.key() + "' is not a token id below " + std::to_string(vocab_size));
          break;
        }
        if (!it->is_number() || !std::isfinite(it->get<double>()) || std::fabs(it->get<double>()) > 100.0) {
          f.fail("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
          break;
        }
        sp.logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
      }
    }
  }
  job->base.sampling = sp;

  // Lengths. max_completion_tokens is the newer name (chat); either is accepted.
  std::optional<int64_t> max_tokens = f.integer("max_tokens", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (auto v = f.integer("max_completion_tokens", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    max_tokens = v;
  const char* max_name = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (max_tokens && *max_tokens < 0) f.fail(max_name, std::string("'") + max_name + "' must be at least 1, got " + std::to_string(*max_tokens));
  if (auto v = f.integer("n", 1, kMaxN)) job->n = static_cast<int>(*v);
  job->base.n = job->n;
  if (auto v = f.boolean("ignore_eos")) job->base.ignore_eos = *v;
  if (auto v = f.integer("priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()))
    job->base.priority = static_cast<int32_t>(*v);
  (void)f.string("user");
  if (auto v = f.boolean("stream")) job->stream = *v;
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) {
      f.fail("stream_options", "'stream_options' must be an object");
    } else if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) f.fail("stream_options", "'stream_options.include_usage' must be a boolean");
      else job->include_usage = it->get<bool>();
    }
  }
  if (auto v = f.boolean("include_stop_str_in_output")) job->include_stop = *v;
  if (const json* stop = f.find("stop")) {
    if (stop->is_string()) {
      job->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) {
          f.fail("stop", "'stop' must be a string or an array of strings");
          break;
        }
        job->stop.push_back(s.get<std::string>());
      }
    } else {
      f.fail("stop", "'stop' must be a string or an array of strings");
    }
    job->stop.erase(std::remove(job->stop.begin(), job->stop.end(), std::string()), job->stop.end());
  }
  if (const json* ids = f.find("stop_token_ids")) {
    if (!ids->is_array()) {
      f.fail("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    } else {
      for (const json& v : *ids) {
        auto id = Fields::as_integer(v);
        if (!id || *id < 0 || *id >= vocab_size) {
          f.fail("stop_token_ids", "'stop_token_ids' must hold token ids below " + std::to_string(vocab_size));
          break;
        }
        job->base.stop_token_ids.push_back(static_cast<int32_t>(*id));
      }
    }
  }
  if (chat) {
    if (auto v = f.boolean("logprobs")) job->chat_logprobs = *v;
    auto top = f.integer("top_logprobs", 0, kMaxLogprobs);
    if (top && *top > 0 && !job->chat_logprobs)
      f.fail("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    if (job->chat_logprobs) job->base.logprobs = top ? static_cast<int32_t>(*top) : 0;
  } else {
    if (auto v = f.boolean("echo")) job->echo = *v;
    if (auto v = f.integer("logprobs", 0, kMaxLogprobs)) job->legacy_logprobs = static_cast<int>(*v);
    job->base.logprobs = job->legacy_logprobs;
    if (job->echo && job->legacy_logprobs >= 0) job->base.prompt_logprobs = job->legacy_logprobs;
  }
  if (f.error) return f.error;

  if (max_tokens && *max_tokens == 0) {
    if (chat || !job->echo) return ApiError{400, std::string("'") + max_name + "' must be at least 1, got 0", max_name};
    job->echo_only = true;  // lm-eval style scoring: echo the prompt (with logprobs), generate nothing
  }
  // Per prompt lengths are checked once the prompts are known (RequestParser::parse).
  job->base.max_tokens = max_tokens ? static_cast<int32_t>(std::min<int64_t>(*max_tokens, INT32_MAX)) : -1;
  return std::nullopt;
}

std::optional<ApiError> parse_prompts(Fields& f, const Tokenizer& tokenizer, int vocab_size, ParsedRequest* job) {
  const json* prompt = f.find("prompt");
  if (!prompt) return ApiError{400, "'prompt' is required", "prompt"};
  auto bad = [] {
    return ApiError{400, "'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays", "prompt"};
  };
  auto token_list = [&](const json& arr, std::vector<int32_t>* out) -> std::optional<ApiError> {
    for (const json& v : arr) {
      auto id = Fields::as_integer(v);
      if (!id) return bad();
      if (*id < 0 || *id >= vocab_size)
        return ApiError{400, "'prompt' holds token id " + std::to_string(*id) + ", outside the vocabulary (size " + std::to_string(vocab_size) + ")", "prompt"};
      out->push_back(static_cast<int32_t>(*id));
    }
    if (out->empty()) return ApiError{400, "'prompt' must not be empty", "prompt"};
    return std::nullopt;
  };
  auto add_text = [&](const std::string& text) -> std::optional<ApiError> {
    auto ids = tokenizer.encode(text, /*add_special=*/true);
    if (!ids.ok()) return ApiError{400, "'prompt': " + ids.status().message(), "prompt"};
    if (ids->empty()) return ApiError{400, "'prompt' must not be empty", "prompt"};
    job->prompts.push_back(std::move(ids.value()));
    job->echo_texts.push_back(text);
    return std::nullopt;
  };
  if (prompt->is_string()) return add_text(prompt->get<std::string>());
  if (!prompt->is_array() || prompt->empty()) return bad();
  const json& first = prompt->front();
  if ((first.is_string() || first.is_array()) && prompt->size() > kMaxPrompts)
    return ApiError{400, "'prompt' holds more than " + std::to_string(kMaxPrompts) + " prompts", "prompt"};
  if (first.is_string()) {
    for (const json& p : *prompt) {
      if (!p.is_string()) return bad();
      if (auto e = add_text(p.get<std::string>())) return e;
    }
  } else if (first.is_array()) {
    for (const json& p : *prompt) {
      if (!p.is_array()) return bad();
      std::vector<int32_t> ids;
      if (auto e = token_list(p, &ids)) return e;
      job->echo_texts.push_back(tokenizer.decode(ids));
      job->prompts.push_back(std::move(ids));
    }
  } else if (first.is_number()) {
    std::vector<int32_t> ids;
    if (auto e = token_list(*prompt, &ids)) return e;
    job->echo_texts.push_back(tokenizer.decode(ids));
    job->prompts.push_back(std::move(ids));
  } else {
    return bad();
  }
  return std::nullopt;
}

std::optional<ApiError> render_chat(Fields& f, const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                                    const std::string& chat_template_error, const json& template_extra,
                                    ParsedRequest* job) {
  const json* messages = f.find("messages");
  if (!messages) return ApiError{400, "'messages' is required", "messages"};
  if (!messages->is_array() || messages->empty())
    return ApiError{400, "'messages' must be a non-empty array of messages", "messages"};
  if (!chat_template) return ApiError{400, chat_template_error, "messages"};
  json msgs = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    std::string where = "'messages[" + std::to_string(i) + "]'";
    if (!m.is_object()) return ApiError{400, where + " must be an object", "messages"};
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return ApiError{400, where + " needs a string 'role'", "messages"};
    json out = m;
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      // Content parts: the text parts are joined by newlines, as vLLM does for text-only models.
      std::string text;
      bool first = true;
      for (const json& part : *content) {
        if (!part.is_object()) return ApiError{400, where + " content parts must be objects", "messages"};
        auto type = part.find("type");
        auto t = part.find("text");
        if (type == part.end() || !type->is_string() || type->get<std::string>() != "text" ||
            t == part.end() || !t->is_string())
          return ApiError{400, where + ": only text content parts are supported by this model", "messages"};
        if (!first) text += "\n";
        text += t->get<std::string>();
        first = false;
      }
      out["content"] = text;
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      return ApiError{400, where + " 'content' must be a string, an array of content parts or null", "messages"};
    }
    msgs.push_back(std::move(out));
  }
  json extra = template_extra;
  if (const json* tools = f.find("tools")) {
    if (!tools->is_array()) return ApiError{400, "'tools' must be an array", "tools"};
    extra["tools"] = *tools;
  }
  if (const json* kw = f.find("chat_template_kwargs")) {
    if (!kw->is_object()) return ApiError{400, "'chat_template_kwargs' must be an object", "chat_template_kwargs"};
    for (auto it = kw->begin(); it != kw->end(); ++it) extra[it.key()] = it.value();
  }
  bool add_generation_prompt = true;
  if (auto v = f.boolean("add_generation_prompt")) add_generation_prompt = *v;
  if (f.error) return f.error;
  auto rendered = chat_template->render(msgs, add_generation_prompt, extra);
  if (!rendered.ok()) return ApiError{400, "chat template: " + rendered.status().message(), "messages"};
  // The template writes BOS itself (apply_chat_template, then encode without special tokens).
  auto ids = tokenizer.encode(*rendered, /*add_special=*/false);
  if (!ids.ok()) return ApiError{400, "messages: " + ids.status().message(), "messages"};
  if (ids->empty()) return ApiError{400, "the rendered conversation is empty", "messages"};
  job->prompts.push_back(std::move(ids.value()));
  job->echo_texts.push_back(*rendered);
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

RequestParser::RequestParser(const Tokenizer& tokenizer, RequestParserOptions options)
    : tokenizer_(&tokenizer), options_(std::move(options)) {}

RequestParser::~RequestParser() = default;

StatusOr<std::unique_ptr<RequestParser>> RequestParser::create(const Tokenizer& tokenizer,
                                                               RequestParserOptions options) {
  std::unique_ptr<RequestParser> p(new RequestParser(tokenizer, std::move(options)));
  if (tokenizer.chat_template().empty()) {
    p->chat_template_error_ = "this model has no chat template: use /v1/completions";
  } else {
    auto t = ChatTemplate::parse(tokenizer.chat_template());
    if (!t.ok()) return t.status().with_context("chat template");
    p->chat_template_ = std::move(t.value());
  }
  p->template_extra_ = json{{"bos_token", std::string(tokenizer.token_text(tokenizer.bos_id()))},
                            {"eos_token", std::string(tokenizer.token_text(tokenizer.eos_id()))}};
  return p;
}

std::optional<ApiError> RequestParser::parse(std::string_view text, Endpoint endpoint, ParsedRequest* job) const {
  *job = ParsedRequest();
  const bool chat = endpoint == Endpoint::kChat;
  json body;
  if (auto e = parse_body(text, &body)) return e;
  if (auto e = check_model(body, options_.model_name)) return e;
  job->chat = chat;
  Fields f(body);
  if (auto e = parse_sampling(f, chat, options_, job)) return e;
  if (auto e = chat ? render_chat(f, *tokenizer_, chat_template_.get(), chat_template_error_, template_extra_, job)
                    : parse_prompts(f, *tokenizer_, options_.vocab_size, job))
    return e;
  const int max_model_len = options_.max_model_len;
  const char* what = chat ? "messages" : "prompt";
  const bool explicit_max = job->base.max_tokens >= 0;
  const char* max_name = f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  int32_t max_tokens = job->base.max_tokens;
  for (const auto& p : job->prompts) {
    const int64_t len = static_cast<int64_t>(p.size());
    if (len >= max_model_len)
      return ApiError{400, "This model's maximum context length is " + std::to_string(max_model_len) +
                               " tokens. However, your request has " + std::to_string(len) +
                               " input tokens. Please reduce the length of the input.", what};
    if (explicit_max && !job->echo_only && len + job->base.max_tokens > max_model_len)
      return ApiError{400, "'" + std::string(max_name) + "' is too large: " + std::to_string(job->base.max_tokens) +
                               ". This model's maximum context length is " + std::to_string(max_model_len) +
                               " tokens and your request has " + std::to_string(len) + " input tokens (" +
                               std::to_string(job->base.max_tokens) + " > " + std::to_string(max_model_len) +
                               " - " + std::to_string(len) + ").", max_name};
  }
  if (job->echo_only) {
    max_tokens = 1;
  } else if (!explicit_max) {
    // Completions default to 16 tokens (OpenAI); chat runs until the context is full unless the
    // model's generation_config sets max_new_tokens. Either way within the context.
    int64_t room = std::numeric_limits<int64_t>::max();
    for (const auto& p : job->prompts) room = std::min<int64_t>(room, max_model_len - static_cast<int64_t>(p.size()));
    if (!chat) max_tokens = static_cast<int32_t>(std::min<int64_t>(16, room));
    else if (options_.default_max_new_tokens > 0) max_tokens = static_cast<int32_t>(std::min<int64_t>(options_.default_max_new_tokens, room));
    else max_tokens = -1;
  }
  job->base.max_tokens = max_tokens;
  return std::nullopt;
}

}  // namespace llmrt

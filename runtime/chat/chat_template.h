// Chat templates: a Jinja-subset engine that renders Hugging Face chat templates byte-for-byte
// like transformers' apply_chat_template (jinja2 with trim_blocks, lstrip_blocks, loopcontrols,
// the immutable sandbox, its tojson override, raise_exception and strftime_now).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"

namespace llmrt {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  ~ChatTemplate();

  /// Parses the template once; syntax the engine does not support → kInvalidArgument naming it
  /// and the line.
  static StatusOr<std::unique_ptr<ChatTemplate>> parse(std::string_view source);

  /// messages: a JSON array of {role, content, (tool_calls, name, ...)}; extra: more context
  /// variables (tools, documents, bos_token, eos_token, enable_thinking, ...) as a JSON object.
  /// An error raised by the template (raise_exception, undefined access, type errors) →
  /// kInvalidArgument with its message. Pass ordered_json to keep the caller's key order in
  /// tojson output (nlohmann::json sorts object keys; Python keeps insertion order).
  StatusOr<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  StatusOr<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                               const nlohmann::json& extra = nlohmann::json::object()) const;

  /// Makes strftime_now() use a fixed local time instead of the clock (tests, reproducible runs).
  void pin_time(const std::tm& now) { pinned_time_ = now; }

 private:
  ChatTemplate() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::optional<std::tm> pinned_time_;
};

}  // namespace llmrt

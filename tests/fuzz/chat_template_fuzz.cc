// libFuzzer target: chat template source → ChatTemplate::parse → render over a fixed
// conversation (system, user, assistant with a tool call, tool result) and a tool list.
// Any bytes must give a Status or a string, never a crash, hang or unbounded allocation.
// Seeds: the real templates (../shared/data/tokenizers/chat-templates/*.jinja).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"

namespace {

const nlohmann::ordered_json& messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? \u00e9\u2713"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"t\": 21}"},
    {"role": "assistant", "content": "<think>hm</think>It is 21 degrees."}
  ])");
  return m;
}

const nlohmann::ordered_json& extra() {
  static const auto e = nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": true,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}]
  })");
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  auto t = llmrt::ChatTemplate::parse(src);
  if (!t.ok()) return 0;
  std::tm now{};
  now.tm_year = 126;
  now.tm_mday = 15;
  (*t)->pin_time(now);
  (void)(*t)->render(messages(), true, extra());
  (void)(*t)->render(messages(), false);
  return 0;
}

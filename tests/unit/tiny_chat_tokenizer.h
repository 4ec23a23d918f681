// A small, real byte-level BPE tokenizer with ChatML control tokens and a ChatML-like chat
// template, built in memory (no files). Shared by tests/unit/openai_request_test.cc and
// tests/fuzz/openai_request_fuzz.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmrt::testing {

/// ChatML with an optional tool list in a system turn; `content` goes through `string` so a null
/// content renders as "None" (as Jinja does), and a custom kwarg `greeting` is honoured.
inline const char* tiny_chatml_template() {
  return "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif -%}"
         "{%- if greeting is defined %}{{ greeting }}\n{% endif -%}"
         "{%- for message in messages -%}"
         "{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] | string) + '<|im_end|>\n' }}"
         "{%- endfor -%}"
         "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%}";
}

/// All 256 bytes (ids 0..255), a few merged words, then <|endoftext|> (BOS), <|im_start|>,
/// <|im_end|> (EOS) as control tokens. `chat_template` "" makes a tokenizer without template.
inline TokenizerData tiny_chat_tokenizer_data(const std::string& chat_template = tiny_chatml_template()) {
  TokenizerData d;
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_code_point(static_cast<uint8_t>(b)), &s);
    d.tokens.push_back(s);
  }
  // Merges spelled byte-level ("Ġ" is a space); each result is a token.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"u", "s"}, {"us", "e"}, {"use", "r"},
      {"a", "s"}, {"as", "s"}, {"ass", "i"}, {"assi", "s"}, {"assis", "t"}, {"assist", "a"},
      {"assista", "n"}, {"assistan", "t"}, {"Ġ", "w"}, {"Ġw", "o"}, {"Ġwo", "r"}, {"Ġwor", "l"},
      {"Ġworl", "d"}};
  for (const auto& [l, r] : merges) {
    d.merges.push_back(l + " " + r);
    d.tokens.push_back(l + r);
  }
  d.token_types.assign(d.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(special);
    d.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  const int32_t n = static_cast<int32_t>(d.tokens.size());
  d.bos_id = n - 3;
  d.eos_id = n - 1;
  d.add_bos = true;
  d.chat_template = chat_template;
  return d;
}

inline std::unique_ptr<Tokenizer> tiny_chat_tokenizer(const std::string& chat_template = tiny_chatml_template()) {
  auto t = Tokenizer::create(tiny_chat_tokenizer_data(chat_template));
  return t.ok() ? std::move(t).value() : nullptr;
}

}  // namespace llmrt::testing

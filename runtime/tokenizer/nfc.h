// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition), the "NFC" normalizer of Qwen2/Qwen3 tokenizer.json. Tables are generated from
// the Unicode Character Database by gen_nfc_tables.py.
#pragma once

#include <string>
#include <string_view>

namespace llmrt {

/// True when `text` (valid UTF-8) is certainly in NFC without work: every code point is below
/// U+0300 (no combining marks, no decomposable characters that change).
bool is_trivially_nfc(std::string_view text);

/// Appends the NFC form of `text`, which must be valid UTF-8.
void append_nfc(std::string_view text, std::string* out);

}  // namespace llmrt

// libFuzzer target: tokenizer.json (+ tokenizer_config.json) → TokenizerData → runtime
// Tokenizer → encode/decode must reject or handle any bytes cleanly.
// Input layout: config bytes, a 0xFF separator byte (optional), tokenizer.json bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/tokenizer/HfTokenizer.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view config, tokenizer = all;
  if (size_t sep = all.find('\xFF'); sep != std::string_view::npos) {
    config = all.substr(0, sep);
    tokenizer = all.substr(sep + 1);
  }
  auto parsed = llmc::parseHfTokenizer(tokenizer, config, "fuzz");
  if (!parsed.ok()) return 0;
  // A fixed text exercising specials, digits, whitespace and multi-byte characters.
  exercise_tokenizer(*parsed, "<s>Hello 12345  world!\n\xC3\xA4\xF0\x9F\x98\x80 <|im_start|>");
  return 0;
}

// libFuzzer target: tokenizer.json (+ tokenizer_config.json) → TokenizerData → runtime
// Tokenizer → encode/decode must reject or handle any bytes cleanly.
// Input layout: config bytes, a 0xFF separator byte (optional), tokenizer.json bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/tokenizer/HfTokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view config, tokenizer = all;
  if (size_t sep = all.find('\xFF'); sep != std::string_view::npos) {
    config = all.substr(0, sep);
    tokenizer = all.substr(sep + 1);
  }
  auto parsed = llmc::parseHfTokenizer(tokenizer, config, "fuzz");
  if (!parsed.ok()) return 0;
  auto t = llmrt::Tokenizer::create(*parsed);
  if (!t.ok()) return 0;
  // Encode a fixed text that exercises specials, digits, whitespace and multi-byte characters.
  auto ids = (*t)->encode("<s>Hello 12345  world!\n\xC3\xA4\xF0\x9F\x98\x80 <|im_start|>");
  if (ids.ok()) {
    std::string text = (*t)->decode(*ids);
    llmrt::StreamingDecoder dec(**t);
    for (int32_t id : *ids) (void)dec.push(id);
    (void)dec.flush();
  }
  // Decoding arbitrary ids, including out-of-range ones, must not crash.
  int32_t probe[] = {-1, 0, 1, (*t)->vocab_size() - 1, (*t)->vocab_size(), 1 << 30};
  (void)(*t)->decode(probe);
  return 0;
}

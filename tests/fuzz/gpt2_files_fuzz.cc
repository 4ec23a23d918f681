// libFuzzer target: GPT-2 encoder.json + vocab.bpe → TokenizerData → runtime Tokenizer →
// encode/decode must reject or handle any bytes cleanly.
// Input layout: encoder.json bytes, a 0xFF separator byte, vocab.bpe bytes (no separator: all
// bytes are encoder.json and vocab.bpe is "a b").
// To be wired by tests/fuzz/CMakeLists.txt (LLMC_FUZZ_LIBS_gpt2_files: llmc_tokenizer).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/tokenizer/Gpt2Files.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view encoder = all, merges = "a b\n";
  if (size_t sep = all.find('\xFF'); sep != std::string_view::npos) {
    encoder = all.substr(0, sep);
    merges = all.substr(sep + 1);
  }
  auto parsed = llmc::parseGpt2Files(encoder, merges, "encoder.json", "vocab.bpe");
  if (!parsed.ok()) return 0;
  // A fixed text exercising specials, digits, whitespace and multi-byte characters.
  exercise_tokenizer(*parsed, "Hello 12345  world!\n\xC3\xA4\xF0\x9F\x98\x80 <|endoftext|>'s");
  return 0;
}

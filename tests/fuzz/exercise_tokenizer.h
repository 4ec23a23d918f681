// Shared by the tokenizer-loader fuzz targets: build a runtime Tokenizer from loaded data and
// run encode, decode, the streaming decoder and out-of-range ids through it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/tokenizer/tokenizer.h"

inline void exercise_tokenizer(const llmrt::TokenizerData& data, std::string_view text) {
  auto t = llmrt::Tokenizer::create(data);
  if (!t.ok()) return;
  auto ids = (*t)->encode(text);
  if (ids.ok()) {
    std::string decoded = (*t)->decode(*ids);
    llmrt::StreamingDecoder dec(**t);
    for (int32_t id : *ids) (void)dec.push(id);
    (void)dec.flush();
  }
  // Decoding arbitrary ids, including out-of-range ones, must not crash.
  int32_t probe[] = {-1, 0, 1, (*t)->vocab_size() - 1, (*t)->vocab_size(), 1 << 30};
  (void)(*t)->decode(probe);
}

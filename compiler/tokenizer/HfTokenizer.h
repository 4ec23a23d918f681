//===- HfTokenizer.h - Hugging Face tokenizer.json reader ------*- C++ -*-===//
//
// Reads a Hugging Face `tokenizer.json` (and `tokenizer_config.json` beside it, when present,
// for the BOS/EOS/PAD tokens, add_bos_token / add_eos_token and the chat template) into the
// neutral llmrt::TokenizerData the plan stores.
//
// Supported: model BPE. Byte-level pre-tokenizers are recognized by structure and mapped to the
// runtime's named table: ByteLevel(use_regex) → "gpt2"; Split(Llama 3 regex) + ByteLevel →
// "llama3"; Split(Qwen2 regex) + ByteLevel → "qwen2"; Digits(individual) + ByteLevel(use_regex)
// → "smollm". SentencePiece-style BPE (Llama 2, Mistral, TinyLlama: byte_fallback, "▁"
// normalizers Prepend + Replace, or the Metaspace pre-tokenizer; decoders Replace / ByteFallback
// / Fuse / Strip or Metaspace) is read with byte_level = false, "<0xNN>" tokens typed as byte
// tokens, and `pre` naming the variant ("spm", "spm-no-prefix",
// "spm-metaspace-{always,first,never}[-split]"; runtime/tokenizer/spm.h). Anything else is an
// error naming what is unsupported.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmc {

/// Reads `tokenizerJsonPath` and, if present, tokenizer_config.json in the same folder.
llmrt::StatusOr<llmrt::TokenizerData>
loadHfTokenizer(const std::string &tokenizerJsonPath);

/// The same over file contents in memory; `configJson` may be empty (no config file).
/// `nameForErrors` prefixes error messages. Never throws, never aborts on bad input.
llmrt::StatusOr<llmrt::TokenizerData>
parseHfTokenizer(std::string_view tokenizerJson, std::string_view configJson,
                 const std::string &nameForErrors);

} // namespace llmc

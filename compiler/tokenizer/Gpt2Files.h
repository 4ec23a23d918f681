//===- Gpt2Files.h - GPT-2 encoder.json + vocab.bpe reader -----*- C++ -*-===//
//
// The original OpenAI GPT-2 tokenizer files (also shipped by Hugging Face as vocab.json +
// merges.txt): `encoder.json` maps each byte-level token spelling to its id, `vocab.bpe` lists
// the merges in rank order, one "left right" pair per line after an optional "#version" line.
// The result is a byte-level BPE with the GPT-2 pre-tokenizer. `<|endoftext|>`, when present,
// is a control token and both BOS and EOS (as Hugging Face's GPT2Tokenizer sets it); no BOS is
// added by default.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmc {

/// Reads the two files. Errors name the file and, for vocab.bpe, the line.
llmrt::StatusOr<llmrt::TokenizerData> loadGpt2Files(const std::string &encoderJson,
                                                    const std::string &vocabBpe);

/// The same over file contents in memory. Checks: encoder.json is an object of string → integer
/// with ids exactly 0..n-1 (each once); every merge line has two non-empty parts separated by
/// one space, and both parts and their concatenation are tokens. Never throws or aborts.
llmrt::StatusOr<llmrt::TokenizerData> parseGpt2Files(std::string_view encoderJson,
                                                     std::string_view vocabBpe,
                                                     const std::string &encoderName,
                                                     const std::string &vocabName);

} // namespace llmc

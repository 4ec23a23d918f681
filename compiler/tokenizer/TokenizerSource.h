//===- TokenizerSource.h - Load a tokenizer from any supported file -*- C++ -*-===//
//
// One entry point for tools (`llmc tokenize`) and tests: a tokenizer from
//   - a Hugging Face tokenizer.json (any *.json other than encoder.json / vocab.json),
//   - a folder holding tokenizer.json, or else encoder.json + vocab.bpe (GPT-2 files; the
//     Hugging Face names vocab.json + merges.txt are accepted too),
//   - encoder.json / vocab.json itself, with vocab.bpe / merges.txt beside it,
//   - a GGUF file (recognized by its magic; vocab-only files work),
//   - a plan file written by llmc (recognized by its magic; fully verified on open).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmc {

/// Loads the tokenizer found at `path` (see above). Errors name the path and what was expected.
llmrt::StatusOr<llmrt::TokenizerData> loadTokenizerFrom(const std::string &path);

} // namespace llmc

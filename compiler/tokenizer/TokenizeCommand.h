//===- TokenizeCommand.h - The `llmc tokenize` subcommand ------*- C++ -*-===//
//
//   llmc tokenize --tokenizer PATH [--no-bos] [--no-parse-special] [--input-sep STR] [--decode]
//
// Encode (default): reads all of the input, byte for byte (a trailing newline is part of the
// text), and prints the ids separated by single spaces on one line. BOS / EOS are added as the
// tokenizer says (add_bos / add_eos); --no-bos suppresses BOS. Special tokens written in the
// text (<|im_start|> ...) are matched unless parseSpecial is off.
// --input-sep STR: the input is split on STR and each piece is printed as its own line of ids;
// a separator at the very end of the input does not start an empty piece (so the llama.cpp
// test files, strings each followed by "\n__ggml_vocab_test__\n", give one line per string).
// --decode: reads whitespace-separated ids and prints the text they decode to, with nothing
// added; with --input-sep each input line is decoded separately and followed by STR (the
// inverse of encoding with --input-sep).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

namespace llmc {

struct TokenizeOptions {
  /// tokenizer.json, a folder, GPT-2 files, a .gguf or a plan (see TokenizerSource.h).
  std::string tokenizerPath;
  bool noBos = false;
  bool parseSpecial = true;
  std::optional<std::string> inputSep;
  bool decode = false;
};

/// Runs the subcommand over `in`; results go to `out`, errors ("llmc tokenize: error: ...")
/// to `err`. Returns the process exit code: 0 on success, 1 on any error.
int runTokenizeCommand(const TokenizeOptions &options, std::istream &in, std::ostream &out,
                       std::ostream &err);

} // namespace llmc

// Pre-tokenizers: split text into the pieces BPE runs on, by one or more regexes applied in turn
// (each regex splits every piece the previous one produced; matches and the text between
// matches both become pieces, like Hugging Face's Split with behaviour "Isolated").
//
// A pre-tokenizer is chosen by name from a fixed table (the names GGUF's tokenizer.ggml.pre
// uses, as llama.cpp spells them, plus our canonical ones), so a plan stores a name, never a
// regex. The table and the families it leaves out are in pre_tokenizer.cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

class PreTokenizer {
 public:
  /// `name` is a canonical name or an alias ("gpt-2", "llama-bpe" ...). Unknown names are an
  /// InvalidArgument naming it and listing the supported ones.
  static StatusOr<std::unique_ptr<PreTokenizer>> create(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  /// The canonical name ("gpt2", "llama3", "qwen2", "smollm", "deepseek-v3", ...).
  const std::string& name() const { return name_; }
  /// Whether the family's BPE looks up a whole piece in the vocabulary before merging
  /// (Hugging Face `ignore_merges`; Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

  /// Splits `text`, which must be valid UTF-8, appending views into it to `pieces`. The pieces
  /// tile `text`; a family with byte stages (falcon) can cut inside a UTF-8 character, as
  /// Hugging Face does, so a piece is not always valid UTF-8.
  Status split(std::string_view text, std::vector<std::string_view>* pieces) const;

  /// Canonical name for `name` (an alias or itself), or "" when unknown.
  static std::string canonical_name(std::string_view name);
  /// "gpt2 (gpt-2, default, ...), llama3 (llama-bpe, llama-v3, ...), ..." for error messages.
  static std::string supported_names();
  /// Every name create() accepts: canonical names and aliases, in table order.
  static std::vector<std::string> all_names();

 private:
  struct Regex;
  PreTokenizer() = default;
  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> stages_;
};

}  // namespace llmrt

// SentencePiece-style BPE (Llama 1/2, Mistral, TinyLlama): spaces are spelled "▁" (U+2581), a
// "▁" may be prepended to the text, BPE runs over UTF-8 characters, and characters the
// vocabulary lacks fall back to "<0xNN>" byte tokens.
//
// The variant is named by the tokenizer's `pre` string (a plan stores a name, never code):
//   "spm"  (aliases "", "default", "llama", "llama-spm"): Hugging Face Prepend("▁") +
//          Replace(" ", "▁") normalizers = llama.cpp add_space_prefix: every text segment between
//          special tokens gets a "▁" in front.
//   "spm-no-prefix": only the replacement (llama.cpp add_space_prefix = false).
//   "spm-metaspace-always" / "spm-metaspace-first": Hugging Face Metaspace pre-tokenizer with
//          prepend_scheme always / first: "▁" prepended unless the segment already starts with
//          one ("first": only for the segment at the start of the text).
//   "spm-metaspace-never": Metaspace without a prefix.
//   any of the metaspace names + "-split": Metaspace split=true (pieces start at each "▁").
// Merges come either from a rank-ordered merge list (tokenizer.json) or, when there is none,
// from token scores (GGUF tokenizer.ggml.scores: the adjacent pair whose concatenation is a token
// with the highest score merges first, leftmost among equals, as in SentencePiece/llama.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

class TokenIndex;

struct SpmConfig {
  enum class Prefix { kAlways, kIfMissing, kFirstIfMissing, kNever };
  std::string name;  // canonical
  Prefix prefix = Prefix::kAlways;
  bool split = false;
  /// Whether decoding strips one leading space (Hugging Face Strip / Metaspace decoder).
  bool strip_leading_space() const { return prefix != Prefix::kNever; }
};

/// Parses a SentencePiece-style `pre` name (see above); unknown names are InvalidArgument.
StatusOr<SpmConfig> parse_spm_config(std::string_view pre);

/// Appends `text` with ' ' replaced by "▁" and, per `config`, a "▁" prepended.
/// `at_text_start`: the segment begins the whole text (Metaspace "first").
void spm_normalize(const SpmConfig& config, std::string_view text, bool at_text_start,
                   std::string* out);

/// Metaspace split: pieces of `text` each starting at a "▁" (text before the first "▁" is a
/// piece of its own).
void spm_split(std::string_view text, std::vector<std::string_view>* pieces);

/// Score-driven BPE over the UTF-8 characters of `text` (valid UTF-8). Appends the final symbols
/// as views into `text`; each is either a token of `index` or a single character that is not.
void spm_merge_by_score(std::string_view text, const TokenIndex& index,
                        const std::vector<float>& scores, std::vector<std::string_view>* out);

}  // namespace llmrt

// The runtime tokenizer: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM families) and
// SentencePiece-style BPE (Llama 1/2, Mistral, TinyLlama) built from TokenizerData or the plan's
// fb::Tokenizer table, plus an incremental detokenizer.
//
// encode(): special/added tokens are split out of the text first (leftmost, longest match;
// control tokens only when parse_special, user-defined tokens always), the rest is split by the
// named pre-tokenizer, each piece is spelled byte-level and merged by BPE rank.
// decode(): normal tokens are un-spelled back to bytes; control and user-defined tokens are
// their text verbatim. The result is raw bytes (may be invalid UTF-8 if `ids` ends inside a
// character); StreamingDecoder only ever returns complete characters.
//
// normalizer "nfc" (Qwen2/3 tokenizer.json) is applied to the text between special tokens.
//
// SentencePiece-style BPE (byte_level = false; Llama 1/2, Mistral, TinyLlama; see spm.h): each
// text segment between special tokens has ' ' replaced by "▁" and (per the `pre` variant) a "▁"
// prepended, then BPE runs over its UTF-8 characters — by merge rank when `merges` is given
// (tokenizer.json), else by token score (GGUF) — and characters without a token become <0xNN>
// byte tokens. decode() spells "▁" as ' ', reassembles byte tokens, and strips one leading space
// of the whole output (Hugging Face's Strip decoder) unless the variant adds no prefix.
// Thread safety: a Tokenizer is immutable after create() except for an internal, locked word
// cache, so one instance may be shared by many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/spm.h"
#include "runtime/tokenizer/tokenizer_data.h"

namespace llmrt {

namespace fb {
struct Tokenizer;
}

class BpeMerges;
class PreTokenizer;
class TokenIndex;

class Tokenizer {
 public:
  /// Validates `data` (model kind, pre-tokenizer name, token types, special ids in range, every
  /// merge naming known tokens) and builds the lookup tables.
  static StatusOr<std::unique_ptr<Tokenizer>> create(const TokenizerData& data);
  /// From the plan's tokenizer table (already verified as a FlatBuffer by the plan loader).
  static StatusOr<std::unique_ptr<Tokenizer>> from_plan(const fb::Tokenizer& t);
  ~Tokenizer();

  /// `add_special`: prepend BOS / append EOS as the data says (add_bos / add_eos).
  /// `parse_special`: match control tokens (e.g. "<|im_start|>") in the text; user-defined added
  /// tokens are always matched. Fails on text that is not valid UTF-8.
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_special = true,
                                        bool parse_special = true) const;
  /// Concatenated bytes of `ids`; ids out of range are skipped; `skip_special` drops control
  /// tokens. SentencePiece-style with a "▁" prefix: one leading space of the result is dropped.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  /// Appends the bytes one token decodes to (what decode() concatenates, before its
  /// leading-space strip).
  void append_token_bytes(int32_t id, bool skip_special, std::string* out) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  /// A control token (BOS, EOS, <|im_start|> ...).
  bool is_special(int32_t id) const;
  TokenType token_type(int32_t id) const;
  /// The stored text of token `id` (byte-level spelling for normal tokens), "" if out of range.
  std::string_view token_text(int32_t id) const;
  /// Id of the token whose stored text is `text`, or -1.
  int32_t find_token(std::string_view text) const;
  /// Canonical pre-tokenizer name in use ("spm..." for SentencePiece-style BPE).
  const std::string& pre_tokenizer_name() const;
  /// SentencePiece-style BPE ("▁" spaces, <0xNN> byte fallback) rather than byte-level BPE.
  bool is_sentencepiece() const { return spm_ != nullptr; }
  /// decode() drops one leading space of its output (SentencePiece-style with a "▁" prefix).
  bool strips_leading_space() const { return spm_ != nullptr && spm_->strip_leading_space(); }
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer();
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
  void encode_spm_piece(std::string_view piece, std::vector<int32_t>* ids) const;
  void encode_plain(std::string_view text, bool at_text_start,
                    std::vector<std::string_view>* scratch, std::vector<int32_t>* out,
                    Status* status) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::unique_ptr<TokenIndex> token_ids_;  // over tokens_
  int32_t byte_ids_[256];
  struct Special {
    std::string_view text;
    int32_t id;
    bool control;  // matched only with parse_special
  };
  std::vector<Special> specials_[256];  // by first byte, longest first
  std::unique_ptr<PreTokenizer> pre_;    // byte-level BPE
  std::unique_ptr<SpmConfig> spm_;       // SentencePiece-style BPE
  std::vector<float> scores_;            // SentencePiece-style merges by score (no merge list)
  std::unique_ptr<BpeMerges> merges_;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::string chat_template_;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

/// Turns a stream of token ids into text, never returning part of a UTF-8 character: bytes of
/// an incomplete character wait for the next token. Bytes that can never form a valid character
/// come out as U+FFFD. The Tokenizer must outlive the decoder.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  /// The text completed by `id` (possibly empty).
  std::string push(int32_t id);
  /// Whatever is still buffered (an incomplete character becomes U+FFFD); resets the decoder.
  std::string flush();

 private:
  std::string take_complete(bool final);
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool at_start_ = true;  // nothing decoded yet (for the leading-space strip)
  std::string pending_;
};

}  // namespace llmrt

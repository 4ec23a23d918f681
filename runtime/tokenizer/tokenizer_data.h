// The neutral form of a tokenizer: what the compiler extracts from tokenizer.json or GGUF
// metadata, stores in the plan (fb::Tokenizer), and what the runtime builds its Tokenizer from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmrt {

enum class TokenType : int32_t {
  kNormal = 1,       // GGUF numbering (llama.cpp's llama_token_type)
  kUnknown = 2,
  kControl = 3,      // special tokens: <|im_start|>, <s> ...
  kUserDefined = 4,  // added tokens matched verbatim in text
  kUnused = 5,
  kByte = 6,         // <0x41> byte-fallback tokens
};

struct TokenizerData {
  std::string model = "bpe";         // "bpe" (byte-level or SentencePiece-style)
  // pre-tokenizer name: "gpt2", "llama3", "qwen2", "smollm", ... for byte-level BPE;
  // "spm" (or "", "default", "llama-spm"), "spm-metaspace-..." for SentencePiece-style (spm.h).
  std::string pre;
  bool byte_level = true;            // GPT-2 byte↔unicode mapping; false: SentencePiece-style
  std::vector<std::string> tokens;   // id → token text (byte-level form for byte-level BPE)
  std::vector<int32_t> token_types;  // id → TokenType (empty = all normal)
  std::vector<std::string> merges;   // "left right", rank order
  // id → score (GGUF tokenizer.ggml.scores). SentencePiece-style BPE without a merge list merges
  // the adjacent pair whose concatenation is the token with the highest score. Empty = none.
  std::vector<float> scores;
  // Hugging Face BPE `ignore_merges`: a piece that is itself in the vocabulary is emitted whole
  // without merging. The Llama 3 pre-tokenizer family implies it (as in llama.cpp).
  bool ignore_merges = false;
  // Normalizer applied to the text between special tokens before pre-tokenization:
  // "" (none) or "nfc" (Qwen2/3 tokenizer.json).
  std::string normalizer;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;
};

}  // namespace llmrt

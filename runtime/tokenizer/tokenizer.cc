#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/nfc.h"
#include "runtime/tokenizer/pre_tokenizer.h"

namespace llmrt {
namespace {

constexpr size_t kMaxCachedPieceBytes = 128;
constexpr size_t kMaxCacheEntries = 1 << 16;

/// SentencePiece token text → bytes: "▁" (U+2581) is a space.
void append_spm_text(std::string_view text, std::string* out) {
  constexpr std::string_view kSpace = "\xE2\x96\x81";
  size_t pos = 0;
  while (true) {
    size_t next = text.find(kSpace, pos);
    if (next == std::string_view::npos) break;
    out->append(text.data() + pos, next - pos);
    out->push_back(' ');
    pos = next + kSpace.size();
  }
  out->append(text.data() + pos, text.size() - pos);
}

}  // namespace

Tokenizer::Tokenizer() { std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1); }
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::create(const TokenizerData& data) {
  if (data.model != "bpe") {
    return unimplemented("tokenizer model '" + data.model + "' is not supported (supported: bpe)");
  }
  if (data.normalizer != "" && data.normalizer != "nfc") {
    return unimplemented("tokenizer normalizer '" + data.normalizer +
                         "' is not supported (supported: none, nfc)");
  }
  if (data.tokens.empty()) return invalid_argument("tokenizer has no tokens");
  if (data.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return invalid_argument("tokenizer has too many tokens");
  }
  const auto n = static_cast<int32_t>(data.tokens.size());
  if (!data.token_types.empty() && data.token_types.size() != data.tokens.size()) {
    return invalid_argument("tokenizer has " + std::to_string(data.tokens.size()) +
                            " tokens but " + std::to_string(data.token_types.size()) +
                            " token types");
  }
  auto check_id = [n](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= n) {
      return invalid_argument(std::string("tokenizer ") + what + " " + std::to_string(id) +
                              " is out of range [0, " + std::to_string(n) + ")");
    }
    return ok_status();
  };
  RETURN_IF_ERROR(check_id(data.bos_id, "bos_id"));
  RETURN_IF_ERROR(check_id(data.eos_id, "eos_id"));
  RETURN_IF_ERROR(check_id(data.pad_id, "pad_id"));
  if (data.add_bos && data.bos_id < 0) return invalid_argument("tokenizer add_bos without bos_id");
  if (data.add_eos && data.eos_id < 0) return invalid_argument("tokenizer add_eos without eos_id");

  if (!data.scores.empty() && data.scores.size() != data.tokens.size()) {
    return invalid_argument("tokenizer has " + std::to_string(data.tokens.size()) +
                            " tokens but " + std::to_string(data.scores.size()) + " scores");
  }
  for (size_t i = 0; i < data.scores.size(); ++i) {
    if (std::isnan(data.scores[i])) {
      return invalid_argument("token " + std::to_string(i) + " has a NaN score");
    }
  }
  if (!data.byte_level && data.merges.empty() && data.scores.empty()) {
    return invalid_argument(
        "SentencePiece-style BPE tokenizer has neither merges nor token scores");
  }

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (data.byte_level) {
    // An empty name is what old GGUF files without tokenizer.ggml.pre mean: GPT-2's rules.
    ASSIGN_OR_RETURN(t->pre_, PreTokenizer::create(data.pre.empty() ? "gpt2" : data.pre));
    t->ignore_merges_ = data.ignore_merges || t->pre_->ignore_merges();
  } else {
    ASSIGN_OR_RETURN(SpmConfig config, parse_spm_config(data.pre));
    t->spm_ = std::make_unique<SpmConfig>(std::move(config));
    t->ignore_merges_ = data.ignore_merges;
    if (data.merges.empty()) t->scores_ = data.scores;
  }
  t->nfc_ = data.normalizer == "nfc";

  t->tokens_ = data.tokens;
  t->types_.resize(n, TokenType::kNormal);
  for (int32_t i = 0; i < static_cast<int32_t>(data.token_types.size()); ++i) {
    int32_t v = data.token_types[i];
    if (v < 0 || v > static_cast<int32_t>(TokenType::kByte)) {
      return invalid_argument("token " + std::to_string(i) + " has invalid type " +
                              std::to_string(v) + " (expected 0..6)");
    }
    // 0 is GGUF's "undefined" type: llama.cpp treats such tokens as normal.
    t->types_[i] = v == 0 ? TokenType::kNormal : static_cast<TokenType>(v);
  }
  t->token_ids_ = std::make_unique<TokenIndex>();
  t->token_ids_->build(&t->tokens_);
  for (int32_t i = 0; i < n; ++i) {
    TokenType type = t->types_[i];
    if (type == TokenType::kUnknown && t->unk_id_ < 0) t->unk_id_ = i;
    bool control = type == TokenType::kControl || type == TokenType::kUnknown;
    if ((control || type == TokenType::kUserDefined) && !t->tokens_[i].empty()) {
      auto first = static_cast<uint8_t>(t->tokens_[i][0]);
      t->specials_[first].push_back({t->tokens_[i], i, control});
    }
  }
  for (auto& bucket : t->specials_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const Special& a, const Special& b) {
      return a.text.size() > b.text.size();
    });
  }
  std::string spelled;
  for (int b = 0; b < 256; ++b) {
    spelled.clear();
    if (t->spm_) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      spelled = "<0x";
      spelled.push_back(kHex[b >> 4]);
      spelled.push_back(kHex[b & 15]);
      spelled.push_back('>');
    } else {
      append_utf8(byte_to_code_point(static_cast<uint8_t>(b)), &spelled);
    }
    t->byte_ids_[b] = t->token_ids_->find(spelled);
  }
  auto find_id = [&t](std::string_view text) { return t->token_ids_->find(text); };
  ASSIGN_OR_RETURN(t->merges_, BpeMerges::create(data.merges, find_id));

  t->bos_id_ = data.bos_id;
  t->eos_id_ = data.eos_id;
  t->pad_id_ = data.pad_id;
  t->add_bos_ = data.add_bos;
  t->add_eos_ = data.add_eos;
  t->chat_template_ = data.chat_template;
  return t;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && types_[id] == TokenType::kControl;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < vocab_size() ? types_[id] : TokenType::kUnknown;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  return id >= 0 && id < vocab_size() ? std::string_view(tokens_[id]) : std::string_view();
}

int32_t Tokenizer::find_token(std::string_view text) const { return token_ids_->find(text); }

const std::string& Tokenizer::pre_tokenizer_name() const {
  return spm_ ? spm_->name : pre_->name();
}

void Tokenizer::encode_spm_piece(std::string_view piece, std::vector<int32_t>* ids) const {
  auto push_bytes = [&](std::string_view bytes) {
    bool all = true;
    for (unsigned char c : bytes) all = all && byte_ids_[c] >= 0;
    if (all) {
      for (unsigned char c : bytes) ids->push_back(byte_ids_[c]);
    } else if (unk_id_ >= 0 && (ids->empty() || ids->back() != unk_id_)) {
      ids->push_back(unk_id_);  // consecutive unknowns fuse (Hugging Face fuse_unk)
    }
  };
  if (scores_.empty()) {
    // Merge list (tokenizer.json): one symbol per character, byte tokens for characters the
    // vocabulary lacks, then merges by rank.
    for (size_t pos = 0; pos < piece.size();) {
      size_t len = std::max<size_t>(1, valid_utf8_length(piece, pos));
      std::string_view ch = piece.substr(pos, len);
      int32_t id = token_ids_->find(ch);
      if (id >= 0) {
        ids->push_back(id);
      } else {
        push_bytes(ch);
      }
      pos += len;
    }
    merges_->apply(ids);
    return;
  }
  std::vector<std::string_view> symbols;
  spm_merge_by_score(piece, *token_ids_, scores_, &symbols);
  for (std::string_view sym : symbols) {
    int32_t id = token_ids_->find(sym);
    if (id >= 0) {
      ids->push_back(id);
    } else {
      push_bytes(sym);
    }
  }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  bool done = false;
  if (spm_) {
    int32_t id = ignore_merges_ ? token_ids_->find(piece) : -1;
    if (id >= 0 && types_[id] == TokenType::kNormal) {
      ids.push_back(id);
    } else {
      encode_spm_piece(piece, &ids);
    }
    done = true;
  }
  if (!done && ignore_merges_) {
    std::string spelled;
    append_byte_level(piece, &spelled);
    int32_t id = token_ids_->find(spelled);
    if (id >= 0 && types_[id] == TokenType::kNormal) {
      ids.push_back(id);
      done = true;
    }
  }
  if (!done) {
    ids.reserve(piece.size());
    for (unsigned char c : piece) {
      int32_t id = byte_ids_[c];
      if (id < 0) id = unk_id_;  // a vocabulary lacking a byte: <unk> if it has one, else drop
      if (id >= 0) ids.push_back(id);
    }
    merges_->apply(&ids);
  }
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::move(ids));
  }
}

void Tokenizer::encode_plain(std::string_view text, bool at_text_start,
                             std::vector<std::string_view>* scratch, std::vector<int32_t>* out,
                             Status* status) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_ && !is_trivially_nfc(text)) {
    append_nfc(text, &normalized);
    text = normalized;
  }
  scratch->clear();
  if (spm_) {
    std::string spelled;
    spm_normalize(*spm_, text, at_text_start, &spelled);
    if (spm_->split) {
      spm_split(spelled, scratch);
    } else if (!spelled.empty()) {
      scratch->push_back(spelled);
    }
    for (std::string_view piece : *scratch) encode_piece(piece, out);
    return;
  }
  Status st = pre_->split(text, scratch);
  if (!st.ok()) {
    *status = st;
    return;
  }
  for (std::string_view piece : *scratch) encode_piece(piece, out);
}

StatusOr<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special,
                                                 bool parse_special) const {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    return invalid_argument("text to encode is not valid UTF-8 (at byte " + std::to_string(bad) +
                            ")");
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) out.push_back(bos_id_);

  Status status;
  std::vector<std::string_view> scratch;
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Special* match = nullptr;
    for (const Special& s : specials_[static_cast<uint8_t>(text[pos])]) {
      if (s.control && !parse_special) continue;
      if (text.compare(pos, s.text.size(), s.text) == 0) {
        match = &s;
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    encode_plain(text.substr(plain_start, pos - plain_start), plain_start == 0, &scratch, &out,
                 &status);
    if (!status.ok()) return status;
    out.push_back(match->id);
    pos += match->text.size();
    plain_start = pos;
  }
  encode_plain(text.substr(plain_start), plain_start == 0, &scratch, &out, &status);
  if (!status.ok()) return status;

  if (add_special && add_eos_) out.push_back(eos_id_);
  return out;
}

void Tokenizer::append_token_bytes(int32_t id, bool skip_special, std::string* out) const {
  if (id < 0 || id >= vocab_size()) return;
  switch (types_[id]) {
    case TokenType::kNormal:
      if (spm_) {
        append_spm_text(tokens_[id], out);
      } else {
        append_bytes_from_byte_level(tokens_[id], out);
      }
      return;
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      if (!skip_special) out->append(tokens_[id]);
      return;
    case TokenType::kUserDefined:
      out->append(tokens_[id]);
      return;
    case TokenType::kByte: {
      // "<0xNN>" byte-fallback tokens (SentencePiece vocabularies).
      const std::string& s = tokens_[id];
      unsigned value = 0;
      if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>') {
        for (int i = 3; i < 5; ++i) {
          char c = s[i];
          value = value * 16 + (c >= '0' && c <= '9'   ? c - '0'
                                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                       : 0);
        }
        out->push_back(static_cast<char>(value));
      } else {
        out->append(s);
      }
      return;
    }
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) append_token_bytes(id, skip_special, &out);
  if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamingDecoder::push(int32_t id) {
  tokenizer_->append_token_bytes(id, skip_special_, &pending_);
  if (at_start_ && !pending_.empty()) {
    at_start_ = false;
    if (tokenizer_->strips_leading_space() && pending_[0] == ' ') pending_.erase(0, 1);
  }
  return take_complete(/*final=*/false);
}

std::string StreamingDecoder::flush() {
  at_start_ = true;
  return take_complete(/*final=*/true);
}

std::string StreamingDecoder::take_complete(bool final) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    size_t len = valid_utf8_length(pending_, pos);
    if (len > 0) {
      out.append(pending_, pos, len);
      pos += len;
    } else if (!final && is_incomplete_utf8_prefix(pending_, pos)) {
      break;  // wait for the rest of this character
    } else {
      out.append(kReplacement);
      ++pos;
    }
  }
  pending_.erase(0, pos);
  return out;
}

}  // namespace llmrt

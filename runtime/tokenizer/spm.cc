#include "runtime/tokenizer/spm.h"

#include <queue>

#include "runtime/tokenizer/bpe.h"

namespace llmrt {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

struct Symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;
  uint32_t size;  // 0 once merged into the left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // combined size when queued (a changed neighbour makes it stale)
};

struct Lower {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

StatusOr<SpmConfig> parse_spm_config(std::string_view pre) {
  SpmConfig c;
  if (pre.empty() || pre == "default" || pre == "llama" || pre == "llama-spm" || pre == "spm") {
    c.name = "spm";
    return c;
  }
  if (pre == "spm-no-prefix") {
    c.name = "spm-no-prefix";
    c.prefix = SpmConfig::Prefix::kNever;
    return c;
  }
  std::string_view rest = pre;
  constexpr std::string_view kSplit = "-split";
  if (rest.size() > kSplit.size() && rest.substr(rest.size() - kSplit.size()) == kSplit) {
    c.split = true;
    rest.remove_suffix(kSplit.size());
  }
  if (rest == "spm-metaspace-always") {
    c.prefix = SpmConfig::Prefix::kIfMissing;
  } else if (rest == "spm-metaspace-first") {
    c.prefix = SpmConfig::Prefix::kFirstIfMissing;
  } else if (rest == "spm-metaspace-never") {
    c.prefix = SpmConfig::Prefix::kNever;
  } else {
    return invalid_argument("unknown SentencePiece-style pre-tokenizer '" + std::string(pre) +
                            "' (supported: spm (default, llama, llama-spm), spm-no-prefix, "
                            "spm-metaspace-{always,first,never}[-split])");
  }
  c.name = std::string(pre);
  return c;
}

void spm_normalize(const SpmConfig& config, std::string_view text, bool at_text_start,
                   std::string* out) {
  const bool starts_with_space =
      !text.empty() && (text[0] == ' ' || text.substr(0, kSpace.size()) == kSpace);
  bool prefix = false;
  switch (config.prefix) {
    case SpmConfig::Prefix::kAlways:
      prefix = true;
      break;
    case SpmConfig::Prefix::kIfMissing:
      prefix = !starts_with_space;
      break;
    case SpmConfig::Prefix::kFirstIfMissing:
      prefix = at_text_start && !starts_with_space;
      break;
    case SpmConfig::Prefix::kNever:
      break;
  }
  if (text.empty()) return;  // nothing to tokenize: no prefix either
  out->reserve(out->size() + text.size() + 3);
  if (prefix) out->append(kSpace);
  for (char c : text) {
    if (c == ' ') {
      out->append(kSpace);
    } else {
      out->push_back(c);
    }
  }
}

void spm_split(std::string_view text, std::vector<std::string_view>* pieces) {
  size_t start = 0;
  size_t pos = 0;
  while ((pos = text.find(kSpace, pos)) != std::string_view::npos) {
    if (pos > start) pieces->push_back(text.substr(start, pos - start));
    start = pos;
    pos += kSpace.size();
  }
  if (start < text.size()) pieces->push_back(text.substr(start));
}

void spm_merge_by_score(std::string_view text, const TokenIndex& index,
                        const std::vector<float>& scores, std::vector<std::string_view>* out) {
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = std::min(utf8_char_length(static_cast<unsigned char>(text[pos])),
                          text.size() - pos);
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({i - 1, -1, static_cast<uint32_t>(pos), static_cast<uint32_t>(len)});
    if (i > 0) syms[i - 1].next = i;
    pos += len;
  }
  if (syms.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    uint32_t size = syms[left].size + syms[right].size;
    int32_t id = index.find(text.substr(syms[left].begin, size));
    if (id < 0 || static_cast<size_t>(id) >= scores.size()) return;
    queue.push({scores[id], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& left = syms[b.left];
    Symbol& right = syms[b.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = b.left;
    consider(left.prev, b.left);
    consider(b.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    out->push_back(text.substr(syms[i].begin, syms[i].size));
  }
}

}  // namespace llmrt

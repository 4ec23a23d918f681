#include "runtime/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

namespace llmrt {
namespace {

// Whitespace as Unicode's White_Space property (what Hugging Face's regex engines and llama.cpp
// use for \s). PCRE2's \s with UCP lacks U+0085, so the patterns spell the class out.
#define LLMRT_WS_ITEMS "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}"
#define LLMRT_WS "[" LLMRT_WS_ITEMS "]"
#define LLMRT_NOT_WS "[^" LLMRT_WS_ITEMS "]"
// English contractions; case-insensitive in the Llama 3 / Qwen2 patterns, written with explicit
// ASCII classes so Unicode case folding (e.g. U+017F 'ſ' ~ 's') cannot widen them.
#define LLMRT_CONTRACTIONS_CI "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])"

// GPT-2's pattern (also Hugging Face ByteLevel's use_regex pattern).
constexpr const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" LLMRT_WS_ITEMS "\\p{L}\\p{N}]+|" LLMRT_WS
    "+(?!" LLMRT_NOT_WS ")|" LLMRT_WS "+";

// Llama 3: numbers in groups of up to three digits; letters take one leading non-letter.
constexpr const char kLlama3Pattern[] =
    LLMRT_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" LLMRT_WS_ITEMS
    "\\p{L}\\p{N}]+[\\r\\n]*|" LLMRT_WS "*[\\r\\n]+|" LLMRT_WS "+(?!" LLMRT_NOT_WS ")|" LLMRT_WS
    "+";

// Qwen2: as Llama 3 but every digit is its own piece.
constexpr const char kQwen2Pattern[] =
    LLMRT_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" LLMRT_WS_ITEMS
    "\\p{L}\\p{N}]+[\\r\\n]*|" LLMRT_WS "*[\\r\\n]+|" LLMRT_WS "+(?!" LLMRT_NOT_WS ")|" LLMRT_WS
    "+";

// Hugging Face Digits(individual_digits=true): every numeric character alone.
constexpr const char kDigitsPattern[] = "\\p{N}";

struct Family {
  const char* name;
  std::array<const char*, 4> aliases;  // nullptr-terminated
  std::array<const char*, 3> stages;   // nullptr-terminated
  bool ignore_merges;
};

const Family kFamilies[] = {
    {"gpt2", {"gpt-2", "default", nullptr}, {kGpt2Pattern, nullptr}, false},
    {"llama3", {"llama-bpe", "llama-v3", nullptr}, {kLlama3Pattern, nullptr}, true},
    {"qwen2", {"deepseek-r1-qwen", nullptr}, {kQwen2Pattern, nullptr}, false},
    // SmolLM / StarCoder: Sequence[Digits(individual), ByteLevel(use_regex)] in tokenizer.json.
    {"smollm", {"starcoder", nullptr}, {kDigitsPattern, kGpt2Pattern, nullptr}, false},
};

const Family* find_family(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (name == f.name) return &f;
    for (const char* a : f.aliases) {
      if (a == nullptr) break;
      if (name == a) return &f;
    }
  }
  return nullptr;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::canonical_name(std::string_view name) {
  const Family* f = find_family(name);
  return f == nullptr ? std::string() : std::string(f->name);
}

std::string PreTokenizer::supported_names() {
  std::string out;
  for (const Family& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.name;
    std::string aliases;
    for (const char* a : f.aliases) {
      if (a == nullptr) break;
      if (!aliases.empty()) aliases += ", ";
      aliases += a;
    }
    if (!aliases.empty()) out += " (" + aliases + ")";
  }
  return out;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::create(std::string_view name) {
  const Family* family = find_family(name);
  if (family == nullptr) {
    return invalid_argument("unknown pre-tokenizer '" + std::string(name) +
                            "'; supported: " + supported_names());
  }
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  pt->name_ = family->name;
  pt->ignore_merges_ = family->ignore_merges;
  for (const char* pattern : family->stages) {
    if (pattern == nullptr) break;
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error_code,
                                &error_offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR buffer[256];
      pcre2_get_error_message(error_code, buffer, sizeof(buffer));
      return internal_error("pre-tokenizer '" + pt->name_ + "': regex does not compile at offset " +
                            std::to_string(error_offset) + ": " +
                            reinterpret_cast<const char*>(buffer));
    }
    // JIT is an optimization only: without it pcre2_match interprets.
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    pt->stages_.push_back(std::move(regex));
  }
  return pt;
}

namespace {

// Splits `text` by `code`: every match and every non-empty gap between matches is a piece.
Status split_one(pcre2_code* code, pcre2_match_data* md, std::string_view text,
                 std::vector<std::string_view>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buffer[256];
      pcre2_get_error_message(rc, buffer, sizeof(buffer));
      return resource_exhausted(std::string("pre-tokenizer regex failed: ") +
                                reinterpret_cast<const char*>(buffer));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end <= begin) {
      // None of our patterns match empty text; guard anyway by stepping one character.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > gap_start) out->push_back(text.substr(gap_start, begin - gap_start));
    out->push_back(text.substr(begin, end - begin));
    pos = gap_start = end;
  }
  if (gap_start < text.size()) out->push_back(text.substr(gap_start));
  return ok_status();
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

Status PreTokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return ok_status();
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (size_t s = 0; s < stages_.size(); ++s) {
    MatchData md(stages_[s]->code);
    if (md.md == nullptr) return resource_exhausted("pre-tokenizer: out of memory");
    std::vector<std::string_view>* target = (s + 1 == stages_.size()) ? pieces : &next;
    for (std::string_view piece : current) {
      RETURN_IF_ERROR(split_one(stages_[s]->code, md.md, piece, target));
    }
    if (target == &next) {
      current.swap(next);
      next.clear();
    }
  }
  return ok_status();
}

}  // namespace llmrt

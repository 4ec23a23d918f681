#include "runtime/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

namespace llmrt {
namespace {

// ---------------------------------------------------------------------------------------------
// The table. Each family is an ordered list of split stages, applied in turn as Hugging Face's
// pre_tokenizers.Sequence applies its steps; the byte-level mapping itself happens later, in BPE.
//
// Patterns are written as the models' tokenizer.json files write them (Oniguruma syntax, which
// PCRE2 with UTF + UCP reads the same way), with one rewrite at compile time: \s and \S become
// Unicode's White_Space class, spelled out (see expand_whitespace), because that is what
// Oniguruma's \s means and PCRE2's differs at the edges.
//
// A stage is one of:
//   kText  the regex runs on the text (UTF-8, Unicode properties);
//   kBytes the regex runs on raw bytes. For steps a tokenizer.json places *after* its ByteLevel
//          step, which see the byte-mapped text: there a digit class matches the bytes whose
//          mapped characters are numeric (0-9 and 0xB2 0xB3 0xB9 0xBC-0xBE, which map to
//          '²' '³' '¹' '¼' '½' '¾'), so it can split inside a UTF-8 character (Falcon). Only kBytes
//          stages may follow a kBytes stage.
//   kDigitTriples, kDigitTriplesAtWordEnd: digit grouping that two tokenizer.json files write as
//          lookahead regexes, "(?=(\d{3})+(?!\d))" (SuperBPE) and "\d{1,3}(?=(?:\d{3})*\b)"
//          (Tiny Aya). Run as regexes they take quadratic time on a long digit run, so the
//          stage finds the runs with its pattern ("\d+") and cuts them itself (split_digit_groups).
// Every match and every non-empty gap between matches becomes a piece (Split "Isolated"); a
// zero-width match only marks a boundary.
//
// Hugging Face steps map to stages as:
//   ByteLevel(use_regex=true)          -> kGpt2 (kText)
//   Digits(individual_digits=true)     -> "\p{N}"    Digits(false) -> "\p{N}+"
//   Punctuation(Isolated)              -> "[\p{P}!-/:-@\[-`{-~]" (Unicode P plus ASCII punctuation)
//   Punctuation(Contiguous)            -> "[\p{P}$+<=>^`|~]+"
//   Split(Regex r, Isolated)           -> r
//
// Left out (create() rejects them as unknown), all from llama.cpp's list of tokenizer.ggml.pre:
//   kimi-k2       needs a Han-excluding class intersection and custom code in llama.cpp.
//   afmoe         its digit grouping is custom code in llama.cpp, not a regex.
//   granite-embed-multi-97m  only llama.cpp's rewrite of its regex is public here.
//   gemma4, granite-embed-multi-311m, sarvam-moe, whitespace: not byte-level BPE (raw UTF-8
//                 pieces, "▁" spaces or whitespace-dropping), which this pre-tokenizer cannot
//                 express.
// ---------------------------------------------------------------------------------------------

enum class StageKind { kText, kBytes, kDigitTriples, kDigitTriplesAtWordEnd };

struct Stage {
  const char* pattern;  // nullptr ends the list
  StageKind kind = StageKind::kText;
};

// Case-insensitive English contractions. PCRE2 folds case by Unicode as Oniguruma does, so
// "'ſ" (U+017F) counts as "'s" here as in Hugging Face (llama.cpp's ASCII rewrite differs).
#define LLMRT_CONTRACTIONS_CI "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define LLMRT_UPPER R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
#define LLMRT_LOWER R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])"
// The tail most regexes since Llama 3 share: line-break runs, then other whitespace.
#define LLMRT_WS_TAIL R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"

// GPT-2 (Hugging Face ByteLevel's use_regex pattern).
constexpr const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 (cl100k-like): digits in groups of up to three; letters take one leading non-letter.
constexpr const char kLlama3[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)" LLMRT_WS_TAIL;

// Qwen2: as Llama 3 but every digit alone.
constexpr const char kQwen2[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" LLMRT_WS_TAIL;

// Qwen3.5: Qwen2 with combining marks kept in words.
constexpr const char kQwen35[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*)" LLMRT_WS_TAIL;

// Jais 2: Llama 3 with whitespace runs cut into power-of-two lengths.
constexpr const char kJais2[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))"
    R"(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";

// Tekken (Mistral Nemo): words split at lower->upper case changes, every digit alone.
constexpr const char kTekken[] =
    R"([^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "*" LLMRT_LOWER "+"
    R"(|[^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "+" LLMRT_LOWER "*"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" LLMRT_WS_TAIL;

// GPT-4o (o200k): as Tekken but contractions stay on the word and digits go by three.
constexpr const char kGpt4o[] =
    R"([^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "*" LLMRT_LOWER "+" LLMRT_CONTRACTIONS_CI "?"
    R"(|[^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "+" LLMRT_LOWER "*" LLMRT_CONTRACTIONS_CI "?"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" LLMRT_WS_TAIL;

// Youtu: Korean/CJK punctuation/Bopomofo/CJK runs first, then GPT-4o's regex with single digits.
constexpr const char kYoutuCjk[] =
    "[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+"
    "|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}\\x{2019}\\x{2014}\\x{FF1A}\\x{FF1B}\\x{FF0C}"
    "\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+"
    "|[\\x{3105}-\\x{312F}]+|[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
constexpr const char kYoutu[] =
    R"([^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "*" LLMRT_LOWER "+" LLMRT_CONTRACTIONS_CI "?"
    R"(|[^\r\n\p{L}\p{N}]?)" LLMRT_UPPER "+" LLMRT_LOWER "*" LLMRT_CONTRACTIONS_CI "?"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" LLMRT_WS_TAIL;

// Bailing MoE (Ling): Qwen2-like, possessive quantifiers as in its tokenizer.json.
constexpr const char kBailing[] =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)";

// Seed-Coder: Qwen2-like; punctuation runs never take a line break.
constexpr const char kSeedCoder[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+)" LLMRT_WS_TAIL;

// Ufakzeka: Qwen2 without the contractions.
constexpr const char kUfakzeka[] =
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" LLMRT_WS_TAIL;

// EXAONE MoE: words may contain single spaces between letters.
constexpr const char kExaoneMoe[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?)"
    R"(|\s*[\r\n]|\s+(?!\S)|\s+)";

// MiniCPM 5: digits by three first, then Llama 3's regex with whole digit runs.
constexpr const char kMiniCpm5[] = LLMRT_CONTRACTIONS_CI
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*)" LLMRT_WS_TAIL;

// DeepSeek V3 / Spark 2.5: digits by three, CJK runs, then a punctuation-led word regex.
constexpr const char kDeepseekCjk[] =
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
#define LLMRT_DEEPSEEK_WORDS \
  R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)re"
constexpr const char kDeepseekV3Words[] =
    LLMRT_DEEPSEEK_WORDS R"(| ?[\p{P}\p{S}]+[\r\n]*)" LLMRT_WS_TAIL;
constexpr const char kSpark25Words[] =
    LLMRT_DEEPSEEK_WORDS R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";

// DeepSeek LLM / Coder: line breaks alone, then letter runs, punctuation runs, CJK runs, digits.
// The letter class is deepseek-llm's own list of cased-letter ranges.
constexpr const char kDeepseekLlmLetters[] =
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"
    "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"
    "\\x{214E}\\x{2183}-\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}-\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+";
constexpr const char kDeepseekLlmPunct[] =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
constexpr const char kDeepseekLlmCjk[] =
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

// BLOOM: a word is an optional space and a run of anything but whitespace and . , ! ? … 。，、।۔،
// (tokenizer.json writes the class nested, "[^(\s|[.,!?…。，、।۔،])]", which is the same set).
constexpr const char kBloom[] =
    " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+";

// Falcon: contiguous punctuation, then GPT-2's regex, then (after ByteLevel) digit runs and
// groups of three ASCII digits.
constexpr const char kPunctContiguous[] = R"([\p{P}$+<=>^`|~]+)";
constexpr const char kMappedDigits[] = "[0-9\\xB2\\xB3\\xB9\\xBC-\\xBE]+";

// Tiny Aya and SuperBPE: digits by three aligned to the end of the number (see StageKind).
constexpr Stage kTinyAyaDigits{"\\d+", StageKind::kDigitTriplesAtWordEnd};
constexpr Stage kSuperBpeDigits{"\\d+", StageKind::kDigitTriples};

constexpr Stage kDigit{"\\p{N}"};
constexpr Stage kDigitRun{"\\p{N}+"};

struct Family {
  const char* name;
  std::array<Stage, 7> stages;  // ends at the first null pattern
  bool ignore_merges;           // llama.cpp sets ignore_merges for these names
};

const Family kFamilies[] = {
    {"gpt2", {{{kGpt2}}}, false},
    {"llama3", {{{kLlama3}}}, true},
    {"dbrx", {{{kLlama3}}}, false},
    {"jais-2", {{{kJais2}}}, false},
    {"qwen2", {{{kQwen2}}}, false},
    {"qwen35", {{{kQwen35}}}, false},
    {"smollm", {{kDigit, {kGpt2}}}, false},
    {"deepseek-llm",
     {{{"[\\r\\n]"}, {kDeepseekLlmLetters}, {kDeepseekLlmPunct}, {"\\s+$"}, {kDeepseekLlmCjk},
       kDigitRun}},
     false},
    {"deepseek-coder",
     {{{"[\\r\\n]"}, {"\\s?\\p{L}+"}, {"\\s?\\p{P}+"}, {kDeepseekLlmCjk}, kDigit}},
     false},
    {"deepseek-v3", {{{"\\p{N}{1,3}"}, {kDeepseekCjk}, {kDeepseekV3Words}}}, false},
    {"spark2_5", {{{"\\p{N}{1,3}"}, {kDeepseekCjk}, {kSpark25Words}, kDigit}}, false},
    {"youtu", {{{kYoutuCjk}, {kYoutu}}}, true},
    {"falcon",
     {{{kPunctContiguous},
       {kGpt2},
       {kMappedDigits, StageKind::kBytes},
       {"[0-9][0-9][0-9]", StageKind::kBytes}}},
     false},
    {"bloom", {{{kBloom}}}, false},
    {"viking", {{{kBloom}, kDigit}}, false},
    {"tekken", {{{kTekken}}}, true},
    {"chameleon",
     {{{"<sentinel:[0-9]+>"},
       {"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"},
       {"([\\t\\n]|    |  )"},
       kDigit,
       {"[\\p{P}!-/:-@\\[-`{-~]"},
       {kGpt2}}},
     false},
    {"gpt-4o", {{{kGpt4o}}}, false},
    {"tiny_aya", {{kTinyAyaDigits, {kGpt4o}}}, false},
    {"superbpe", {{kDigitRun, kSuperBpeDigits}}, false},
    {"bailingmoe", {{{kBailing}}}, false},
    {"seed-coder", {{{kSeedCoder}}}, false},
    {"ufakzeka", {{{kUfakzeka}}}, false},
    {"exaone-moe", {{{kExaoneMoe}}}, false},
    {"minicpm5", {{{"\\p{N}{1,3}"}, {kMiniCpm5}}}, true},
    {"laguna", {{{"[^\\n]+|[\\n]+"}, {kQwen2}}}, false},
};

// Other names for the families above (GGUF tokenizer.ggml.pre values, as llama.cpp maps them).
struct Alias {
  const char* name;
  const char* family;
};

const Alias kAliases[] = {
    // "default" (and a missing key) is GPT-2 here; llama.cpp's DEFAULT type is an old
    // Falcon-like list instead, which no current converter writes.
    {"gpt-2", "gpt2"}, {"default", "gpt2"}, {"mpt", "gpt2"}, {"olmo", "gpt2"},
    {"jais", "gpt2"}, {"trillion", "gpt2"}, {"granite-docling", "gpt2"}, {"phi-2", "gpt2"},
    {"jina-es", "gpt2"}, {"jina-de", "gpt2"}, {"jina-v2-es", "gpt2"}, {"jina-v2-de", "gpt2"},
    {"jina-v1-en", "gpt2"}, {"jina-v2-code", "gpt2"}, {"roberta-bpe", "gpt2"},
    {"gigachat", "gpt2"}, {"a.x-4.0", "gpt2"}, {"mellum", "gpt2"}, {"modern-bert", "gpt2"},
    {"exaone4", "gpt2"},
    {"llama-bpe", "llama3"}, {"llama-v3", "llama3"}, {"falcon3", "llama3"},
    {"falcon-h1", "llama3"}, {"pixtral", "llama3"}, {"midm-2.0", "llama3"}, {"lfm2", "llama3"},
    {"jina-v5-nano", "llama3"},
    {"smaug-bpe", "dbrx"}, {"glm4", "dbrx"}, {"chatglm-bpe", "dbrx"},
    {"deepseek-r1-qwen", "qwen2"}, {"stablelm2", "qwen2"}, {"hunyuan", "qwen2"},
    {"solar-open", "qwen2"}, {"megrez", "qwen2"}, {"kormo", "qwen2"}, {"f2llmv2", "qwen2"},
    {"grok-2", "qwen2"},
    {"starcoder", "smollm"}, {"refact", "smollm"}, {"command-r", "smollm"},
    {"codeshell", "smollm"}, {"exaone", "smollm"}, {"minerva-7b", "smollm"},
    {"mellum2", "smollm"},
    {"hunyuan-dense", "deepseek-v3"}, {"joyai-llm", "deepseek-v3"}, {"hy_v4", "deepseek-v3"},
    {"gpt3-finnish", "bloom"}, {"poro-chat", "bloom"},
    {"llama4", "gpt-4o"}, {"kanana2", "gpt-4o"}, {"talkie", "gpt-4o"}, {"minimax-m2", "gpt-4o"},
    {"cohere2moe", "tiny_aya"},
    {"bailingmoe2", "bailingmoe"}, {"llada-moe", "bailingmoe"},
};

const Family* find_canonical(std::string_view name) {
  for (const Family& f : kFamilies) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

const Family* find_family(std::string_view name) {
  if (const Family* f = find_canonical(name)) return f;
  for (const Alias& a : kAliases) {
    if (name == a.name) return find_canonical(a.family);
  }
  return nullptr;
}

// Unicode White_Space, as Oniguruma's \s matches it (PCRE2's \s differs at the edges).
constexpr const char kWhiteSpaceItems[] = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";

// Rewrites \s and \S in `pattern` to the White_Space class: outside a character class \s is
// "[items]" and \S "[^items]"; inside one \s adds the items. \S inside a class has no such
// spelling and is refused (no pattern in the table uses it).
StatusOr<std::string> expand_whitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhiteSpaceItems)
                        : "[" + std::string(kWhiteSpaceItems) + "]";
      } else if (next == 'S') {
        if (in_class) return internal_error("pre-tokenizer pattern has \\S inside a class");
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // "[^]...]" and "[]...]": a ']' first in the class is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  StageKind kind = StageKind::kText;
  pcre2_code* word_boundary = nullptr;  // "\b", for kDigitTriplesAtWordEnd
  bool utf() const { return kind != StageKind::kBytes; }
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
    if (word_boundary != nullptr) pcre2_code_free(word_boundary);
  }
};

PreTokenizer::~PreTokenizer() = default;

namespace {

StatusOr<pcre2_code*> compile_pattern(const std::string& family, const std::string& pattern,
                                      uint32_t options) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    return internal_error("pre-tokenizer '" + family + "': regex does not compile at offset " +
                          std::to_string(error_offset) + ": " +
                          reinterpret_cast<const char*>(buffer));
  }
  // JIT is an optimization only: without it pcre2_match interprets.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

}  // namespace

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
    for (const Alias& a : kAliases) {
      if (std::string_view(a.family) != f.name) continue;
      if (!aliases.empty()) aliases += ", ";
      aliases += a.name;
    }
    if (!aliases.empty()) out += " (" + aliases + ")";
  }
  return out;
}

std::vector<std::string> PreTokenizer::all_names() {
  std::vector<std::string> names;
  for (const Family& f : kFamilies) names.emplace_back(f.name);
  for (const Alias& a : kAliases) names.emplace_back(a.name);
  return names;
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
  bool after_bytes = false;
  for (const Stage& stage : family->stages) {
    if (stage.pattern == nullptr) break;
    const bool utf = stage.kind != StageKind::kBytes;
    if (utf && after_bytes) {
      return internal_error("pre-tokenizer '" + pt->name_ +
                            "': a text stage follows a byte stage");
    }
    after_bytes = after_bytes || !utf;
    ASSIGN_OR_RETURN(std::string pattern, expand_whitespace(stage.pattern));
    auto regex = std::make_unique<Regex>();
    regex->kind = stage.kind;
    const uint32_t options = utf ? (PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK) : 0;
    ASSIGN_OR_RETURN(regex->code, compile_pattern(pt->name_, pattern, options));
    if (stage.kind == StageKind::kDigitTriplesAtWordEnd) {
      ASSIGN_OR_RETURN(regex->word_boundary, compile_pattern(pt->name_, "\\b", options));
    }
    pt->stages_.push_back(std::move(regex));
  }
  return pt;
}

namespace {

// Splits `text` by `code`: every match and every non-empty gap between matches is a piece; an
// empty match only ends the gap before it (Hugging Face's Split drops empty pieces).
Status match_at(pcre2_code* code, uint32_t options, pcre2_match_data* md, std::string_view text,
                size_t pos, int* rc) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  *rc = pcre2_match(code, subject, text.size(), pos, options, md, nullptr);
  if (*rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    *rc = pcre2_match(code, subject, text.size(), pos, options | PCRE2_NO_JIT, md, nullptr);
  }
  if (*rc < 0 && *rc != PCRE2_ERROR_NOMATCH) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(*rc, buffer, sizeof(buffer));
    return resource_exhausted(std::string("pre-tokenizer regex failed: ") +
                              reinterpret_cast<const char*>(buffer));
  }
  return ok_status();
}

size_t next_char(std::string_view text, size_t pos) {
  ++pos;
  while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

// The digit-grouping stages (StageKind): each run of \d that `runs` finds is cut into groups of
// three counted from its end. kDigitTriples (a zero-width split before every group of three)
// cuts before each such group only; kDigitTriplesAtWordEnd (matches of one to three digits that
// a whole number of triples and a word boundary follow) cuts at the run's start, between groups
// and at its end, but only when a word boundary follows the run, and otherwise not at all.
Status split_digit_groups(StageKind kind, pcre2_code* runs, pcre2_code* word_boundary,
                          pcre2_match_data* md, std::string_view text,
                          std::vector<std::string_view>* out) {
  const bool at_word_end = kind == StageKind::kDigitTriplesAtWordEnd;
  std::vector<size_t> cuts;
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = 0;
    RETURN_IF_ERROR(match_at(runs, PCRE2_NO_UTF_CHECK, md, text, pos, &rc));
    if (rc == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end <= begin) return internal_error("pre-tokenizer digit run pattern matched empty text");
    pos = end;
    if (at_word_end) {
      RETURN_IF_ERROR(match_at(word_boundary, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, md, text, end,
                               &rc));
      if (rc == PCRE2_ERROR_NOMATCH) continue;
    }
    std::vector<size_t> starts;  // byte offset of each digit of the run
    for (size_t p = begin; p < end; p = next_char(text, p)) starts.push_back(p);
    const size_t n = starts.size();
    for (size_t i = 0; i < n; ++i) {
      if ((n - i) % 3 == 0 || (i == 0 && at_word_end)) {
        cuts.push_back(starts[i]);
      }
    }
    if (at_word_end) cuts.push_back(end);
  }
  size_t from = 0;
  for (size_t cut : cuts) {
    if (cut > from) out->push_back(text.substr(from, cut - from));
    from = cut;
  }
  if (from < text.size()) out->push_back(text.substr(from));
  return ok_status();
}

Status split_one(pcre2_code* code, bool utf, pcre2_match_data* md, std::string_view text,
                 std::vector<std::string_view>* out) {
  const uint32_t match_options = utf ? PCRE2_NO_UTF_CHECK : 0;
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos < text.size()) {
    int rc = 0;
    RETURN_IF_ERROR(match_at(code, match_options, md, text, pos, &rc));
    if (rc == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end <= begin) {
      // A zero-width match (a lookahead-only pattern) is a boundary; step one character on.
      if (begin > gap_start) {
        out->push_back(text.substr(gap_start, begin - gap_start));
        gap_start = begin;
      }
      pos = utf ? next_char(text, begin) : begin + 1;
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
    const Regex& stage = *stages_[s];
    const bool digit_groups = stage.kind == StageKind::kDigitTriples ||
                              stage.kind == StageKind::kDigitTriplesAtWordEnd;
    for (std::string_view piece : current) {
      RETURN_IF_ERROR(digit_groups ? split_digit_groups(stage.kind, stage.code,
                                                        stage.word_boundary, md.md, piece, target)
                                   : split_one(stage.code, stage.utf(), md.md, piece, target));
    }
    if (target == &next) {
      current.swap(next);
      next.clear();
    }
  }
  return ok_status();
}

}  // namespace llmrt

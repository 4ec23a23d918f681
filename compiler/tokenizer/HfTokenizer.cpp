//===- HfTokenizer.cpp - Hugging Face tokenizer.json reader ---------------===//

#include "compiler/tokenizer/HfTokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

using json = nlohmann::json;
using llmrt::Status;
using llmrt::StatusOr;
using llmrt::TokenizerData;
using llmrt::TokenType;

namespace llmc {
namespace {

/// Split regexes of the byte-level families, exactly as tokenizer.json spells them.
struct KnownRegex {
  const char *pre;
  const char *regex;
};
const KnownRegex kKnownRegexes[] = {
    {"llama3",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"gpt2",
     R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
};

/// Largest token id accepted: far above any real vocabulary, small enough that a hostile file
/// cannot make us allocate gigabytes.
constexpr int64_t kMaxTokenId = 1 << 24;

std::string truncated(const json &j, size_t max = 200) {
  std::string s = j.dump();
  if (s.size() > max)
    s = s.substr(0, max) + "...";
  return s;
}

std::string typeOf(const json &j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string())
    return j["type"].get<std::string>();
  return "";
}

bool boolField(const json &obj, const char *key, bool dflt) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return dflt;
  return obj[key].is_boolean() ? obj[key].get<bool>() : dflt;
}

/// A token in tokenizer_config.json: a string, an AddedToken object {"content": ...}, or null.
std::optional<std::string> configToken(const json &config, const char *key) {
  if (!config.is_object() || !config.contains(key))
    return std::nullopt;
  const json &v = config[key];
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

Status unsupportedPre(const json &pre, const std::string &why) {
  return llmrt::unimplemented("unsupported pre_tokenizer (" + why + "): " + truncated(pre) +
                              "; supported: ByteLevel(use_regex), Split(Llama 3 or Qwen2 "
                              "regex)+ByteLevel, Digits(individual_digits)+ByteLevel(use_regex)");
}

Status checkByteLevel(const json &bl, bool wantRegex, const json &whole) {
  if (boolField(bl, "add_prefix_space", true))
    return unsupportedPre(whole, "ByteLevel add_prefix_space=true");
  if (boolField(bl, "use_regex", true) != wantRegex)
    return unsupportedPre(whole, wantRegex ? "ByteLevel without its regex"
                                           : "ByteLevel regex after a Split");
  return Status();
}

/// Maps the pre_tokenizer JSON to the runtime's pre-tokenizer name.
StatusOr<std::string> mapPreTokenizer(const json &pre) {
  std::string type = typeOf(pre);
  if (type == "ByteLevel") {
    Status st = checkByteLevel(pre, /*wantRegex=*/true, pre);
    if (!st.ok())
      return st;
    return std::string("gpt2");
  }
  if (type != "Sequence" || !pre.contains("pretokenizers") ||
      !pre["pretokenizers"].is_array() || pre["pretokenizers"].size() != 2)
    return unsupportedPre(pre, type.empty() ? "no type" : "type " + type);
  const json &first = pre["pretokenizers"][0];
  const json &second = pre["pretokenizers"][1];
  if (typeOf(second) != "ByteLevel")
    return unsupportedPre(pre, "second step is not ByteLevel");
  if (typeOf(first) == "Digits") {
    if (!boolField(first, "individual_digits", false))
      return unsupportedPre(pre, "Digits without individual_digits");
    Status st = checkByteLevel(second, /*wantRegex=*/true, pre);
    if (!st.ok())
      return st;
    return std::string("smollm");
  }
  if (typeOf(first) != "Split")
    return unsupportedPre(pre, "first step is " + typeOf(first));
  Status st = checkByteLevel(second, /*wantRegex=*/false, pre);
  if (!st.ok())
    return st;
  const json &pattern = first.value("pattern", json());
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
    return unsupportedPre(pre, "Split without a Regex pattern");
  if (first.value("behavior", json()) != json("Isolated") || boolField(first, "invert", false))
    return unsupportedPre(pre, "Split behavior other than Isolated");
  std::string regex = pattern["Regex"].get<std::string>();
  for (const KnownRegex &k : kKnownRegexes)
    if (regex == k.regex)
      return std::string(k.pre);
  return unsupportedPre(pre, "Split regex not in the supported table");
}

/// True when the normalizer / pre-tokenizer / model say SentencePiece-style BPE ("▁" spaces).
bool isSentencePieceStyle(const json &root, const json &model) {
  if (boolField(model, "byte_fallback", false))
    return true;
  auto mentionsMetaspace = [](const json &j) {
    std::string s = j.dump();
    return s.find("Metaspace") != std::string::npos ||
           s.find("\xE2\x96\x81") != std::string::npos ||  // "▁" (U+2581) as UTF-8
           s.find("\\u2581") != std::string::npos;
  };
  return mentionsMetaspace(root.value("normalizer", json())) ||
         mentionsMetaspace(root.value("pre_tokenizer", json()));
}

constexpr const char *kMetaspace = "\xE2\x96\x81"; // "▁" (U+2581)

/// "<0xNN>" with two upper-case hex digits.
bool isByteToken(const std::string &s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

/// Flattens a Sequence (key `listKey`) into its steps; a lone step is a sequence of one.
std::vector<json> steps(const json &j, const char *listKey) {
  if (j.is_null())
    return {};
  if (typeOf(j) == "Sequence" && j.contains(listKey) && j[listKey].is_array())
    return std::vector<json>(j[listKey].begin(), j[listKey].end());
  return {j};
}

bool isStringPattern(const json &step, const std::string &pattern, const std::string &content) {
  return step.contains("pattern") && step["pattern"].is_object() &&
         step["pattern"].value("String", json()) == json(pattern) &&
         step.value("content", json()) == json(content);
}

Status unsupportedSpm(const char *what, const json &j) {
  return llmrt::unimplemented(
      std::string("unsupported ") + what + " for SentencePiece-style BPE: " + truncated(j) +
      "; supported: normalizers Prepend(\"\xE2\x96\x81\") + Replace(\" \", \"\xE2\x96\x81\") "
      "or Replace alone, or pre_tokenizer Metaspace; decoders Replace/ByteFallback/Fuse/Strip or "
      "Metaspace");
}

/// Maps normalizer + pre_tokenizer + decoder of a SentencePiece-style tokenizer.json to the
/// runtime's variant name (runtime/tokenizer/spm.h).
StatusOr<std::string> mapSentencePiece(const json &root, const json &model) {
  if (!boolField(model, "byte_fallback", false))
    return llmrt::unimplemented(
        "SentencePiece-style BPE without byte_fallback is not supported");
  const json &norm = root.value("normalizer", json());
  const json &pre = root.value("pre_tokenizer", json());
  bool prepend = false, replace = false;
  for (const json &step : steps(norm, "normalizers")) {
    std::string t = typeOf(step);
    if (t == "Prepend" && step.value("prepend", json()) == json(kMetaspace) && !prepend)
      prepend = true;
    else if (t == "Replace" && isStringPattern(step, " ", kMetaspace) && !replace)
      replace = true;
    else
      return unsupportedSpm("normalizer", norm);
  }
  std::string name;
  std::vector<json> preSteps = steps(pre, "pretokenizers");
  if (preSteps.empty()) {
    if (!replace)
      return unsupportedSpm("normalizer (no Replace(\" \", \"\xE2\x96\x81\"))", norm);
    name = prepend ? "spm" : "spm-no-prefix";
  } else {
    const json &m = preSteps[0];
    if (preSteps.size() != 1 || typeOf(m) != "Metaspace" || prepend || replace)
      return unsupportedSpm("pre_tokenizer", pre);
    if (m.value("replacement", json(kMetaspace)) != json(kMetaspace))
      return unsupportedSpm("Metaspace replacement", pre);
    std::string scheme = boolField(m, "add_prefix_space", true) ? "always" : "never";
    if (m.contains("prepend_scheme") && m["prepend_scheme"].is_string())
      scheme = m["prepend_scheme"].get<std::string>();
    if (scheme != "always" && scheme != "first" && scheme != "never")
      return unsupportedSpm("Metaspace prepend_scheme", pre);
    name = "spm-metaspace-" + scheme;
    if (boolField(m, "split", true))
      name += "-split";
  }
  // The decoder must undo exactly that: "▁" → " ", byte tokens → bytes, and one leading space
  // dropped iff a "▁" is prepended (the runtime's rule).
  const bool prefixed = name != "spm-no-prefix" && name.rfind("spm-metaspace-never", 0) != 0;
  const json &dec = root.value("decoder", json());
  bool strips = false, replaces = false;
  for (const json &step : steps(dec, "decoders")) {
    std::string t = typeOf(step);
    if (t == "Replace" && isStringPattern(step, kMetaspace, " ")) {
      replaces = true;
    } else if (t == "ByteFallback" || t == "Fuse") {
    } else if (t == "Strip" && step.value("content", json()) == json(" ") &&
               step.value("start", json()) == json(1) && step.value("stop", json()) == json(0)) {
      strips = true;
    } else if (t == "Metaspace" && step.value("replacement", json(kMetaspace)) ==
                                       json(kMetaspace)) {
      replaces = true;
      std::string scheme = boolField(step, "add_prefix_space", true) ? "always" : "never";
      if (step.contains("prepend_scheme") && step["prepend_scheme"].is_string())
        scheme = step["prepend_scheme"].get<std::string>();
      strips = scheme != "never";
    } else {
      return unsupportedSpm("decoder", dec);
    }
  }
  if (!dec.is_null() && (!replaces || strips != prefixed))
    return unsupportedSpm(prefixed ? "decoder (expected a leading-space Strip)"
                                   : "decoder (unexpected leading-space Strip)",
                          dec);
  return name;
}

/// Special tokens the post-processor wraps a single sequence in: (leading, trailing).
std::pair<std::optional<std::string>, std::optional<std::string>>
templateSpecials(const json &post) {
  std::pair<std::optional<std::string>, std::optional<std::string>> out;
  if (typeOf(post) == "Sequence" && post.contains("processors") &&
      post["processors"].is_array()) {
    for (const json &p : post["processors"])
      if (typeOf(p) == "TemplateProcessing")
        return templateSpecials(p);
    return out;
  }
  if (typeOf(post) != "TemplateProcessing" || !post.contains("single") ||
      !post["single"].is_array())
    return out;
  bool seenSequence = false;
  for (const json &piece : post["single"]) {
    if (!piece.is_object())
      continue;
    if (piece.contains("Sequence")) {
      seenSequence = true;
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
               piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string()) {
      std::string id = piece["SpecialToken"]["id"].get<std::string>();
      (seenSequence ? out.second : out.first) = id;
    }
  }
  return out;
}

StatusOr<TokenizerData> parseImpl(const json &root, const json &config) {
  if (!root.is_object())
    return llmrt::invalid_argument("top level is not a JSON object");
  if (!root.contains("model") || !root["model"].is_object())
    return llmrt::invalid_argument("missing \"model\" object");
  const json &model = root["model"];
  std::string modelType = typeOf(model);
  if (modelType.empty() && model.contains("merges"))
    modelType = "BPE";  // old files omit the type
  if (modelType != "BPE")
    return llmrt::unimplemented("tokenizer model type '" + modelType +
                                "' is not supported (supported: BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    return llmrt::unimplemented("BPE dropout is not supported");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      return llmrt::unimplemented(std::string("BPE ") + key + " is not supported");
  }

  TokenizerData data;
  data.model = "bpe";
  data.ignore_merges = boolField(model, "ignore_merges", false);

  // --- vocabulary: model.vocab plus added_tokens ---
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return llmrt::invalid_argument("model.vocab is missing or not an object");
  std::map<int64_t, std::pair<std::string, TokenType>> byId;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      return llmrt::invalid_argument("model.vocab['" + it.key() + "'] is not an integer id");
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxTokenId)
      return llmrt::invalid_argument("model.vocab['" + it.key() + "'] has id " +
                                     std::to_string(id) + " out of range [0, " +
                                     std::to_string(kMaxTokenId) + "]");
    auto [pos, inserted] = byId.emplace(id, std::make_pair(it.key(), TokenType::kNormal));
    if (!inserted)
      return llmrt::invalid_argument("model.vocab: id " + std::to_string(id) +
                                     " is used by both '" + pos->second.first + "' and '" +
                                     it.key() + "'");
  }
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array())
      return llmrt::invalid_argument("added_tokens is not an array");
    size_t index = 0;
    for (const json &tok : root["added_tokens"]) {
      std::string where = "added_tokens[" + std::to_string(index++) + "]";
      if (!tok.is_object() || !tok.contains("id") || !tok["id"].is_number_integer() ||
          !tok.contains("content") || !tok["content"].is_string())
        return llmrt::invalid_argument(where + " needs an integer \"id\" and a string \"content\"");
      int64_t id = tok["id"].get<int64_t>();
      if (id < 0 || id > kMaxTokenId)
        return llmrt::invalid_argument(where + " has id " + std::to_string(id) + " out of range");
      std::string content = tok["content"].get<std::string>();
      if (content.empty())
        return llmrt::invalid_argument(where + " has empty content");
      // Added tokens are matched verbatim: their stored text is the raw content.
      TokenType type = boolField(tok, "special", false) ? TokenType::kControl
                                                        : TokenType::kUserDefined;
      byId[id] = {content, type};
    }
  }
  if (byId.empty())
    return llmrt::invalid_argument("the vocabulary is empty");
  int64_t size = byId.rbegin()->first + 1;
  if (size > 2 * static_cast<int64_t>(byId.size()) + 1024)
    return llmrt::invalid_argument("token ids are sparse: largest id " +
                                   std::to_string(size - 1) + " for " +
                                   std::to_string(byId.size()) + " tokens");
  data.tokens.assign(size, std::string());
  data.token_types.assign(size, static_cast<int32_t>(TokenType::kUnused));
  std::unordered_map<std::string, int32_t> idOf;
  for (auto &[id, entry] : byId) {
    data.tokens[id] = entry.first;
    data.token_types[id] = static_cast<int32_t>(entry.second);
  }
  // Lookup by text for the special-token names: added (raw) spellings win over vocab ones.
  for (auto &[id, entry] : byId)
    if (entry.second == TokenType::kNormal)
      idOf.emplace(entry.first, static_cast<int32_t>(id));
  for (auto &[id, entry] : byId)
    if (entry.second != TokenType::kNormal)
      idOf[entry.first] = static_cast<int32_t>(id);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = idOf.find(model["unk_token"].get<std::string>());
    if (it != idOf.end() && data.token_types[it->second] == static_cast<int32_t>(TokenType::kNormal))
      data.token_types[it->second] = static_cast<int32_t>(TokenType::kUnknown);
  }

  // --- merges: "a b" strings or [a, b] pairs ---
  if (!model.contains("merges") || !model["merges"].is_array())
    return llmrt::invalid_argument("model.merges is missing or not an array");
  data.merges.reserve(model["merges"].size());
  size_t rank = 0;
  for (const json &m : model["merges"]) {
    if (m.is_string()) {
      data.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        return llmrt::unimplemented("model.merges[" + std::to_string(rank) +
                                    "] has a token containing a space");
      data.merges.push_back(a + " " + b);
    } else {
      return llmrt::invalid_argument("model.merges[" + std::to_string(rank) +
                                     "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    ++rank;
  }

  // --- normalizer and pre-tokenizer ---
  if (isSentencePieceStyle(root, model)) {
    data.byte_level = false;
    StatusOr<std::string> name = mapSentencePiece(root, model);
    if (!name.ok())
      return name.status();
    data.pre = *name;
    // "<0xNN>" tokens are the byte-fallback tokens.
    for (size_t id = 0; id < data.tokens.size(); ++id)
      if (data.token_types[id] == static_cast<int32_t>(TokenType::kNormal) &&
          isByteToken(data.tokens[id]))
        data.token_types[id] = static_cast<int32_t>(TokenType::kByte);
  } else {
    data.byte_level = true;
    const json &norm = root.value("normalizer", json());
    if (!norm.is_null()) {
      std::string t = typeOf(norm);
      if (t == "NFC")
        data.normalizer = "nfc";
      else
        return llmrt::unimplemented("unsupported normalizer: " + truncated(norm) +
                                    " (supported: none, NFC)");
    }
    const json &pre = root.value("pre_tokenizer", json());
    if (pre.is_null())
      return llmrt::unimplemented("byte-level BPE without a pre_tokenizer is not supported");
    StatusOr<std::string> name = mapPreTokenizer(pre);
    if (!name.ok())
      return name.status();
    data.pre = *name;
  }

  // --- special ids, add_bos/add_eos, chat template ---
  auto lookup = [&](const std::string &text, const char *what) -> StatusOr<int32_t> {
    auto it = idOf.find(text);
    if (it == idOf.end())
      return llmrt::invalid_argument(std::string(what) + " '" + text +
                                     "' is not a token of the vocabulary");
    return it->second;
  };
  auto [lead, trail] = templateSpecials(root.value("post_processor", json()));
  if (lead) {
    StatusOr<int32_t> id = lookup(*lead, "post_processor special token");
    if (!id.ok())
      return id.status();
    data.bos_id = *id;
    data.add_bos = true;
  }
  if (trail) {
    StatusOr<int32_t> id = lookup(*trail, "post_processor special token");
    if (!id.ok())
      return id.status();
    data.eos_id = *id;
    data.add_eos = true;
  }
  if (!config.is_null()) {
    if (!config.is_object())
      return llmrt::invalid_argument("tokenizer_config.json: top level is not a JSON object");
    struct {
      const char *key;
      int32_t *id;
    } specials[] = {{"bos_token", &data.bos_id}, {"eos_token", &data.eos_id},
                    {"pad_token", &data.pad_id}};
    for (auto &s : specials) {
      if (std::optional<std::string> text = configToken(config, s.key)) {
        StatusOr<int32_t> id = lookup(*text, s.key);
        if (!id.ok())
          return id.status().with_context("tokenizer_config.json");
        *s.id = *id;
      }
    }
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      data.add_bos = config["add_bos_token"].get<bool>();
    if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean())
      data.add_eos = config["add_eos_token"].get<bool>();
    if (config.contains("chat_template")) {
      const json &ct = config["chat_template"];
      if (ct.is_string()) {
        data.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json &e : ct)
          if (e.is_object() && e.value("name", json()) == json("default") &&
              e.contains("template") && e["template"].is_string())
            data.chat_template = e["template"].get<std::string>();
      } else if (!ct.is_null()) {
        return llmrt::invalid_argument("tokenizer_config.json: chat_template is not a string");
      }
    }
  }
  if (data.add_bos && data.bos_id < 0)
    return llmrt::invalid_argument("add_bos_token is set but there is no bos_token");
  if (data.add_eos && data.eos_id < 0)
    return llmrt::invalid_argument("add_eos_token is set but there is no eos_token");
  return data;
}

StatusOr<json> parseJson(std::string_view text, const std::string &what) {
  json j = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to get the position for the message.
    try {
      json again = json::parse(text.begin(), text.end());
      (void)again;
    } catch (const json::exception &e) {
      return llmrt::invalid_argument(what + " is not valid JSON: " + e.what());
    }
    return llmrt::invalid_argument(what + " is not valid JSON");
  }
  return j;
}

} // namespace

StatusOr<TokenizerData> parseHfTokenizer(std::string_view tokenizerJson,
                                         std::string_view configJson,
                                         const std::string &nameForErrors) {
  try {
    StatusOr<json> root = parseJson(tokenizerJson, "tokenizer.json");
    if (!root.ok())
      return root.status().with_context(nameForErrors);
    json config;
    if (!configJson.empty()) {
      StatusOr<json> c = parseJson(configJson, "tokenizer_config.json");
      if (!c.ok())
        return c.status().with_context(nameForErrors);
      config = std::move(*c);
    }
    StatusOr<TokenizerData> data = parseImpl(*root, config);
    if (!data.ok())
      return data.status().with_context(nameForErrors);
    return data;
  } catch (const std::exception &e) {
    // Every access above is type-checked first; this is a backstop for hostile input.
    return llmrt::invalid_argument(nameForErrors + ": malformed tokenizer: " + e.what());
  }
}

StatusOr<TokenizerData> loadHfTokenizer(const std::string &tokenizerJsonPath) {
  auto readAll = [](const std::string &path, std::string *out) {
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return !f.bad();
  };
  std::string text;
  if (!readAll(tokenizerJsonPath, &text))
    return llmrt::not_found("cannot read " + tokenizerJsonPath);
  std::string dir = ".";
  if (size_t slash = tokenizerJsonPath.rfind('/'); slash != std::string::npos)
    dir = tokenizerJsonPath.substr(0, slash);
  std::string config;
  std::string configPath = dir + "/tokenizer_config.json";
  if (std::ifstream(configPath).good() && !readAll(configPath, &config))
    return llmrt::not_found("cannot read " + configPath);
  return parseHfTokenizer(text, config, tokenizerJsonPath);
}

} // namespace llmc

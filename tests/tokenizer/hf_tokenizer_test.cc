// llmc::loadHfTokenizer: real tokenizer.json files (Llama 3, Qwen3, Llama 2) against the GGUF
// test vectors of the same vocabularies, and malformed input → clear errors.
#include "compiler/tokenizer/HfTokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llmc {
namespace {

using llmrt::StatusCode;
using llmrt::Tokenizer;
using llmrt::TokenizerData;
using llmrt::TokenType;
using llmrt::testing::data_dir;

std::string idsToString(const std::vector<int32_t> &ids) {
  std::string s;
  for (int32_t id : ids)
    s += " " + std::to_string(id);
  return s;
}

void expectVectors(const Tokenizer &t, const std::string &ggufName) {
  auto cases = llmrt::testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-" +
                                                ggufName + ".gguf");
  ASSERT_EQ(cases.size(), 46u);
  for (const auto &c : cases) {
    auto ids = t.encode(c.text, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(c.ids)) << "text: '" << c.text << "'";
    EXPECT_EQ(t.decode(*ids), c.text);
  }
}

/// Reference ids from Hugging Face tokenizers (gen_hf_reference.py), parse_special on.
void expectHfReference(const Tokenizer &t, const std::string &name) {
  auto cases =
      llmrt::testing::read_vocab_cases(std::string(LLMC_TOKENIZER_TEST_DIR) + "/" + name + "_hf");
  ASSERT_GT(cases.size(), 50u);
  for (const auto &c : cases) {
    auto ids = t.encode(c.text, /*add_special=*/false, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(c.ids)) << name << " text: '" << c.text << "'";
  }
}

TEST(HfTokenizer, Llama3) {
  auto data = loadHfTokenizer(data_dir() + "/hf/llama3/tokenizer.json");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->pre, "llama3");
  EXPECT_TRUE(data->byte_level);
  EXPECT_TRUE(data->ignore_merges);
  EXPECT_EQ(data->normalizer, "");
  ASSERT_EQ(data->tokens.size(), 128256u);
  EXPECT_EQ(data->merges.size(), 280147u);
  EXPECT_EQ(data->bos_id, 128000);
  EXPECT_EQ(data->eos_id, 128001);
  EXPECT_FALSE(data->add_bos);  // this file's post_processor is ByteLevel, not a template
  EXPECT_EQ(data->tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(data->token_types[128000], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(data->token_types[9906], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_NE(data->chat_template.find("start_header_id"), std::string::npos);

  // Same vocabulary and merges as llama.cpp's llama-bpe GGUF.
  llmrt::testing::MiniGguf gguf;
  TokenizerData ref;
  ASSERT_TRUE(gguf.load(data_dir() + "/gguf-vocab/ggml-vocab-llama-bpe.gguf"));
  ASSERT_TRUE(gguf.tokenizer_data(&ref));
  EXPECT_TRUE(data->tokens == ref.tokens);
  EXPECT_TRUE(data->merges == ref.merges);
  EXPECT_TRUE(data->token_types == ref.token_types);

  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  expectVectors(**t, "llama-bpe");
  expectHfReference(**t, "llama3");
}

TEST(HfTokenizer, Qwen3) {
  auto data = loadHfTokenizer(data_dir() + "/hf/qwen3/tokenizer.json");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->pre, "qwen2");
  EXPECT_EQ(data->normalizer, "nfc");
  EXPECT_FALSE(data->ignore_merges);
  ASSERT_EQ(data->tokens.size(), 151669u);
  EXPECT_EQ(data->bos_id, -1);
  EXPECT_EQ(data->eos_id, 151645);  // <|im_end|> per tokenizer_config.json
  EXPECT_EQ(data->pad_id, 151643);
  EXPECT_FALSE(data->add_bos);
  EXPECT_EQ(data->tokens[151667], "<think>");
  EXPECT_EQ(data->token_types[151667], static_cast<int32_t>(TokenType::kUserDefined));
  EXPECT_EQ(data->token_types[151644], static_cast<int32_t>(TokenType::kControl));
  EXPECT_FALSE(data->chat_template.empty());

  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  expectVectors(**t, "qwen2");
  expectHfReference(**t, "qwen3");  // includes text that NFC changes
  // Non-special added tokens are split out even without parse_special.
  auto ids = (*t)->encode("a<think>b", false, /*parse_special=*/false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(idsToString(*ids), " 64 151667 65");
}

// SentencePiece-style BPE: hf/llama2/tokenizer.json (Prepend + Replace normalizers, byte
// fallback, Replace/ByteFallback/Fuse/Strip decoder; its vocabulary is Mistral's 32000 pieces,
// not the llama-spm GGUF's). References from Hugging Face tokenizers: gen_spm_reference.py.
std::string testFile(const std::string &name) {
  return std::string(LLMC_TOKENIZER_TEST_DIR) + "/" + name;
}

bool containsAny(const std::string &s, std::initializer_list<const char *> needles) {
  for (const char *n : needles)
    if (s.find(n) != std::string::npos)
      return true;
  return false;
}

TEST(HfTokenizer, Llama2SentencePieceMatchesHuggingFace) {
  auto data = loadHfTokenizer(data_dir() + "/hf/llama2/tokenizer.json");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_FALSE(data->byte_level);
  EXPECT_EQ(data->pre, "spm");
  EXPECT_EQ(data->bos_id, 1);
  EXPECT_EQ(data->eos_id, 2);
  EXPECT_TRUE(data->add_bos);
  EXPECT_FALSE(data->add_eos);
  EXPECT_EQ(data->merges.size(), 58980u);
  EXPECT_TRUE(data->scores.empty());
  EXPECT_EQ(data->token_types[0], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(data->tokens[3], "<0x00>");
  EXPECT_EQ(data->token_types[3], static_cast<int32_t>(TokenType::kByte));
  EXPECT_EQ(data->token_types[258], static_cast<int32_t>(TokenType::kByte));
  EXPECT_EQ(data->token_types[259], static_cast<int32_t>(TokenType::kNormal));
  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();

  auto plain = llmrt::testing::read_cases(testFile("llama2_hf.inp"), testFile("llama2_hf.out"));
  auto bos = llmrt::testing::read_cases(testFile("llama2_hf.inp"), testFile("llama2_hf_bos.out"));
  ASSERT_GT(plain.size(), 80u);
  ASSERT_EQ(plain.size(), bos.size());
  int lossless = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const std::string &text = plain[i].text;
    auto ids = (*t)->encode(text, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(plain[i].ids)) << "text: '" << text << "'";
    auto withBos = (*t)->encode(text, /*add_special=*/true);
    ASSERT_TRUE(withBos.ok());
    EXPECT_EQ(idsToString(*withBos), idsToString(bos[i].ids)) << "text: '" << text << "'";
    // Lossless unless the text holds special-token spellings (they get their own "▁" prefix
    // after them) or a literal "▁".
    if (!containsAny(text, {"<s>", "</s>", "<unk>", "\xE2\x96\x81"})) {
      EXPECT_EQ((*t)->decode(*ids), text);
      ++lossless;
    }
  }
  EXPECT_GT(lossless, 70);

  for (bool skip : {false, true}) {
    std::string base = skip ? "llama2_hf_decode_skip" : "llama2_hf_decode";
    auto cases = llmrt::testing::read_cases(testFile(base + ".inp"), testFile(base + ".out"));
    ASSERT_EQ(cases.size(), plain.size());
    for (const auto &c : cases) {
      EXPECT_EQ((*t)->decode(c.ids, skip), c.text) << base;
      llmrt::StreamingDecoder dec(**t, skip);
      std::string streamed;
      for (int32_t id : c.ids)
        streamed += dec.push(id);
      streamed += dec.flush();
      EXPECT_EQ(streamed, c.text) << base;
    }
  }
}

/// hf/llama2/tokenizer.json with the normalizer replaced by a Metaspace pre-tokenizer (and a
/// matching Metaspace decoder), as gen_spm_reference.py does.
std::string metaspaceVariant(const std::string &scheme, bool split) {
  std::string text;
  EXPECT_TRUE(llmrt::testing::read_file(data_dir() + "/hf/llama2/tokenizer.json", &text));
  nlohmann::json j = nlohmann::json::parse(text);
  nlohmann::json pre = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", scheme},
                        {"split", split}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre;
  j["decoder"] = pre;
  return j.dump();
}

TEST(HfTokenizer, MetaspaceVariantsMatchHuggingFace) {
  struct Variant {
    const char *scheme;
    bool split;
    const char *pre;
    const char *fixture;
  } variants[] = {{"first", false, "spm-metaspace-first", "spm_metaspace_first.out"},
                  {"always", true, "spm-metaspace-always-split", "spm_metaspace_always_split.out"}};
  for (const Variant &v : variants) {
    auto data = parseHfTokenizer(metaspaceVariant(v.scheme, v.split), "", "metaspace");
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    EXPECT_EQ(data->pre, v.pre);
    auto t = Tokenizer::create(*data);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto cases = llmrt::testing::read_cases(testFile("llama2_hf.inp"), testFile(v.fixture));
    ASSERT_GT(cases.size(), 80u);
    for (const auto &c : cases) {
      auto ids = (*t)->encode(c.text, /*add_special=*/false);
      ASSERT_TRUE(ids.ok()) << ids.status().to_string();
      EXPECT_EQ(idsToString(*ids), idsToString(c.ids)) << v.pre << " text: '" << c.text << "'";
    }
  }
}

TEST(HfTokenizer, SentencePieceUnsupportedStructureIsAnError) {
  std::string text;
  ASSERT_TRUE(llmrt::testing::read_file(data_dir() + "/hf/llama2/tokenizer.json", &text));
  auto expectUnimplemented = [](const nlohmann::json &j, const std::string &needle) {
    auto d = parseHfTokenizer(j.dump(), "", "llama2");
    ASSERT_FALSE(d.ok()) << needle;
    EXPECT_EQ(d.status().code(), StatusCode::kUnimplemented) << d.status().to_string();
    EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status().to_string();
  };
  nlohmann::json base = nlohmann::json::parse(text);
  nlohmann::json j = base;
  j["normalizer"]["normalizers"].push_back({{"type", "NFKC"}});
  expectUnimplemented(j, "unsupported normalizer");
  j = base;
  j["model"]["byte_fallback"] = false;
  expectUnimplemented(j, "without byte_fallback");
  j = base;
  j["decoder"]["decoders"].erase(3);  // no Strip while a "▁" is prepended
  expectUnimplemented(j, "decoder");
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expectUnimplemented(j, "pre_tokenizer");
}

// A small byte-level tokenizer.json: bytes "a".."d", "ab", "cd"; structure varied per test.
std::string miniJson(const std::string &preTokenizer, const std::string &extra = "") {
  return R"({"added_tokens":[{"id":6,"content":"<s>","special":true}],)"
         R"("normalizer":null,"pre_tokenizer":)" +
         preTokenizer + extra +
         R"(,"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"d":3,"ab":4,"cd":5},)"
         R"("merges":["a b",["c","d"]]}})";
}

const char *kByteLevel = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";

TEST(HfTokenizer, StructureMapsToNamedPreTokenizer) {
  auto d = parseHfTokenizer(miniJson(kByteLevel), "", "mini");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->pre, "gpt2");
  EXPECT_EQ(d->merges, (std::vector<std::string>{"a b", "c d"}));
  EXPECT_EQ(d->tokens.size(), 7u);
  EXPECT_EQ(d->token_types[6], static_cast<int32_t>(TokenType::kControl));

  d = parseHfTokenizer(
      miniJson(R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)" +
               std::string(kByteLevel) + "]}"),
      "", "mini");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->pre, "smollm");

  // Post-processor template → add_bos; config overrides and supplies the chat template.
  d = parseHfTokenizer(
      miniJson(kByteLevel,
               R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]})"),
      R"({"bos_token":{"content":"<s>"},"eos_token":"<s>","chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}]})",
      "mini");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d->add_bos);
  EXPECT_EQ(d->bos_id, 6);
  EXPECT_EQ(d->eos_id, 6);
  EXPECT_EQ(d->chat_template, "D");
  auto t = Tokenizer::create(*d);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode("abcd");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{6, 4, 5}));
}

struct BadCase {
  const char *name;
  std::string json;
  std::string config;
  StatusCode code;
  const char *needle;
};

TEST(HfTokenizer, MalformedInputGivesClearErrors) {
  const std::string ok = miniJson(kByteLevel);
  std::vector<BadCase> cases = {
      {"not json", "{\"model\": ", "", StatusCode::kInvalidArgument, "not valid JSON"},
      {"array", "[1,2]", "", StatusCode::kInvalidArgument, "not a JSON object"},
      {"no model", "{}", "", StatusCode::kInvalidArgument, "\"model\""},
      {"unigram", R"({"model":{"type":"Unigram","vocab":[]}})", "", StatusCode::kUnimplemented,
       "'Unigram'"},
      {"vocab id string",
       R"({"pre_tokenizer":null,"model":{"type":"BPE","vocab":{"a":"0"},"merges":[]}})", "",
       StatusCode::kInvalidArgument, "model.vocab['a']"},
      {"duplicate id",
       R"({"model":{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}})", "",
       StatusCode::kInvalidArgument, "id 0 is used by both"},
      {"huge id", R"({"model":{"type":"BPE","vocab":{"a":4000000000},"merges":[]}})", "",
       StatusCode::kInvalidArgument, "out of range"},
      {"sparse ids", R"({"model":{"type":"BPE","vocab":{"a":0,"b":100000},"merges":[]}})", "",
       StatusCode::kInvalidArgument, "sparse"},
      {"bad merge", R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[7]}})", "",
       StatusCode::kInvalidArgument, "model.merges[0]"},
      {"bad added token",
       R"({"added_tokens":[{"id":"x"}],"model":{"type":"BPE","vocab":{"a":0},"merges":[]}})", "",
       StatusCode::kInvalidArgument, "added_tokens[0]"},
      {"unknown regex",
       miniJson(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\d+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})"),
       "", StatusCode::kUnimplemented, "Split regex not in the supported table"},
      {"prefix space", miniJson(R"({"type":"ByteLevel","add_prefix_space":true})"), "",
       StatusCode::kUnimplemented, "add_prefix_space"},
      {"normalizer", miniJson(kByteLevel, R"(,"normalizer":{"type":"NFKC"})"), "",
       StatusCode::kUnimplemented, "NFKC"},
      {"config bos unknown", ok, R"({"bos_token":"<nope>"})", StatusCode::kInvalidArgument,
       "bos_token '<nope>'"},
      {"config not json", ok, "{", StatusCode::kInvalidArgument, "tokenizer_config.json"},
      {"add_bos without bos", ok, R"({"add_bos_token":true})", StatusCode::kInvalidArgument,
       "add_bos_token"},
  };
  for (const BadCase &c : cases) {
    auto d = parseHfTokenizer(c.json, c.config, "t.json");
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_EQ(d.status().code(), c.code) << c.name << ": " << d.status().to_string();
    EXPECT_NE(d.status().message().find(c.needle), std::string::npos)
        << c.name << ": " << d.status().to_string();
    EXPECT_EQ(d.status().message().rfind("t.json", 0), 0u) << d.status().to_string();
  }
  // Loads fine, but the runtime rejects a merge naming an unknown token.
  auto d = parseHfTokenizer(
      R"({"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"model":{"type":"BPE","vocab":{"a":0},"merges":["a q"]}})",
      "", "t.json");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto t = Tokenizer::create(*d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'q'"), std::string::npos);

  auto missing = loadHfTokenizer("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

} // namespace
} // namespace llmc

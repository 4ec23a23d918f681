// The pre-tokenizer table (runtime/tokenizer/pre_tokenizer.cc) against Hugging Face `tokenizers`:
// tests/fixtures/pretok/pretokenizer_vectors.json holds, per family, the pieces HF's
// pre_tokenize_str gives for a multi-script corpus (tests/reference/gen_pretokenizer_vectors.py),
// in ByteLevel's mapped form. We split the same text, map our pieces the same way, and compare.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

using json = nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream in(LLMC_PRETOK_FIXTURE);
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  }();
  return j;
}

std::string quoted(const std::vector<std::string>& v) {
  std::string out = "[";
  for (const std::string& s : v) out += (out.size() > 1 ? ", \"" : "\"") + s + "\"";
  return out + "]";
}

TEST(PreTokenizerTable, FixtureLoads) {
  const json& j = fixture();
  ASSERT_TRUE(j.is_object()) << "cannot read " << LLMC_PRETOK_FIXTURE;
  EXPECT_GE(j["corpus"].size(), 20u);
  EXPECT_GE(j["families"].size(), 20u);
}

// Every family in the fixture splits the corpus exactly as Hugging Face does.
TEST(PreTokenizerTable, MatchesHuggingFace) {
  const json& j = fixture();
  ASSERT_TRUE(j.is_object());
  const json& corpus = j["corpus"];
  for (const auto& [name, family] : j["families"].items()) {
    auto pt = PreTokenizer::create(name);
    ASSERT_TRUE(pt.ok()) << name << ": " << pt.status().to_string();
    EXPECT_EQ((*pt)->name(), name);
    const json& expected_all = family["pieces"];
    ASSERT_EQ(expected_all.size(), corpus.size()) << name;
    int mismatches = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      const std::string text = corpus[i].get<std::string>();
      std::vector<std::string_view> pieces;
      ASSERT_TRUE((*pt)->split(text, &pieces).ok()) << name;
      std::vector<std::string> got;
      for (std::string_view p : pieces) {
        std::string mapped;
        append_byte_level(p, &mapped);
        got.push_back(std::move(mapped));
      }
      const auto expected = expected_all[i].get<std::vector<std::string>>();
      if (got != expected) {
        ++mismatches;
        ADD_FAILURE() << name << " on corpus[" << i << "] \"" << text << "\"\n  ours: "
                      << quoted(got) << "\n  HF:   " << quoted(expected);
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

// The fixture covers every family of the table, so no family is untested.
TEST(PreTokenizerTable, FixtureCoversEveryFamily) {
  const json& j = fixture();
  ASSERT_TRUE(j.is_object());
  std::set<std::string> canonical;
  for (const std::string& n : PreTokenizer::all_names()) {
    canonical.insert(PreTokenizer::canonical_name(n));
  }
  for (const std::string& c : canonical) {
    EXPECT_TRUE(j["families"].contains(c)) << c << " has no reference vectors";
  }
}

TEST(PreTokenizerTable, EveryNameResolvesAndCompiles) {
  const std::vector<std::string> names = PreTokenizer::all_names();
  EXPECT_GE(names.size(), 60u);
  std::set<std::string> seen;
  for (const std::string& n : names) {
    EXPECT_TRUE(seen.insert(n).second) << "duplicate name " << n;
    const std::string canonical = PreTokenizer::canonical_name(n);
    EXPECT_FALSE(canonical.empty()) << n;
    auto pt = PreTokenizer::create(n);
    ASSERT_TRUE(pt.ok()) << n << ": " << pt.status().to_string();
    EXPECT_EQ((*pt)->name(), canonical);
    std::vector<std::string_view> pieces;
    EXPECT_TRUE((*pt)->split("ok 123 déjà", &pieces).ok()) << n;
    std::string joined;
    for (std::string_view p : pieces) joined += p;
    EXPECT_EQ(joined, "ok 123 déjà") << n;  // pieces tile the text
  }
  // Names llama.cpp writes for common families, spot-checked.
  for (const char* n : {"default", "llama-bpe", "dbrx", "smaug-bpe", "deepseek-llm",
                        "deepseek-coder", "deepseek-v3", "falcon", "falcon3", "mpt", "starcoder",
                        "refact", "command-r", "qwen2", "deepseek-r1-qwen", "stablelm2", "olmo",
                        "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish",
                        "exaone", "chameleon", "minerva-7b", "gpt-4o", "superbpe", "trillion",
                        "bailingmoe", "seed-coder", "hunyuan"}) {
    EXPECT_FALSE(PreTokenizer::canonical_name(n).empty()) << n;
  }
  EXPECT_EQ(PreTokenizer::canonical_name("falcon3"), "llama3");
  EXPECT_EQ(PreTokenizer::canonical_name("command-r"), "smollm");
  EXPECT_EQ(PreTokenizer::canonical_name("gpt3-finnish"), "bloom");
}

TEST(PreTokenizerTable, UnknownNameIsAnErrorNamingIt) {
  for (const char* n : {"kimi-k2", "no-such-pre", "", "LLAMA3"}) {
    auto pt = PreTokenizer::create(n);
    ASSERT_FALSE(pt.ok()) << n;
    EXPECT_EQ(pt.status().code(), StatusCode::kInvalidArgument);
    const std::string m = pt.status().message();
    EXPECT_NE(m.find("'" + std::string(n) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("deepseek-v3"), std::string::npos) << m;  // lists the supported ones
  }
}

// Flags the table carries besides the regexes.
TEST(PreTokenizerTable, IgnoreMergesFollowsLlamaCpp) {
  for (const char* n : {"llama3", "llama-bpe", "tekken", "minicpm5"}) {
    auto pt = PreTokenizer::create(n);
    ASSERT_TRUE(pt.ok());
    EXPECT_TRUE((*pt)->ignore_merges()) << n;
  }
  for (const char* n : {"dbrx", "qwen2", "gpt2", "deepseek-v3"}) {
    auto pt = PreTokenizer::create(n);
    ASSERT_TRUE(pt.ok());
    EXPECT_FALSE((*pt)->ignore_merges()) << n;
  }
}

// Falcon splits digits after the byte mapping, so a piece can end inside a UTF-8 character
// (Cyrillic 'в' is D0 B2 and B2 maps to '²'); the tokenizer must still encode such text.
TEST(PreTokenizerTable, FalconByteStagesThroughTheTokenizer) {
  auto pt = PreTokenizer::create("falcon");
  ASSERT_TRUE(pt.ok());
  std::vector<std::string_view> pieces;
  ASSERT_TRUE((*pt)->split("\xD0\xB2" "12", &pieces).ok());
  // GPT-2's regex gives "в" and "12"; the mapped-digit stage then cuts "в" after its first byte.
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "\xD0");
  EXPECT_EQ(pieces[1], "\xB2");
  EXPECT_EQ(pieces[2], "12");

  TokenizerData d;
  d.pre = "falcon";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_code_point(static_cast<uint8_t>(b)), &s);
    d.tokens.push_back(s);
  }
  auto t = Tokenizer::create(d);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode("\xD0\xB2" "12 x", /*add_special=*/false);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0xD0, 0xB2, '1', '2', ' ', 'x'}));
}

}  // namespace
}  // namespace llmrt

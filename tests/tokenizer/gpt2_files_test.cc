// llmc::loadGpt2Files: the real GPT-2 encoder.json + vocab.bpe (against llama.cpp's gpt-2 vocab
// GGUF and its test vectors), and malformed files → clear errors.
#include "compiler/tokenizer/Gpt2Files.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llmc {
namespace {

using llmrt::StatusCode;
using llmrt::Tokenizer;
using llmrt::TokenizerData;
using llmrt::TokenType;
using llmrt::testing::data_dir;

std::string gpt2Dir() { return data_dir() + "/gpt2-files"; }

TEST(Gpt2Files, RealFiles) {
  auto data = loadGpt2Files(gpt2Dir() + "/encoder.json", gpt2Dir() + "/vocab.bpe");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->model, "bpe");
  EXPECT_EQ(data->pre, "gpt2");
  EXPECT_TRUE(data->byte_level);
  EXPECT_FALSE(data->ignore_merges);
  EXPECT_EQ(data->normalizer, "");
  ASSERT_EQ(data->tokens.size(), 50257u);
  EXPECT_EQ(data->merges.size(), 50000u);  // the "#version" line is not a merge
  EXPECT_EQ(data->merges.front(), "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(data->tokens[0], "!");
  EXPECT_EQ(data->tokens[50256], "<|endoftext|>");
  EXPECT_EQ(data->token_types[50256], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(data->token_types[0], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_EQ(data->bos_id, 50256);
  EXPECT_EQ(data->eos_id, 50256);
  EXPECT_FALSE(data->add_bos);
  EXPECT_FALSE(data->add_eos);

  // The same vocabulary and merges as llama.cpp's gpt-2 vocab GGUF.
  llmrt::testing::MiniGguf gguf;
  TokenizerData ref;
  ASSERT_TRUE(gguf.load(data_dir() + "/gguf-vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gguf.tokenizer_data(&ref));
  EXPECT_TRUE(data->tokens == ref.tokens);
  EXPECT_TRUE(data->merges == ref.merges);

  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto hello = (*t)->encode("Hello world", false);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(*hello, (std::vector<int32_t>{15496, 995}));

  // llama.cpp's test vectors for this vocabulary.
  auto cases = llmrt::testing::read_vocab_cases(data_dir() + "/gguf-vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_EQ(cases.size(), 46u);
  for (const auto &c : cases) {
    auto ids = (*t)->encode(c.text, false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ((*t)->decode(*ids), c.text);
  }
}

TEST(Gpt2Files, SmallFilesAndCrlf) {
  const std::string enc = R"({"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4})";
  auto data = parseGpt2Files(enc, "#version: 0.2\r\na b\r\n\r\nab c\r\n", "e.json", "v.bpe");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_EQ(data->merges, (std::vector<std::string>{"a b", "ab c"}));
  EXPECT_EQ(data->bos_id, -1);  // no <|endoftext|>
  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto ids = (*t)->encode("abcab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{4, 2}));
}

void expectError(std::string_view enc, std::string_view bpe, StatusCode code,
                 const std::string &needle) {
  auto data = parseGpt2Files(enc, bpe, "enc.json", "vocab.bpe");
  ASSERT_FALSE(data.ok()) << "accepted enc=" << enc << " bpe=" << bpe;
  EXPECT_EQ(data.status().code(), code) << data.status().to_string();
  EXPECT_NE(data.status().message().find(needle), std::string::npos)
      << "'" << data.status().message() << "' lacks '" << needle << "'";
}

TEST(Gpt2Files, BadInput) {
  const std::string good = R"({"a": 0, "b": 1, "ab": 2})";
  const auto bad = StatusCode::kInvalidArgument;
  expectError("{not json", "a b\n", bad, "enc.json: not valid JSON");
  expectError("[1, 2]", "a b\n", bad, "JSON object");
  expectError("{}", "a b\n", bad, "empty");
  expectError(R"({"a": "zero"})", "a b\n", bad, "'a' is not an integer");
  expectError(R"({"a": 0, "b": 5})", "a b\n", bad, "has id 5");
  expectError(R"({"a": 0, "b": -1})", "a b\n", bad, "has id -1");
  expectError(R"({"a": 0, "b": 0})", "a b\n", bad, "id 0 is given to both");
  expectError(R"({"a": 0, "": 1})", "a b\n", bad, "empty string");
  expectError(good, "#version: 0.2\na b c\n", bad, "vocab.bpe:2: expected two tokens");
  expectError(good, "ab\n", bad, "vocab.bpe:1: expected two tokens");
  expectError(good, "a  b\n", bad, "expected two tokens");
  expectError(good, " a\n", bad, "expected two tokens");
  expectError(good, "a b\na x\n", bad, "vocab.bpe:2: merge names unknown token 'x'");
  expectError(good, "a b\nb a\n", bad, "vocab.bpe:2: merge result 'ba'");
  expectError(good, "#version: 0.2\n", bad, "no merges");
  expectError(good, "", bad, "no merges");

  auto missing = loadGpt2Files("/nonexistent/encoder.json", gpt2Dir() + "/vocab.bpe");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/encoder.json"), std::string::npos);
}

// Truncations of a real-looking prefix never crash (each is an error or a valid tokenizer).
TEST(Gpt2Files, TruncatedInputNeverCrashes) {
  const std::string enc = R"({"\u0120": 0, "t": 1, "\u0120t": 2, "h": 3, "\u0120th": 4})";
  const std::string bpe = "#version: 0.2\n\xC4\xA0 t\n\xC4\xA0t h\n";
  for (size_t i = 0; i <= enc.size(); ++i) {
    auto d = parseGpt2Files(enc.substr(0, i), bpe, "e", "v");
    EXPECT_EQ(d.ok(), i == enc.size()) << i;
  }
  for (size_t i = 0; i <= bpe.size(); ++i) {
    auto d = parseGpt2Files(enc, bpe.substr(0, i), "e", "v");
    if (d.ok()) {
      EXPECT_TRUE(Tokenizer::create(*d).ok());
    }
  }
}

} // namespace
} // namespace llmc

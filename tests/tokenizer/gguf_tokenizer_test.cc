// The GGUF → TokenizerData mapping of compiler/frontend (readGgufTokenizer) feeding the runtime
// tokenizer: the same llama.cpp test vectors as tokenizer_test, through the product's reader.
#include <gtest/gtest.h>

#include "compiler/frontend/Gguf.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/frontend/TestFiles.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llmc {
namespace {

using llmrt::testing::data_dir;

std::string idsToString(const std::vector<int32_t> &ids) {
  std::string s;
  for (int32_t id : ids)
    s += " " + std::to_string(id);
  return s;
}

class GgufVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocab, ReadGgufTokenizerMatchesVectors) {
  std::string path = data_dir() + "/gguf-vocab/ggml-vocab-" + GetParam() + ".gguf";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto data = readGgufTokenizer(**file);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  ASSERT_TRUE(data->has_value());
  auto t = llmrt::Tokenizer::create(**data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto cases = llmrt::testing::read_vocab_cases(path);
  ASSERT_EQ(cases.size(), 46u);
  for (const auto &c : cases) {
    auto ids = (*t)->encode(c.text, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(c.ids)) << "text: '" << c.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, GgufVocab,
                         ::testing::Values("gpt-2", "llama-bpe", "qwen2"));
INSTANTIATE_TEST_SUITE_P(SentencePieceBpe, GgufVocab, ::testing::Values("llama-spm"));

/// A vocabulary-only byte-level GGUF whose tokenizer.ggml.pre is `pre`.
std::string writeVocabGguf(test::TempDir &dir, const std::string &pre) {
  test::GgufBuilder b;
  b.addString("general.architecture", "llama");
  b.addString("tokenizer.ggml.model", "gpt2");
  b.addString("tokenizer.ggml.pre", pre);
  b.addStringArray("tokenizer.ggml.tokens", {"a", "b", "ab", "\xC4\xA0"}); // "Ġ" is the space
  b.addStringArray("tokenizer.ggml.merges", {"a b"});
  return dir.write("vocab-" + pre + ".gguf", b.build());
}

// tokenizer.ggml.pre picks a row of the runtime's table, by any name llama.cpp writes.
TEST(GgufPreTokenizer, NamesFromTheTableLoad) {
  test::TempDir dir;
  for (const char *pre : {"deepseek-v3", "falcon", "command-r", "tekken", "gpt-4o", "bloom",
                          "smaug-bpe", "superbpe"}) {
    auto file = GgufFile::open(writeVocabGguf(dir, pre));
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto data = readGgufTokenizer(**file);
    ASSERT_TRUE(data.ok()) << pre << ": " << data.status().to_string();
    ASSERT_TRUE(data->has_value());
    EXPECT_EQ((*data)->pre, pre);
    auto t = llmrt::Tokenizer::create(**data);
    ASSERT_TRUE(t.ok()) << pre << ": " << t.status().to_string();
    auto ids = (*t)->encode("ab a", /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), " 2 3 0") << pre;
  }
}

TEST(GgufPreTokenizer, UnknownNameIsAnErrorNamingItAndTheFile) {
  test::TempDir dir;
  std::string path = writeVocabGguf(dir, "mystery-bpe");
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto data = readGgufTokenizer(**file);
  ASSERT_FALSE(data.ok());
  const std::string m = data.status().message();
  EXPECT_NE(m.find("'mystery-bpe'"), std::string::npos) << m;
  EXPECT_NE(m.find("vocab-mystery-bpe.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find("llama3"), std::string::npos) << m; // lists the supported names
}

} // namespace
} // namespace llmc

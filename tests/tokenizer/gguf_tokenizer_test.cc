// The GGUF → TokenizerData mapping of compiler/frontend (readGgufTokenizer) feeding the runtime
// tokenizer: the same llama.cpp test vectors as tokenizer_test, through the product's reader.
#include <gtest/gtest.h>

#include "compiler/frontend/Gguf.h"
#include "runtime/tokenizer/tokenizer.h"
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

} // namespace
} // namespace llmc

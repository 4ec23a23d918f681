// Our tokenizer against Hugging Face on a varied corpus (hf_corpus_expected.json, written by
// hf_corpus_gen.py with `tokenizers`): hf/llama3, hf/qwen3 and the GPT-2 files, with and without
// special-token parsing, plus Llama 3 with a BOS post-processor. Also llmc::loadTokenizerFrom
// (every kind of path) and llmc::runTokenizeCommand (the `llmc tokenize` subcommand).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "compiler/tokenizer/Gpt2Files.h"
#include "compiler/tokenizer/HfTokenizer.h"
#include "compiler/tokenizer/TokenizeCommand.h"
#include "compiler/tokenizer/TokenizerSource.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tests/unit/tiny_plan.h"

namespace llmc {
namespace {

namespace fs = std::filesystem;
using llmrt::StatusCode;
using llmrt::Tokenizer;
using llmrt::TokenizerData;
using llmrt::testing::data_dir;
using nlohmann::json;

std::string idsToString(const std::vector<int32_t> &ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty())
      s += ' ';
    s += std::to_string(id);
  }
  return s;
}

const json &fixture() {
  static const json j = [] {
    std::string text;
    if (!llmrt::testing::read_file(std::string(LLMC_TOKENIZER_TEST_DIR) +
                                       "/hf_corpus_expected.json",
                                   &text))
      return json();
    return json::parse(text, nullptr, /*allow_exceptions=*/false);
  }();
  return j;
}

std::vector<std::string> corpusTexts() {
  std::vector<std::string> texts;
  const json &f = fixture();
  if (f.is_object() && f.contains("texts"))
    for (const json &t : f["texts"])
      texts.push_back(t.get<std::string>());
  return texts;
}

/// The reference loaders (loadGpt2Files / loadHfTokenizer), each file read once per process.
const llmrt::StatusOr<TokenizerData> &loadByName(const std::string &name) {
  static std::map<std::string, llmrt::StatusOr<TokenizerData>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    llmrt::StatusOr<TokenizerData> d =
        name == "gpt2" ? loadGpt2Files(data_dir() + "/gpt2-files/encoder.json",
                                       data_dir() + "/gpt2-files/vocab.bpe")
                       : loadHfTokenizer(data_dir() + "/hf/" + name + "/tokenizer.json");
    it = loaded.emplace(name, std::move(d)).first;
  }
  return it->second;
}

void expectCorpus(const std::string &name) {
  const json &f = fixture();
  ASSERT_TRUE(f.is_object()) << "hf_corpus_expected.json missing or not JSON";
  std::vector<std::string> texts = corpusTexts();
  ASSERT_GE(texts.size(), 60u);
  ASSERT_TRUE(f["tokenizers"].contains(name));
  const json &ref = f["tokenizers"][name];
  ASSERT_EQ(ref["special"].size(), texts.size());
  ASSERT_EQ(ref["no_special"].size(), texts.size());
  ASSERT_EQ(ref["decoded"].size(), texts.size());

  const auto &data = loadByName(name);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string &text = texts[i];
    auto want = ref["special"][i].get<std::vector<int32_t>>();
    auto wantPlain = ref["no_special"][i].get<std::vector<int32_t>>();
    auto decoded = ref["decoded"][i].get<std::string>();
    auto ids = (*t)->encode(text, /*add_special=*/false, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    auto plain = (*t)->encode(text, /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(want)) << name << " text #" << i << ": '" << text << "'";
    EXPECT_EQ(idsToString(*plain), idsToString(wantPlain))
        << name << " (no special parsing) text #" << i << ": '" << text << "'";
    mismatches += *ids != want;
    mismatches += *plain != wantPlain;
    // decode(encode(x)) == x (Qwen3 normalizes to NFC first: then x in NFC, as HF decodes).
    EXPECT_EQ((*t)->decode(*ids), decoded) << name << " text #" << i;
    EXPECT_EQ((*t)->decode(*plain), decoded) << name << " text #" << i;
    if (name != "qwen3") {
      EXPECT_EQ((*t)->decode(*ids), text);
    }
  }
  EXPECT_EQ(mismatches, 0) << name;
}

TEST(HfCorpus, Llama3) { expectCorpus("llama3"); }
TEST(HfCorpus, Qwen3) { expectCorpus("qwen3"); }
TEST(HfCorpus, Gpt2Files) { expectCorpus("gpt2"); }

/// The Llama 3 tokenizer.json with the fixture's TemplateProcessing post-processor patched in.
std::string llama3WithBosJson() {
  std::string text;
  if (!llmrt::testing::read_file(data_dir() + "/hf/llama3/tokenizer.json", &text))
    return "";
  json tj = json::parse(text, nullptr, false);
  if (tj.is_discarded())
    return "";
  tj["post_processor"] = fixture()["bos"]["post_processor"];
  return tj.dump();
}

TEST(HfCorpus, Llama3WithBos) {
  const json &f = fixture();
  ASSERT_TRUE(f.is_object() && f.contains("bos"));
  ASSERT_EQ(f["bos"]["tokenizer"], "llama3");
  std::string tj = llama3WithBosJson();
  ASSERT_FALSE(tj.empty());
  auto data = parseHfTokenizer(tj, "", "llama3+bos");
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  EXPECT_TRUE(data->add_bos);
  EXPECT_EQ(data->bos_id, 128000);
  auto t = Tokenizer::create(*data);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<std::string> texts = corpusTexts();
  ASSERT_EQ(f["bos"]["ids"].size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto want = f["bos"]["ids"][i].get<std::vector<int32_t>>();
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(want.front(), 128000);
    auto ids = (*t)->encode(texts[i], /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(idsToString(*ids), idsToString(want)) << "text #" << i;
  }
}

// ---------------------------------------------------------------------------------------------
// loadTokenizerFrom

/// A fresh empty temporary folder, removed by the destructor.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("hf_corpus_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string &name, const std::string &contents) const {
    std::ofstream(path / name, std::ios::binary) << contents;
    return (path / name).string();
  }
};

TEST(TokenizerSource, EveryKindOfPath) {
  const auto &gpt2 = loadByName("gpt2");
  ASSERT_TRUE(gpt2.ok());
  const auto &llama3 = loadByName("llama3");
  ASSERT_TRUE(llama3.ok());

  struct Case {
    std::string path;
    const TokenizerData *expect;
  } cases[] = {
      {data_dir() + "/hf/llama3/tokenizer.json", &*llama3},
      {data_dir() + "/hf/llama3", &*llama3},
      {data_dir() + "/hf/llama3/", &*llama3},
      {data_dir() + "/gpt2-files", &*gpt2},
      {data_dir() + "/gpt2-files/encoder.json", &*gpt2},
      {data_dir() + "/gguf-vocab/ggml-vocab-gpt-2.gguf", &*gpt2},
      {data_dir() + "/gguf-vocab/ggml-vocab-llama-bpe.gguf", &*llama3},
  };
  for (const Case &c : cases) {
    auto d = loadTokenizerFrom(c.path);
    ASSERT_TRUE(d.ok()) << c.path << ": " << d.status().to_string();
    EXPECT_TRUE(d->tokens == c.expect->tokens) << c.path;
    EXPECT_TRUE(d->merges == c.expect->merges) << c.path;
    EXPECT_TRUE(d->byte_level) << c.path;
    auto t = Tokenizer::create(*d);
    ASSERT_TRUE(t.ok()) << c.path << ": " << t.status().to_string();
    auto ids = (*t)->encode("Hello world", false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, c.expect == &*gpt2 ? (std::vector<int32_t>{15496, 995})
                                       : (std::vector<int32_t>{9906, 1917}))
        << c.path;
  }
}

TEST(TokenizerSource, HuggingFaceNamesForGpt2Files) {
  TempDir dir;
  std::string enc, bpe;
  ASSERT_TRUE(llmrt::testing::read_file(data_dir() + "/gpt2-files/encoder.json", &enc));
  ASSERT_TRUE(llmrt::testing::read_file(data_dir() + "/gpt2-files/vocab.bpe", &bpe));
  dir.file("vocab.json", enc);
  dir.file("merges.txt", bpe);
  auto d = loadTokenizerFrom(dir.path.string());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->tokens.size(), 50257u);
  EXPECT_EQ(d->pre, "gpt2");
}

TEST(TokenizerSource, Plan) {
  // The tiny test plan carries no tokenizer: a clear error, after the plan itself verified.
  TempDir dir;
  std::string path = (dir.path / "tiny.plan").string();
  auto spec = llmrt::testing::make_tiny_plan(llmrt::testing::TinyPlanConfig());
  ASSERT_TRUE(llmrt::testing::write_tiny_plan(spec, path).ok());
  auto d = loadTokenizerFrom(path);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("the plan has no tokenizer"), std::string::npos)
      << d.status().to_string();

  // A plan file cut short: the plan verifier's error, naming the file.
  std::string bytes;
  ASSERT_TRUE(llmrt::testing::read_file(path, &bytes));
  std::string cut = dir.file("cut.plan", bytes.substr(0, 200));
  auto bad = loadTokenizerFrom(cut);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cut.plan"), std::string::npos)
      << bad.status().to_string();
}

TEST(TokenizerSource, Errors) {
  TempDir dir;
  auto expectError = [](const std::string &path, StatusCode code, const std::string &needle) {
    auto d = loadTokenizerFrom(path);
    ASSERT_FALSE(d.ok()) << "accepted " << path;
    EXPECT_EQ(d.status().code(), code) << d.status().to_string();
    EXPECT_NE(d.status().message().find(needle), std::string::npos)
        << "'" << d.status().message() << "' lacks '" << needle << "'";
  };
  expectError("", StatusCode::kInvalidArgument, "no tokenizer path");
  expectError((dir.path / "missing.json").string(), StatusCode::kNotFound, "does not exist");
  expectError(dir.path.string(), StatusCode::kNotFound, "no tokenizer.json");
  expectError(dir.file("notes.txt", "hello"), StatusCode::kInvalidArgument, "is not a tokenizer");
  expectError(dir.file("tokenizer.json", "{broken"), StatusCode::kInvalidArgument, "");
  // A folder whose tokenizer.json is broken reports that file's error, not "no tokenizer".
  auto d = loadTokenizerFrom(dir.path.string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().find("no tokenizer.json"), std::string::npos);
  expectError(dir.file("encoder.json", "{\"a\": 0}"), StatusCode::kNotFound, "without vocab.bpe");
  expectError(dir.file("bad.gguf", std::string("GGUF\x03\0\0\0", 8)), StatusCode::kInvalidArgument,
              "");
}

// ---------------------------------------------------------------------------------------------
// runTokenizeCommand

struct CommandResult {
  int code;
  std::string out, err;
};

CommandResult runCommand(const TokenizeOptions &opts, const std::string &input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  int code = runTokenizeCommand(opts, in, out, err);
  return {code, out.str(), err.str()};
}

TEST(TokenizeCommand, EncodeDecode) {
  TokenizeOptions opts;
  opts.tokenizerPath = data_dir() + "/gpt2-files";
  CommandResult r = runCommand(opts, "Hello world");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
  EXPECT_EQ(r.err, "");

  // The input is taken byte for byte: a trailing newline is a token.
  r = runCommand(opts, "Hello world\n");
  EXPECT_EQ(r.out, "15496 995 198\n");

  // Special tokens: parsed by default, plain text on request.
  r = runCommand(opts, "a<|endoftext|>");
  EXPECT_EQ(r.out, "64 50256\n");
  opts.parseSpecial = false;
  r = runCommand(opts, "a<|endoftext|>");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out, "64 50256\n");
  EXPECT_EQ(r.out.find("50256"), std::string::npos);
  opts.parseSpecial = true;

  r = runCommand(opts, "");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "\n");

  opts.decode = true;
  r = runCommand(opts, "15496 995\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world");
  r = runCommand(opts, "  15496\t\n995 198 50256 ");
  EXPECT_EQ(r.out, "Hello world\n<|endoftext|>");
  r = runCommand(opts, "15496 x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'x' is not a token id"), std::string::npos) << r.err;
  r = runCommand(opts, "15496 50257");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("token id 50257 is outside the vocabulary"), std::string::npos) << r.err;
  r = runCommand(opts, "-1");
  EXPECT_EQ(r.code, 1);
}

TEST(TokenizeCommand, InputSeparatorMatchesTestVectors) {
  // llama.cpp's files: each string followed by the separator; one line of ids per string.
  const std::string base = data_dir() + "/gguf-vocab/ggml-vocab-llama-bpe.gguf";
  std::string inp;
  ASSERT_TRUE(llmrt::testing::read_file(base + ".inp", &inp));
  auto cases = llmrt::testing::read_vocab_cases(base);
  ASSERT_EQ(cases.size(), 46u);

  TokenizeOptions opts;
  opts.tokenizerPath = base;
  opts.inputSep = "\n__ggml_vocab_test__\n";
  CommandResult r = runCommand(opts, inp);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string want;
  for (const auto &c : cases)
    want += idsToString(c.ids) + "\n";
  EXPECT_EQ(r.out, want);

  // And back: --decode with the separator restores the input exactly.
  opts.decode = true;
  CommandResult back = runCommand(opts, r.out);
  ASSERT_EQ(back.code, 0) << back.err;
  EXPECT_EQ(back.out, inp);

  // Pieces without a trailing separator, and an empty separator.
  opts.decode = false;
  opts.inputSep = "|";
  r = runCommand(opts, "Hello|world||x");
  EXPECT_EQ(r.out, "9906\n14957\n\n87\n");
  opts.inputSep = "";
  r = runCommand(opts, "Hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--input-sep"), std::string::npos);
}

TEST(TokenizeCommand, BosAndErrors) {
  TempDir dir;
  std::string tj = llama3WithBosJson();
  ASSERT_FALSE(tj.empty());
  dir.file("tokenizer.json", tj);
  TokenizeOptions opts;
  opts.tokenizerPath = dir.path.string();
  CommandResult r = runCommand(opts, "Hello world");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "128000 9906 1917\n");
  opts.noBos = true;
  r = runCommand(opts, "Hello world");
  EXPECT_EQ(r.out, "9906 1917\n");
  opts.noBos = false;
  opts.inputSep = "\n";
  r = runCommand(opts, "a\nb\n");
  EXPECT_EQ(r.out, "128000 64\n128000 65\n");

  opts.tokenizerPath = (dir.path / "nothing-here").string();
  r = runCommand(opts, "x");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("llmc tokenize: error: NOT_FOUND"), std::string::npos) << r.err;

  // Invalid UTF-8 input is an error, not a crash.
  opts.tokenizerPath = dir.path.string();
  opts.inputSep.reset();
  r = runCommand(opts, "bad \xFF byte");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("error"), std::string::npos);
}

} // namespace
} // namespace llmc

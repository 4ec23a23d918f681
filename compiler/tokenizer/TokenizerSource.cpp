//===- TokenizerSource.cpp - Load a tokenizer from any supported file ------===//

#include "compiler/tokenizer/TokenizerSource.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/frontend/Gguf.h"
#include "compiler/tokenizer/Gpt2Files.h"
#include "compiler/tokenizer/HfTokenizer.h"
#include "runtime/plan/plan_file.h"
#include "runtime/tokenizer/tokenizer_fb.h"

namespace llmc {
namespace {

namespace fs = std::filesystem;
using llmrt::StatusOr;
using llmrt::TokenizerData;

bool isFile(const fs::path &p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

/// The GPT-2 merges file beside an encoder.json / vocab.json, or "" if there is none.
std::string gpt2MergesBeside(const fs::path &dir) {
  for (const char *name : {"vocab.bpe", "merges.txt"})
    if (isFile(dir / name))
      return (dir / name).string();
  return "";
}

StatusOr<TokenizerData> fromGguf(const std::string &path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(path));
  ASSIGN_OR_RETURN(std::optional<TokenizerData> tok, readGgufTokenizer(*file));
  if (!tok)
    return llmrt::not_found(path + ": the GGUF file has no tokenizer (tokenizer.ggml.model)");
  return std::move(*tok);
}

StatusOr<TokenizerData> fromPlan(const std::string &path) {
  StatusOr<std::unique_ptr<llmrt::Plan>> plan = llmrt::Plan::open(path);
  if (!plan.ok())
    return plan.status().with_context(path);
  const llmrt::fb::Tokenizer *t = (*plan)->fb().tokenizer();
  if (!t)
    return llmrt::not_found(path + ": the plan has no tokenizer");
  return llmrt::tokenizer_data_from_plan(*t);
}

StatusOr<TokenizerData> fromFolder(const fs::path &dir) {
  if (isFile(dir / "tokenizer.json"))
    return loadHfTokenizer((dir / "tokenizer.json").string());
  for (const char *vocab : {"encoder.json", "vocab.json"}) {
    if (!isFile(dir / vocab))
      continue;
    std::string merges = gpt2MergesBeside(dir);
    if (!merges.empty())
      return loadGpt2Files((dir / vocab).string(), merges);
  }
  return llmrt::not_found(dir.string() +
                          ": no tokenizer.json, and no encoder.json (or vocab.json) with "
                          "vocab.bpe (or merges.txt) in this folder");
}

} // namespace

StatusOr<TokenizerData> loadTokenizerFrom(const std::string &path) {
  if (path.empty())
    return llmrt::invalid_argument("no tokenizer path given");
  fs::path p(path);
  std::error_code ec;
  fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st))
    return llmrt::not_found("'" + path + "' does not exist");
  if (fs::is_directory(st))
    return fromFolder(p);
  if (!fs::is_regular_file(st))
    return llmrt::invalid_argument("'" + path + "' is not a regular file or a folder");

  char magic[8] = {};
  {
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return llmrt::not_found("cannot open '" + path + "'");
    f.read(magic, sizeof(magic));
  }
  if (std::memcmp(magic, "GGUF", 4) == 0)
    return fromGguf(path);
  if (std::memcmp(magic, llmrt::kPlanMagic, sizeof(magic)) == 0)
    return fromPlan(path);

  std::string name = p.filename().string();
  if (name == "encoder.json" || name == "vocab.json") {
    std::string merges = gpt2MergesBeside(p.parent_path().empty() ? fs::path(".")
                                                                   : p.parent_path());
    if (merges.empty())
      return llmrt::not_found(path + ": GPT-2 vocabulary without vocab.bpe (or merges.txt) "
                                     "beside it");
    return loadGpt2Files(path, merges);
  }
  if (p.extension() == ".json")
    return loadHfTokenizer(path);
  return llmrt::invalid_argument(
      "'" + path + "' is not a tokenizer: expected a tokenizer.json, a folder holding one (or "
      "GPT-2 encoder.json + vocab.bpe), a .gguf file or a plan file");
}

} // namespace llmc

//===- Gpt2Files.cpp - GPT-2 encoder.json + vocab.bpe reader ---------------===//

#include "compiler/tokenizer/Gpt2Files.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace llmc {
namespace {

using llmrt::StatusOr;
using llmrt::TokenizerData;
using llmrt::TokenType;

StatusOr<std::string> readWholeFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return llmrt::not_found("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad())
    return llmrt::invalid_argument("error reading '" + path + "'");
  return ss.str();
}

/// A short, printable form of a token for error messages.
std::string quoteToken(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax)
    out += "...";
  return out + "'";
}

} // namespace

StatusOr<TokenizerData> parseGpt2Files(std::string_view encoderJson, std::string_view vocabBpe,
                                       const std::string &encoderName,
                                       const std::string &vocabName) {
  using nlohmann::json;
  json enc = json::parse(encoderJson.begin(), encoderJson.end(), /*cb=*/nullptr,
                         /*allow_exceptions=*/false);
  if (enc.is_discarded())
    return llmrt::invalid_argument(encoderName + ": not valid JSON");
  if (!enc.is_object())
    return llmrt::invalid_argument(encoderName + ": expected a JSON object of token → id");
  if (enc.empty())
    return llmrt::invalid_argument(encoderName + ": the vocabulary is empty");
  const size_t n = enc.size();
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return llmrt::invalid_argument(encoderName + ": too many tokens");

  TokenizerData data;
  data.model = "bpe";
  data.pre = "gpt2";
  data.byte_level = true;
  data.tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(n);
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    const json &v = it.value();
    if (!v.is_number_integer())
      return llmrt::invalid_argument(encoderName + ": the id of token " + quoteToken(it.key()) +
                                     " is not an integer");
    int64_t id = v.get<int64_t>();
    if (id < 0 || static_cast<uint64_t>(id) >= n)
      return llmrt::invalid_argument(encoderName + ": token " + quoteToken(it.key()) + " has id " +
                                     std::to_string(id) + ", outside 0.." +
                                     std::to_string(n - 1) + " (ids must be dense)");
    if (seen[id])
      return llmrt::invalid_argument(encoderName + ": id " + std::to_string(id) +
                                     " is given to both " + quoteToken(data.tokens[id]) + " and " +
                                     quoteToken(it.key()));
    if (it.key().empty())
      return llmrt::invalid_argument(encoderName + ": token " + std::to_string(id) +
                                     " is the empty string");
    seen[id] = true;
    data.tokens[id] = it.key();
  }
  for (size_t i = 0; i < n; ++i)
    ids.emplace(data.tokens[i], static_cast<int32_t>(i));

  // vocab.bpe: "#version: ..." header, then "left right" per line; blank lines are ignored.
  size_t pos = 0;
  size_t lineNo = 0;
  while (pos < vocabBpe.size()) {
    size_t end = vocabBpe.find('\n', pos);
    if (end == std::string_view::npos)
      end = vocabBpe.size();
    std::string_view line = vocabBpe.substr(pos, end - pos);
    pos = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty())
      continue;
    if (lineNo == 1 && line.substr(0, 8) == "#version")
      continue;
    std::string where = vocabName + ":" + std::to_string(lineNo) + ": ";
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      return llmrt::invalid_argument(where + "expected two tokens separated by one space, got " +
                                     quoteToken(line));
    std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    if (!ids.count(left))
      return llmrt::invalid_argument(where + "merge names unknown token " + quoteToken(left));
    if (!ids.count(right))
      return llmrt::invalid_argument(where + "merge names unknown token " + quoteToken(right));
    std::string merged = std::string(left) + std::string(right);
    if (!ids.count(merged))
      return llmrt::invalid_argument(where + "merge result " + quoteToken(merged) +
                                     " is not in the vocabulary");
    data.merges.emplace_back(line);
  }
  if (data.merges.empty())
    return llmrt::invalid_argument(vocabName + ": no merges");

  data.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  auto eot = ids.find("<|endoftext|>");
  if (eot != ids.end()) {
    data.token_types[eot->second] = static_cast<int32_t>(TokenType::kControl);
    data.bos_id = eot->second;
    data.eos_id = eot->second;
  }
  return data;
}

StatusOr<TokenizerData> loadGpt2Files(const std::string &encoderJson,
                                      const std::string &vocabBpe) {
  ASSIGN_OR_RETURN(std::string enc, readWholeFile(encoderJson));
  ASSIGN_OR_RETURN(std::string bpe, readWholeFile(vocabBpe));
  return parseGpt2Files(enc, bpe, encoderJson, vocabBpe);
}

} // namespace llmc

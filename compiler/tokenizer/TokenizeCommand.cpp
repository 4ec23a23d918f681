//===- TokenizeCommand.cpp - The `llmc tokenize` subcommand ----------------===//

#include "compiler/tokenizer/TokenizeCommand.h"

#include <charconv>
#include <istream>
#include <iterator>
#include <ostream>
#include <vector>

#include "compiler/tokenizer/TokenizerSource.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmc {
namespace {

using llmrt::Status;
using llmrt::StatusOr;
using llmrt::Tokenizer;

/// Splits `text` on `sep`; a trailing separator does not start an empty last piece.
std::vector<std::string_view> splitPieces(std::string_view text, std::string_view sep) {
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = text.find(sep, pos);
    if (next == std::string_view::npos) {
      pieces.push_back(text.substr(pos));
      return pieces;
    }
    pieces.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  if (pieces.empty())
    pieces.push_back(std::string_view());  // empty input: one empty piece
  return pieces;
}

Status encodeOne(const Tokenizer &tok, const TokenizeOptions &opts, std::string_view text,
                 std::ostream &out) {
  StatusOr<std::vector<int32_t>> ids =
      tok.encode(text, /*add_special=*/false, opts.parseSpecial);
  if (!ids.ok())
    return ids.status();
  std::vector<int32_t> all;
  if (tok.add_bos() && !opts.noBos && tok.bos_id() >= 0)
    all.push_back(tok.bos_id());
  all.insert(all.end(), ids->begin(), ids->end());
  if (tok.add_eos() && tok.eos_id() >= 0)
    all.push_back(tok.eos_id());
  std::string line;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i)
      line += ' ';
    line += std::to_string(all[i]);
  }
  line += '\n';
  out << line;
  return llmrt::ok_status();
}

/// Parses whitespace-separated ids from `text`, each checked against the vocabulary.
StatusOr<std::vector<int32_t>> parseIds(const Tokenizer &tok, std::string_view text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  auto isSpace = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  while (pos < text.size()) {
    while (pos < text.size() && isSpace(text[pos]))
      ++pos;
    if (pos == text.size())
      break;
    size_t end = pos;
    while (end < text.size() && !isSpace(text[end]))
      ++end;
    std::string_view word = text.substr(pos, end - pos);
    int64_t id = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || ptr != word.data() + word.size())
      return llmrt::invalid_argument("'" + std::string(word.substr(0, 40)) +
                                     "' is not a token id");
    if (id < 0 || id >= tok.vocab_size())
      return llmrt::out_of_range("token id " + std::to_string(id) +
                                 " is outside the vocabulary (" +
                                 std::to_string(tok.vocab_size()) + " tokens)");
    ids.push_back(static_cast<int32_t>(id));
    pos = end;
  }
  return ids;
}

Status run(const TokenizeOptions &opts, std::istream &in, std::ostream &out) {
  if (opts.inputSep && opts.inputSep->empty())
    return llmrt::invalid_argument("--input-sep must not be empty");
  StatusOr<llmrt::TokenizerData> data = loadTokenizerFrom(opts.tokenizerPath);
  if (!data.ok())
    return data.status();
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::create(*data);
  if (!tok.ok())
    return tok.status().with_context(opts.tokenizerPath);
  std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad())
    return llmrt::invalid_argument("error reading the input");

  if (opts.decode) {
    if (!opts.inputSep) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, parseIds(**tok, input));
      out << (*tok)->decode(ids);
      return llmrt::ok_status();
    }
    std::string_view rest = input;
    size_t lineNo = 0;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      ++lineNo;
      StatusOr<std::vector<int32_t>> ids = parseIds(**tok, line);
      if (!ids.ok())
        return ids.status().with_context("line " + std::to_string(lineNo));
      out << (*tok)->decode(*ids) << *opts.inputSep;
    }
    return llmrt::ok_status();
  }

  if (!opts.inputSep)
    return encodeOne(**tok, opts, input, out);
  size_t index = 0;
  for (std::string_view piece : splitPieces(input, *opts.inputSep)) {
    Status s = encodeOne(**tok, opts, piece, out);
    if (!s.ok())
      return s.with_context("piece " + std::to_string(index));
    ++index;
  }
  return llmrt::ok_status();
}

} // namespace

int runTokenizeCommand(const TokenizeOptions &options, std::istream &in, std::ostream &out,
                       std::ostream &err) {
  Status s = run(options, in, out);
  out.flush();
  if (!s.ok()) {
    err << "llmc tokenize: error: " << s.to_string() << "\n";
    return 1;
  }
  if (!out) {
    err << "llmc tokenize: error: cannot write the output\n";
    return 1;
  }
  return 0;
}

} // namespace llmc

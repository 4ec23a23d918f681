// Tokenizer encode throughput: MB/s of llmrt::Tokenizer::encode on one text file, one thread,
// best of N repetitions. Not a test; tokenizer_bench.py runs it beside Hugging Face tokenizers.
//
//   tokenizer_bench --tokenizer PATH --text FILE [--reps N] [--no-cache-warmup]
//
// PATH is anything llmc::loadTokenizerFrom takes (tokenizer.json, folder, GPT-2 files, .gguf,
// plan). Each repetition encodes the whole file in one call (add_special=false,
// parse_special=true). The first, untimed pass fills the tokenizer's word cache as a long-running
// server's would; --no-cache-warmup times a cold tokenizer instead (a fresh one per repetition).
// Prints one line: key=value pairs (tokens, bytes, best_s, mb_per_s, tokens_per_s).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/tokenizer/TokenizerSource.h"
#include "runtime/tokenizer/tokenizer.h"

namespace {

int usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s --tokenizer PATH --text FILE [--reps N] [--no-cache-warmup]\n", argv0);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string tokPath, textPath;
  int reps = 5;
  bool warm = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc)
      tokPath = argv[++i];
    else if (a == "--text" && i + 1 < argc)
      textPath = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--no-cache-warmup")
      warm = false;
    else
      return usage(argv[0]);
  }
  if (tokPath.empty() || textPath.empty() || reps < 1)
    return usage(argv[0]);

  std::ifstream f(textPath, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "tokenizer_bench: cannot open '%s'\n", textPath.c_str());
    return 1;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();

  auto data = llmc::loadTokenizerFrom(tokPath);
  if (!data.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", data.status().to_string().c_str());
    return 1;
  }
  auto makeTokenizer = [&]() { return llmrt::Tokenizer::create(*data); };
  auto tok = makeTokenizer();
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  size_t numTokens = 0;
  if (warm) {
    auto ids = (*tok)->encode(text, false, true);
    if (!ids.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", ids.status().to_string().c_str());
      return 1;
    }
  }
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    if (!warm) {
      tok = makeTokenizer();  // a fresh (empty) word cache; creation is not timed
      if (!tok.ok())
        return 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    auto ids = (*tok)->encode(text, false, true);
    auto t1 = std::chrono::steady_clock::now();
    if (!ids.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", ids.status().to_string().c_str());
      return 1;
    }
    numTokens = ids->size();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("impl=llmrt tokens=%zu bytes=%zu reps=%d warm_cache=%d best_s=%.6f mb_per_s=%.3f "
              "tokens_per_s=%.0f\n",
              numTokens, text.size(), reps, warm ? 1 : 0, best, mb / best,
              static_cast<double>(numTokens) / best);
  return 0;
}

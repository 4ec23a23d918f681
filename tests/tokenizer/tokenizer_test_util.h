// Test helpers: the llama.cpp tokenizer test vectors (X.gguf.inp / X.gguf.out) and a minimal
// GGUF metadata reader for the vocab-only files. Test-only; the product reads GGUF through
// compiler/frontend/Gguf.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer_data.h"

namespace llmrt::testing {

inline std::string data_dir() { return LLMC_TOKENIZER_DATA_DIR; }

inline bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

/// Reads texts separated by "\n__ggml_vocab_test__\n" (the file ends with the separator) from
/// `inp_path` and one line of ids per text from `out_path`.
inline std::vector<VocabCase> read_cases(const std::string& inp_path, const std::string& out_path) {
  std::string inp, outp;
  std::vector<VocabCase> cases;
  if (!read_file(inp_path, &inp) || !read_file(out_path, &outp)) return cases;
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (true) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream lines(outp);
  std::string line;
  for (const std::string& text : texts) {
    if (!std::getline(lines, line)) break;
    VocabCase c;
    c.text = text;
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

inline std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  return read_cases(gguf_path + ".inp", gguf_path + ".out");
}

/// Just enough GGUF (v2/v3, little-endian) to pull tokenizer.ggml.* out of a vocab file.
class MiniGguf {
 public:
  bool load(const std::string& path) {
    if (!read_file(path, &bytes_)) return false;
    pos_ = 0;
    char magic[4];
    if (!raw(magic, 4) || std::memcmp(magic, "GGUF", 4) != 0) return false;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!pod(&version) || !pod(&n_tensors) || !pod(&n_kv)) return false;
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key;
      uint32_t type;
      if (!str(&key) || !pod(&type)) return false;
      if (!value(key, type)) return false;
    }
    return true;
  }

  /// Fills the fields a vocab file has (byte-level BPE, or SentencePiece-style with scores).
  bool tokenizer_data(TokenizerData* d) const {
    d->model = "bpe";
    d->byte_level = model_ == "gpt2";
    d->pre = pre_;
    d->tokens = tokens_;
    d->token_types = types_;
    d->merges = merges_;
    d->scores = scores_;
    d->bos_id = bos_;
    d->eos_id = eos_;
    d->pad_id = pad_;
    d->add_bos = add_bos_;
    return !tokens_.empty();
  }

 private:
  bool raw(void* dst, size_t n) {
    if (n > bytes_.size() - pos_) return false;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool pod(T* v) { return raw(v, sizeof(T)); }
  bool str(std::string* s) {
    uint64_t n;
    if (!pod(&n) || n > bytes_.size() - pos_) return false;
    s->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  static size_t scalar_size(uint32_t type) {
    switch (type) {
      case 0: case 1: case 7: return 1;
      case 2: case 3: return 2;
      case 4: case 5: case 6: return 4;
      case 10: case 11: case 12: return 8;
      default: return 0;
    }
  }
  bool int_value(uint32_t type, int64_t* v) {
    size_t n = scalar_size(type);
    if (n == 0 || type == 6 || type == 12) return false;
    uint64_t u = 0;
    if (!raw(&u, n)) return false;
    if (type == 1 && (u & 0x80)) u |= ~0xFFull;
    if (type == 3 && (u & 0x8000)) u |= ~0xFFFFull;
    if (type == 5 && (u & 0x80000000u)) u |= ~0xFFFFFFFFull;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool value(const std::string& key, uint32_t type) {
    if (type == 8) {
      std::string s;
      if (!str(&s)) return false;
      if (key == "tokenizer.ggml.model") model_ = s;
      if (key == "tokenizer.ggml.pre") pre_ = s;
      return true;
    }
    if (type == 9) {
      uint32_t et;
      uint64_t n;
      if (!pod(&et) || !pod(&n)) return false;
      std::vector<std::string>* strings = key == "tokenizer.ggml.tokens"   ? &tokens_
                                          : key == "tokenizer.ggml.merges" ? &merges_
                                                                           : nullptr;
      for (uint64_t i = 0; i < n; ++i) {
        if (et == 8) {
          std::string s;
          if (!str(&s)) return false;
          if (strings) strings->push_back(std::move(s));
        } else if (et == 9) {
          return false;  // nested arrays: not in vocab files
        } else {
          int64_t v = 0;
          size_t sz = scalar_size(et);
          if (sz == 0) return false;
          if (et == 6 && key == "tokenizer.ggml.scores") {
            float f;
            if (!pod(&f)) return false;
            scores_.push_back(f);
          } else if (et == 6 || et == 12) {
            pos_ += sz;
            if (pos_ > bytes_.size()) return false;
          } else if (!int_value(et, &v)) {
            return false;
          }
          if (key == "tokenizer.ggml.token_type") types_.push_back(static_cast<int32_t>(v));
        }
      }
      return true;
    }
    size_t sz = scalar_size(type);
    if (sz == 0) return false;
    if (type == 6 || type == 12) {
      pos_ += sz;
      return pos_ <= bytes_.size();
    }
    int64_t v;
    if (!int_value(type, &v)) return false;
    if (key == "tokenizer.ggml.bos_token_id") bos_ = static_cast<int32_t>(v);
    if (key == "tokenizer.ggml.eos_token_id") eos_ = static_cast<int32_t>(v);
    if (key == "tokenizer.ggml.padding_token_id") pad_ = static_cast<int32_t>(v);
    if (key == "tokenizer.ggml.add_bos_token") add_bos_ = v != 0;
    return true;
  }

  std::string bytes_;
  size_t pos_ = 0;
  std::string model_, pre_;
  std::vector<std::string> tokens_, merges_;
  std::vector<int32_t> types_;
  std::vector<float> scores_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  bool add_bos_ = false;
};

}  // namespace llmrt::testing

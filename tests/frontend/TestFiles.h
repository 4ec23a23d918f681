//===- TestFiles.h - Build tiny safetensors/GGUF files byte by byte -------===//
//
// Test helpers: the files are written here, independently of the readers, so
// the tests can create valid inputs and then break them on purpose.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace llmc::test {

using Bytes = std::vector<uint8_t>;

template <typename T> void put(Bytes &b, T v) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  b.insert(b.end(), raw, raw + sizeof(T));
}
inline void putString(Bytes &b, const std::string &s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
inline Bytes floatBytes(const std::vector<float> &v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// f32 → IEEE half, round to nearest even (normal range only; tests use
/// moderate values).
inline uint16_t toHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFFu;
  if ((x & 0x7FFFFFFFu) == 0)
    return static_cast<uint16_t>(sign);
  if (exp <= 0 || exp >= 31)
    std::abort(); // out of the range these tests need
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(h);
}
inline uint16_t toBf16(float f) { // truncation is exact for the test values
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>(x >> 16);
}

/// A simple Q8_0 quantizer (d = max|x| / 127, q = round(x / d)).
inline Bytes quantizeQ8_0(const std::vector<float> &x) {
  Bytes out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
    float d = amax / 127.0f;
    uint16_t dh = toHalf(d);
    put<uint16_t>(out, dh);
    for (int j = 0; j < 32; ++j) {
      int q = d == 0 ? 0 : static_cast<int>(std::lround(x[b * 32 + j] / d));
      put<int8_t>(out, static_cast<int8_t>(std::clamp(q, -127, 127)));
    }
  }
  return out;
}

inline std::vector<float> randomFloats(size_t n, uint32_t seed,
                                       float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// GGUF metadata + tensors, serialized by build().
class GgufBuilder {
public:
  enum Type : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12
  };
  uint32_t version = 3;
  std::string magic = "GGUF";
  uint64_t alignment = 32;

  void raw(const std::string &key, uint32_t type, const Bytes &payload) {
    Bytes b;
    putString(b, key);
    put<uint32_t>(b, type);
    b.insert(b.end(), payload.begin(), payload.end());
    kvs_.push_back(std::move(b));
  }
  void addU32(const std::string &key, uint32_t v) {
    Bytes p;
    put(p, v);
    raw(key, U32, p);
  }
  void addI32(const std::string &key, int32_t v) {
    Bytes p;
    put(p, v);
    raw(key, I32, p);
  }
  void addU64(const std::string &key, uint64_t v) {
    Bytes p;
    put(p, v);
    raw(key, U64, p);
  }
  void addF32(const std::string &key, float v) {
    Bytes p;
    put(p, v);
    raw(key, F32, p);
  }
  void addBool(const std::string &key, bool v) {
    Bytes p;
    put<uint8_t>(p, v ? 1 : 0);
    raw(key, BOOL, p);
  }
  void addString(const std::string &key, const std::string &v) {
    Bytes p;
    putString(p, v);
    raw(key, STRING, p);
  }
  void addStringArray(const std::string &key, const std::vector<std::string> &v) {
    Bytes p;
    put<uint32_t>(p, STRING);
    put<uint64_t>(p, v.size());
    for (const auto &s : v)
      putString(p, s);
    raw(key, ARRAY, p);
  }
  void addI32Array(const std::string &key, const std::vector<int32_t> &v) {
    Bytes p;
    put<uint32_t>(p, I32);
    put<uint64_t>(p, v.size());
    for (int32_t x : v)
      put(p, x);
    raw(key, ARRAY, p);
  }
  /// dims innermost first (GGUF order).
  void addTensor(const std::string &name, uint32_t ggmlType,
                 std::vector<uint64_t> dims, Bytes data) {
    tensors_.push_back({name, ggmlType, std::move(dims), std::move(data), -1});
  }
  /// Forces the recorded data offset of the last tensor.
  void overrideLastOffset(int64_t offset) { tensors_.back().forcedOffset = offset; }

  Bytes build() const {
    Bytes b(magic.begin(), magic.end());
    put<uint32_t>(b, version);
    put<uint64_t>(b, tensors_.size());
    put<uint64_t>(b, kvs_.size());
    for (const Bytes &kv : kvs_)
      b.insert(b.end(), kv.begin(), kv.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor &t : tensors_) {
      putString(b, t.name);
      put<uint32_t>(b, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims)
        put<uint64_t>(b, d);
      put<uint32_t>(b, t.type);
      uint64_t recorded = t.forcedOffset >= 0 ? t.forcedOffset : offset;
      put<uint64_t>(b, recorded);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (b.size() % alignment)
      b.push_back(0);
    size_t dataStart = b.size();
    b.resize(dataStart + offset, 0);
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (!tensors_[i].data.empty())
        std::memcpy(b.data() + dataStart + offsets[i], tensors_[i].data.data(),
                  tensors_[i].data.size());
    return b;
  }

private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    Bytes data;
    int64_t forcedOffset;
  };
  std::vector<Bytes> kvs_;
  std::vector<Tensor> tensors_;
};

/// A safetensors file from a header JSON text and the data section.
inline Bytes makeSafetensors(const std::string &header, const Bytes &data) {
  Bytes b;
  put<uint64_t>(b, header.size());
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// Collects named tensors into a valid safetensors file (header padded to 8).
class SafetensorsBuilder {
public:
  void add(const std::string &name, const std::string &dtype,
           const std::vector<int64_t> &shape, const Bytes &data) {
    std::string shapeText = "[";
    for (size_t i = 0; i < shape.size(); ++i)
      shapeText += (i ? "," : "") + std::to_string(shape[i]);
    shapeText += "]";
    if (!entries_.empty())
      entries_ += ",";
    entries_ += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" +
                shapeText + ",\"data_offsets\":[" + std::to_string(data_.size()) +
                "," + std::to_string(data_.size() + data.size()) + "]}";
    data_.insert(data_.end(), data.begin(), data.end());
  }
  void addF32(const std::string &name, const std::vector<int64_t> &shape,
              const std::vector<float> &v) {
    add(name, "F32", shape, floatBytes(v));
  }
  Bytes build() const {
    std::string header =
        "{\"__metadata__\":{\"format\":\"pt\"}" +
        std::string(entries_.empty() ? "" : ",") + entries_ + "}";
    while ((header.size() + 8) % 8)
      header += ' ';
    return makeSafetensors(header, data_);
  }

private:
  std::string entries_;
  Bytes data_;
};

/// A fresh temporary folder, removed (shallowly) at destruction.
class TempDir {
public:
  TempDir() {
    char tmpl[] = "/tmp/llmc_frontend_test_XXXXXX";
    const char *p = mkdtemp(tmpl);
    path_ = p ? p : "/tmp";
  }
  ~TempDir() {
    for (const std::string &f : files_)
      std::remove(f.c_str());
    ::rmdir(path_.c_str());
  }
  const std::string &path() const { return path_; }
  std::string write(const std::string &name, const Bytes &bytes) {
    std::string p = path_ + "/" + name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    files_.push_back(p);
    return p;
  }
  std::string write(const std::string &name, const std::string &text) {
    return write(name, Bytes(text.begin(), text.end()));
  }

private:
  std::string path_;
  std::vector<std::string> files_;
};

} // namespace llmc::test

//===- Dequant.cpp - Checkpoint element formats to f32 --------------------===//

#include "compiler/frontend/Dequant.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>

static_assert(std::endian::native == std::endian::little,
              "the checkpoint readers assume a little-endian host");

namespace llmc {

namespace {
uint16_t loadU16(const uint8_t *p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
} // namespace

float halfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign; // signed zero
    } else {
      // Subnormal: value = mantissa * 2^-24; normalize.
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3FFu;
      out = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) |
            (mantissa << 13);
    }
  } else if (exponent == 0x1F) {
    out = sign | 0x7F800000u | (mantissa << 13); // inf / nan
  } else {
    out = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(out);
}

float bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

int64_t blockElements(SourceDType type) {
  switch (type) {
  case SourceDType::F32:
  case SourceDType::F16:
  case SourceDType::BF16:
    return 1;
  case SourceDType::Q8_0:
  case SourceDType::Q4_0:
  case SourceDType::Q4_1:
    return 32;
  case SourceDType::Packed:
    return 1;
  }
  return 1;
}

int64_t blockBytes(SourceDType type) {
  switch (type) {
  case SourceDType::F32:
    return 4;
  case SourceDType::F16:
  case SourceDType::BF16:
    return 2;
  case SourceDType::Q8_0:
    return 34;
  case SourceDType::Q4_0:
    return 18;
  case SourceDType::Q4_1:
    return 20;
  case SourceDType::Packed:
    return -1;
  }
  return 4;
}

int64_t storageBytes(SourceDType type, int64_t numElements) {
  int64_t perBlock = blockElements(type);
  if (numElements < 0 || numElements % perBlock != 0)
    return -1;
  int64_t blocks = numElements / perBlock;
  int64_t bytes = blockBytes(type);
  if (blocks > std::numeric_limits<int64_t>::max() / bytes)
    return -1;
  return blocks * bytes;
}

void convertF16(const uint8_t *src, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = halfToFloat(loadU16(src + 2 * i));
}

void convertBF16(const uint8_t *src, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(loadU16(src + 2 * i));
}

void dequantizeQ8_0(const uint8_t *blocks, int64_t numBlocks, float *out) {
  for (int64_t b = 0; b < numBlocks; ++b) {
    const uint8_t *block = blocks + b * 34;
    float d = halfToFloat(loadU16(block));
    const int8_t *qs = reinterpret_cast<const int8_t *>(block + 2);
    for (int j = 0; j < 32; ++j)
      out[b * 32 + j] = d * static_cast<float>(qs[j]);
  }
}

void dequantizeQ4_0(const uint8_t *blocks, int64_t numBlocks, float *out) {
  for (int64_t b = 0; b < numBlocks; ++b) {
    const uint8_t *block = blocks + b * 18;
    float d = halfToFloat(loadU16(block));
    const uint8_t *qs = block + 2;
    float *y = out + b * 32;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(static_cast<int>(qs[j] & 0x0F) - 8);
      y[j + 16] = d * static_cast<float>(static_cast<int>(qs[j] >> 4) - 8);
    }
  }
}

void dequantizeQ4_1(const uint8_t *blocks, int64_t numBlocks, float *out) {
  for (int64_t b = 0; b < numBlocks; ++b) {
    const uint8_t *block = blocks + b * 20;
    float d = halfToFloat(loadU16(block));
    float m = halfToFloat(loadU16(block + 2));
    const uint8_t *qs = block + 4;
    float *y = out + b * 32;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

llmrt::Status dequantize(SourceDType type, const uint8_t *src, size_t srcBytes,
                         int64_t numElements, float *out) {
  int64_t expected = storageBytes(type, numElements);
  if (expected < 0)
    return llmrt::invalid_argument(
        std::to_string(numElements) + " elements of " + sourceDTypeName(type) +
        " do not fill whole blocks of " + std::to_string(blockElements(type)));
  if (static_cast<uint64_t>(expected) != srcBytes)
    return llmrt::invalid_argument(
        std::string(sourceDTypeName(type)) + " data of " +
        std::to_string(numElements) + " elements needs " +
        std::to_string(expected) + " bytes, got " + std::to_string(srcBytes));
  int64_t blocks = numElements / blockElements(type);
  switch (type) {
  case SourceDType::F32:
    if (numElements > 0)
      std::memcpy(out, src, srcBytes);
    break;
  case SourceDType::F16:
    convertF16(src, numElements, out);
    break;
  case SourceDType::BF16:
    convertBF16(src, numElements, out);
    break;
  case SourceDType::Q8_0:
    dequantizeQ8_0(src, blocks, out);
    break;
  case SourceDType::Q4_0:
    dequantizeQ4_0(src, blocks, out);
    break;
  case SourceDType::Q4_1:
    dequantizeQ4_1(src, blocks, out);
    break;
  case SourceDType::Packed:
    return llmrt::invalid_argument("a packed quantized tensor is converted by its source");
  }
  return llmrt::ok_status();
}

} // namespace llmc

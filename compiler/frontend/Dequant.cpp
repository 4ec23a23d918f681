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
  case SourceDType::Q5_0:
  case SourceDType::Q5_1:
  case SourceDType::IQ4_NL:
    return 32;
  case SourceDType::Q2_K:
  case SourceDType::Q3_K:
  case SourceDType::Q4_K:
  case SourceDType::Q5_K:
  case SourceDType::Q6_K:
  case SourceDType::IQ4_XS:
    return 256;
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
  case SourceDType::Q5_0:
    return 22;
  case SourceDType::Q5_1:
    return 24;
  case SourceDType::Q4_K:
    return 144;
  case SourceDType::Q5_K:
    return 176;
  case SourceDType::Q6_K:
    return 210;
  case SourceDType::Q3_K:
    return 110;
  case SourceDType::Q2_K:
    return 84;
  case SourceDType::IQ4_NL:
    return 18;
  case SourceDType::IQ4_XS:
    return 136;
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

std::optional<llmrt::quant::Format> heldFormat(SourceDType type) {
  using llmrt::quant::Offset;
  using llmrt::quant::ScaleType;
  auto fmt = [](int bits, int64_t group, ScaleType scale, Offset offset, int64_t sub = 0) {
    return std::optional(llmrt::quant::Format{bits, group, scale, offset, sub});
  };
  switch (type) {
  case SourceDType::Q8_0: return fmt(8, 32, ScaleType::kF16, Offset::kSym);
  case SourceDType::Q4_0: return fmt(4, 32, ScaleType::kF16, Offset::kSym);
  case SourceDType::Q4_1: return fmt(4, 32, ScaleType::kF16, Offset::kMin);
  case SourceDType::Q5_0: return fmt(5, 32, ScaleType::kF16, Offset::kSym);
  case SourceDType::Q5_1: return fmt(5, 32, ScaleType::kF16, Offset::kMin);
  case SourceDType::Q4_K: return fmt(4, 256, ScaleType::kF16, Offset::kMin, 32);
  case SourceDType::Q5_K: return fmt(5, 256, ScaleType::kF16, Offset::kMin, 32);
  case SourceDType::Q6_K: return fmt(8, 256, ScaleType::kF16, Offset::kSym, 16);
  case SourceDType::Q3_K: return fmt(4, 256, ScaleType::kF16, Offset::kSym, 16);
  case SourceDType::Q2_K: return fmt(4, 256, ScaleType::kF16, Offset::kMin, 16);
  case SourceDType::IQ4_NL: return fmt(4, 32, ScaleType::kF16, Offset::kNl);
  case SourceDType::IQ4_XS: return fmt(4, 256, ScaleType::kF16, Offset::kNl, 32);
  default: return std::nullopt;
  }
}

bool widenedBlocks(SourceDType type) {
  switch (type) {
  case SourceDType::Q2_K:
  case SourceDType::Q3_K:
  case SourceDType::Q4_K:
  case SourceDType::Q5_K:
  case SourceDType::Q6_K:
  case SourceDType::IQ4_XS:
    return true;
  default:
    return false;
  }
}

namespace {

// The held bytes of one block at most: Q6_K's 256 elements, 18 header bytes and 256 codes.
constexpr size_t kMaxHeldBlockBytes = 274;

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes
// (j < 4: the low 6 bits of bytes j and j + 4; else 4 bits from byte j + 4
// and the top 2 bits of bytes j - 4 and j).
void kScaleMin(int j, const uint8_t *s, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// One Q4_K / Q5_K block as a group of 256 with sub-scales of 32: d, -dmin
// (the half's sign flipped: exact), the 8 codes sc, the 8 codes m, then
// the codes; `codes(j, l)` is element l of sub-block j.
template <typename Codes>
uint8_t *kGroups(const uint8_t *block, int bits, Codes &&codes, uint8_t *out) {
  std::memcpy(out, block, 2);
  const uint16_t negMin = loadU16(block + 2) ^ 0x8000u;
  std::memcpy(out + 2, &negMin, 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    kScaleMin(j, block + 4, &sc, &m);
    out[4 + j] = static_cast<uint8_t>(sc);
    out[12 + j] = static_cast<uint8_t>(m);
  }
  out += 20;
  for (int j = 0; j < 8; ++j) {
    if (bits == 5) { // the fifth bits as a word (bit l: element l), then the nibbles
      uint32_t high = 0;
      for (int l = 0; l < 32; ++l)
        high |= static_cast<uint32_t>(codes(j, l) >> 4) << l;
      std::memcpy(out, &high, 4);
      out += 4;
    }
    for (int l = 0; l < 16; ++l)
      out[l] = static_cast<uint8_t>((codes(j, l) & 15) | (codes(j, l + 16) & 15) << 4);
    out += 16;
  }
  return out;
}

// Q3_K: the 6-bit scale of sub-block s (0..15) from the 12 packed bytes: its low 4 bits are the
// low (s < 8) or high nibble of byte s % 8, its top 2 bits are bits 2 (s / 4) of byte 8 + s % 4.
int q3Scale(int s, const uint8_t *b) {
  const int low = s < 8 ? b[s] & 0x0F : b[s - 8] >> 4;
  return low | ((b[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

// Q2_K / Q3_K: the 2 bits of element e = 128 h + 32 j + l of a block, (qs[32 h + l] >> 2 j) & 3.
int low2Bits(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }

// The 256 int4 codes code(e) of a block as our int4 groups' 128 bytes (byte i of sub-block m: element
// 32 m + i low, 32 m + 16 + i high; so the sub-blocks of 16 of s16 formats are the low and the
// high nibbles of each 16 bytes); returns out past them.
template <typename Code>
uint8_t *int4Nibbles(Code &&code, uint8_t *out) {
  for (int m = 0; m < 8; ++m, out += 16)
    for (int i = 0; i < 16; ++i)
      out[i] = static_cast<uint8_t>(code(32 * m + i) | code(32 * m + 16 + i) << 4);
  return out;
}

} // namespace

void repackBlocks(SourceDType type, const uint8_t *blocks, int64_t numBlocks,
                  uint8_t *out) {
  const int64_t bb = blockBytes(type);
  if (!widenedBlocks(type)) { // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: our g32 groups bit for bit
    std::memcpy(out, blocks, static_cast<size_t>(numBlocks * bb));
    return;
  }
  for (int64_t b = 0; b < numBlocks; ++b) {
    const uint8_t *blk = blocks + b * bb;
    switch (type) {
    case SourceDType::Q4_K: {
      const uint8_t *qs = blk + 16; // 4 runs of 32 bytes: sub-blocks 2c (low), 2c + 1 (high)
      out = kGroups(blk, 4, [&](int j, int l) {
        const uint8_t byte = qs[32 * (j / 2) + l];
        return j % 2 ? byte >> 4 : byte & 0x0F;
      }, out);
      break;
    }
    case SourceDType::Q5_K: {
      const uint8_t *qh = blk + 16, *qs = blk + 48;
      out = kGroups(blk, 5, [&](int j, int l) {
        const uint8_t byte = qs[32 * (j / 2) + l];
        const int low = j % 2 ? byte >> 4 : byte & 0x0F;
        return low | ((qh[l] >> j) & 1) << 4; // bit j of qh[l]: sub-block j's 5th bit
      }, out);
      break;
    }
    case SourceDType::Q6_K: {
      const uint8_t *ql = blk, *qh = blk + 128;
      std::memcpy(out, blk + 208, 2);       // d
      std::memcpy(out + 2, blk + 192, 16);  // the 16 int8 scales
      out += 18;
      for (int g = 0; g < 16; ++g) { // elements 16 g .. 16 g + 15
        for (int i = 0; i < 16; ++i) {
          const int e = 16 * g + i, n = e / 128, quarter = e % 128 / 32, l = e % 32;
          // quarters 0, 1: low nibbles of ql[l], ql[l + 32]; 2, 3: high nibbles;
          // the top 2 bits at bits 2 * quarter of qh[l] (each half 64 ql, 32 qh bytes)
          const uint8_t low = ql[64 * n + l + 32 * (quarter % 2)];
          const int q = (quarter < 2 ? low & 0x0F : low >> 4) |
                        ((qh[32 * n + l] >> (2 * quarter)) & 3) << 4;
          out[i] = static_cast<uint8_t>(static_cast<int8_t>(q - 32));
        }
        out += 16;
      }
      break;
    }
    case SourceDType::Q3_K: {
      // { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }: element e = 128 h + 32 j + l has
      // the 2 bits (qs[32 h + l] >> 2 j) & 3, minus 4 unless bit 4 h + j of hmask[l] is set
      // (c in -4..3), and sub-block e / 16's scale d * (sc - 32): a group of 256 with the scale
      // d, the sub-scale codes sc - 32 and int4 sym codes c + 8, nibbles as Q4_0's (so the
      // sub-blocks of 16 are the low and high nibbles of each 16 bytes).
      const uint8_t *hmask = blk, *qs = blk + 32, *scales = blk + 96;
      std::memcpy(out, blk + 108, 2); // d
      for (int s = 0; s < 16; ++s)
        out[2 + s] = static_cast<uint8_t>(static_cast<int8_t>(q3Scale(s, scales) - 32));
      out += 18;
      out = int4Nibbles([&](int e) {
        const bool high = (hmask[e % 32] >> (4 * (e / 128) + e % 128 / 32)) & 1;
        return low2Bits(qs, e) - (high ? 0 : 4) + 8;
      }, out);
      break;
    }
    case SourceDType::Q2_K: {
      // { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; }: element e = 128 h + 32 j + l has the 2
      // bits (qs[32 h + l] >> 2 j) & 3, and sub-block e / 16 the scale d * (scales[e / 16] & 15)
      // and the min dmin * (scales[e / 16] >> 4), subtracted: a group of 256 with d, -dmin (the
      // half's sign flipped: exact), the 16 codes sc, the 16 codes m, then the codes q as int4
      // (sub-blocks of 16: the low and high nibbles of each 16 bytes, as Q3_K's).
      const uint8_t *scales = blk, *qs = blk + 16;
      std::memcpy(out, blk + 80, 2); // d
      const uint16_t negMin = loadU16(blk + 82) ^ 0x8000u;
      std::memcpy(out + 2, &negMin, 2);
      for (int s = 0; s < 16; ++s) {
        out[4 + s] = scales[s] & 0x0F;
        out[20 + s] = scales[s] >> 4;
      }
      out += 36;
      out = int4Nibbles([&](int e) { return low2Bits(qs, e); }, out);
      break;
    }
    case SourceDType::IQ4_XS: {
      // { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: sub-block s of 32 has the 6-bit
      // scale ls = nibble s % 2 of scales_l[s / 2] | bits 2 s of scales_h << 4, y = d * (ls - 32)
      // * grid[q], its 16 code bytes at qs[16 s] as in IQ4_NL (and our int4 groups).
      const uint16_t high = loadU16(blk + 2);
      std::memcpy(out, blk, 2); // d
      for (int s = 0; s < 8; ++s) {
        const int ls = ((blk[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | ((high >> (2 * s)) & 3) << 4;
        out[2 + s] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
      }
      std::memcpy(out + 10, blk + 8, 128);
      out += 138;
      break;
    }
    default:
      break;
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
  case SourceDType::Q5_0:
  case SourceDType::Q5_1:
  case SourceDType::Q4_K:
  case SourceDType::Q5_K:
  case SourceDType::Q6_K:
  case SourceDType::Q3_K:
  case SourceDType::Q2_K:
  case SourceDType::IQ4_NL:
  case SourceDType::IQ4_XS: {
    // Through the exact held format, a block at a time (its values are ggml's).
    const llmrt::quant::Format f = *heldFormat(type);
    const int64_t be = blockElements(type);
    uint8_t groups[kMaxHeldBlockBytes];
    for (int64_t b = 0; b < blocks; ++b) {
      repackBlocks(type, src + b * blockBytes(type), 1, groups);
      llmrt::quant::dequantize_row(f, groups, be, out + b * be);
    }
    break;
  }
  case SourceDType::Packed:
    return llmrt::invalid_argument("a packed quantized tensor is converted by its source");
  }
  return llmrt::ok_status();
}

} // namespace llmc

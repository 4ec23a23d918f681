//===- Dequant.h - Checkpoint element formats to f32 -----------*- C++ -*-===//
//
// F16, BF16 and the ggml block formats Q8_0, Q4_0, Q4_1 converted to f32.
// Block layouts (little-endian, as in ggml's public block structs):
//   Q8_0: { f16 d; int8 qs[32]; }                 34 bytes, y = d * q
//   Q4_0: { f16 d; uint8 qs[16]; }                18 bytes, y = d * (q - 8)
//   Q4_1: { f16 d; f16 m; uint8 qs[16]; }         20 bytes, y = d * q + m
// In the 4-bit formats byte j holds element j in its low nibble and element
// j + 16 in its high nibble.
//
// ggml's other blocks (layouts as in its public block structs; written here
// from the format's definition) are held exactly in one of our quantized
// formats (runtime/quant/quant_format.h), some wider than the file:
//   Q5_0: { f16 d; u8 qh[4]; u8 qs[16]; }   22 bytes / 32, y = d * (q - 16)
//         -> int5-g32-f16-sym, bit for bit
//   Q5_1: { f16 d; f16 m; u8 qh[4]; u8 qs[16]; } 24 / 32,   y = d * q + m
//         -> int5-g32-f16-min, bit for bit
//   (q's 5th bit: bit j of qh for element j; low 4 bits as in Q4_0)
//   Q4_K: { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } 144 bytes / 256:
//         8 sub-blocks of 32 with 6-bit scale sc and min m packed in scales;
//         y = (d * sc) * q - dmin * m  -> int4-g256s32-f16-min  148 bytes / 256
//         (sub-scales: d, -dmin, the codes sc and m unpacked to a byte each)
//   Q5_K: Q4_K's header, then u8 qh[32], u8 qs[128]: 176 bytes / 256,
//         5-bit q                      -> int5-g256s32-f16-min  180 bytes / 256
//   Q6_K: { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } 210 bytes / 256:
//         16 sub-blocks of 16, y = (d * sc) * (q - 32), q 6-bit
//                                      -> int8-g256s16-f16-sym  274 bytes / 256
//   Q3_K: { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; } 110 bytes / 256:
//         16 sub-blocks of 16, y = (d * (sc - 32)) * q, q = 2 bits of qs minus
//         4 where hmask's bit is clear (-4..3), sc 6-bit
//                                      -> int4-g256s16-f16-sym  146 bytes / 256
//         (sub-scale codes sc - 32, codes q + 8)
//   Q2_K: { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; } 84 bytes / 256:
//         16 sub-blocks of 16 with 4-bit scale sc and min m (the low and high
//         nibbles of scales[s]), y = (d * sc) * q - dmin * m, q the 2 bits
//         (qs[32 h + l] >> 2 j) & 3 of element 128 h + 32 j + l
//                                      -> int4-g256s16-f16-min  164 bytes / 256
//         (the min negated, codes sc, m and q as they are)
//   IQ4_NL: { f16 d; u8 qs[16]; } 18 bytes / 32, y = d * grid[q], grid
//         ggml's 16 non-linear int8 values (quant::kNlGrid), nibbles as
//         Q4_0                         -> int4-g32-f16-nl, bit for bit
//   IQ4_XS: { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; } 136 / 256:
//         8 sub-blocks of 32, y = (d * (ls - 32)) * grid[q], ls 6-bit
//                                      -> int4-g256s32-f16-nl   138 bytes / 256
// (The grid-coded IQ1 / IQ2 / IQ3 types have no exact held format and are
// refused by name.)
// d * sc is exact in f32 (at most 11 + 8 significant bits), so every value
// is the one ggml's dequantization computes (and the sub-scale formats' values
// are those of their f32-scale expansion, quant::expand_row).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Model.h"

#include "runtime/quant/quant_format.h"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace llmc {

float halfToFloat(uint16_t bits);
float bf16ToFloat(uint16_t bits);

/// Elements per block (1 for F32/F16/BF16, 32 or 256 for the ggml block types).
int64_t blockElements(SourceDType type);
/// Bytes per block (4 for F32, ggml's block size for the block types).
int64_t blockBytes(SourceDType type);
/// Bytes that `numElements` elements of `type` occupy, or -1 when
/// numElements is negative, not a multiple of the block size, or overflows.
int64_t storageBytes(SourceDType type, int64_t numElements);

void convertF16(const uint8_t *src, int64_t n, float *out);
void convertBF16(const uint8_t *src, int64_t n, float *out);
void dequantizeQ8_0(const uint8_t *blocks, int64_t numBlocks, float *out);
void dequantizeQ4_0(const uint8_t *blocks, int64_t numBlocks, float *out);
void dequantizeQ4_1(const uint8_t *blocks, int64_t numBlocks, float *out);

/// The format (cpu_row_groups) that holds a 2-D tensor of a ggml block type
/// exactly (above): Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL bit for bit, the
/// others widened; nullopt for float types.
std::optional<llmrt::quant::Format> heldFormat(SourceDType type);
/// Whether heldFormat(type) is wider than the file's blocks (all but Q8_0, Q4_0, Q4_1, Q5_0,
/// Q5_1, IQ4_NL).
bool widenedBlocks(SourceDType type);
/// Writes `numBlocks` consecutive blocks of `type` (a row's worth) as
/// heldFormat(type)'s groups: row_bytes(format, numBlocks * blockElements).
void repackBlocks(SourceDType type, const uint8_t *blocks, int64_t numBlocks,
                  uint8_t *out);

/// Converts `numElements` elements of `type` stored in src[srcBytes] to f32.
/// Fails when srcBytes does not match storageBytes(type, numElements).
llmrt::Status dequantize(SourceDType type, const uint8_t *src, size_t srcBytes,
                         int64_t numElements, float *out);

} // namespace llmc

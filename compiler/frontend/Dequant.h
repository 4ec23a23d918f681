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
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Model.h"

#include <cstddef>
#include <cstdint>

namespace llmc {

float halfToFloat(uint16_t bits);
float bf16ToFloat(uint16_t bits);

/// Elements per block (1 for F32/F16/BF16, 32 for the Q formats).
int64_t blockElements(SourceDType type);
/// Bytes per block (4, 2, 2, 34, 18, 20).
int64_t blockBytes(SourceDType type);
/// Bytes that `numElements` elements of `type` occupy, or -1 when
/// numElements is negative, not a multiple of the block size, or overflows.
int64_t storageBytes(SourceDType type, int64_t numElements);

void convertF16(const uint8_t *src, int64_t n, float *out);
void convertBF16(const uint8_t *src, int64_t n, float *out);
void dequantizeQ8_0(const uint8_t *blocks, int64_t numBlocks, float *out);
void dequantizeQ4_0(const uint8_t *blocks, int64_t numBlocks, float *out);
void dequantizeQ4_1(const uint8_t *blocks, int64_t numBlocks, float *out);

/// Converts `numElements` elements of `type` stored in src[srcBytes] to f32.
/// Fails when srcBytes does not match storageBytes(type, numElements).
llmrt::Status dequantize(SourceDType type, const uint8_t *src, size_t srcBytes,
                         int64_t numElements, float *out);

} // namespace llmc

// Elementwise vector kernels of the CPU backend (no reductions), written once with Highway
// (Debian's libhwy-dev 1.0.3, header-only use) and compiled for AVX2 and AVX-512; a plain scalar
// twin of each is the portable fallback and the test oracle. Each lane performs the same IEEE
// operations in the same order as the scalar twin (fused multiply-adds only where written, the
// file is built with -ffp-contract=off), so every dispatch level gives identical bits. Which one
// runs follows active_isa(): scalar, AVX2 (kAvx2, kAvx2Vnni) or AVX-512 (kAvx512Vnni).
//
// Reductions (dot products, the f32 and quantized linear tiles) stay as intrinsics in linear.cc
// and quant_tiles.inc: their contracts fix an 8-lane reduction tree that a vector-length-agnostic
// library would not keep, and Highway 1.0.3 has no int8 dot-product op. Internal to runtime/cpu.
#pragma once

#include <cstdint>

namespace llmrt::cpu::vec {

/// o[i] = g[i] / (1 + exp(-g[i])) * u[i], exp as in vexp.h.
void silu_mul(const float* g, const float* u, int64_t n, float* o);
/// x[i] = exp(x[i] - m), exp as in vexp.h.
void exp_shifted(float* x, int64_t n, float m);
/// y[i] = fma(a, x[i], y[i]).
void axpy(float a, const float* x, float* y, int64_t n);
/// For j in 0..count-1 in order: y[i] = fma(a[j], x[j * x_stride + i], y[i]).
void axpy_rows(const float* a, int64_t count, const float* x, int64_t x_stride, float* y, int64_t n);
/// For each r < rows: axpy_rows(a[r], count, x, x_stride, y[r], n), the same bits; each x row read
/// once for several r.
void axpy_rows_multi(const float* const* a, int rows, int64_t count, const float* x, int64_t x_stride,
                     float* const* y, int64_t n);
/// c[i] = a[i] + b[i].
void add(const float* a, const float* b, float* c, int64_t n);
/// y[i] = (x[i] * s) * w[i].
void scale_mul(const float* x, float s, const float* w, float* y, int64_t n);
/// The rotation of RoPE over split halves: y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s (products
/// rounded, then the sum). y0/y1 may alias x0/x1 element for element.
void rotate(const float* x0, const float* x1, const float* c, const float* s, float* y0, float* y1,
            int64_t n);
/// out[i] = the f32 value of IEEE half h[i], exactly (quant::half_to_float; a NaN stays a NaN,
/// quieted on the SIMD path).
void widen_f16(const uint16_t* h, int64_t n, float* out);
/// out[i] = the f32 value of bf16 h[i] (its bits shifted up), exactly.
void widen_bf16(const uint16_t* h, int64_t n, float* out);
/// out[i] = the f32 value of fp8 E4M3 code c[i], exactly (quant::e4m3_to_float; a NaN code gives
/// a NaN, quiet, its sign dropped on the SIMD path).
void widen_e4m3(const uint8_t* c, int64_t n, float* out);
/// out[i] = float(c[i]) * scale (an int8 cache row: exact conversion, one rounded product).
void dequant_i8(const int8_t* c, float scale, int64_t n, float* out);

}  // namespace llmrt::cpu::vec

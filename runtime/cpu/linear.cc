// Dot products, axpy and the linear (matmul) kernel. See the numerical contract in kernels.h.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/vector_ops.h"


namespace llmrt::cpu {
namespace {

// ---------------- scalar: the executable statement of the contract ----------------

float dot_scalar(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
  float s = reduce8(acc);
  for (int64_t k = n8; k < n; ++k) s = std::fma(a[k], b[k], s);
  return s;
}

// Rows t0..t1 of x against ncols weight rows starting at w; y points at output column 0 of the
// range (row stride y_stride), bias at its first entry.
void linear_scalar(const float* x, const int32_t* rows, int64_t t0, int64_t t1, int64_t k,
                   const float* w, int64_t ncols, const float* bias, float* y, int64_t y_stride) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + (rows ? rows[t] : t) * k;
    for (int64_t j = 0; j < ncols; ++j) {
      float s = dot_scalar(xr, w + j * k, k);
      y[t * y_stride + j] = bias ? s + bias[j] : s;
    }
  }
}

// ---------------- AVX2 + FMA ----------------
#ifdef LLMRT_HAVE_X86

LLMRT_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  float s = hsum_canonical(acc);
  for (int64_t k = n8; k < n; ++k) s = __builtin_fmaf(a[k], b[k], s);
  return s;
}

// TB rows of x times NB rows of w; each of the TB*NB dot products in the canonical order.
template <int TB, int NB>
LLMRT_AVX2 inline void tile_avx2(const float* const* xr, const float* w, int64_t k,
                                 const float* bias, float* y, int64_t y_stride) {
  __m256 acc[TB][NB];
#pragma GCC unroll 8
  for (int t = 0; t < TB; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < NB; ++r) acc[t][r] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t kk = 0; kk < k8; kk += 8) {
    __m256 xv[TB];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) xv[t] = _mm256_loadu_ps(xr[t] + kk);
#pragma GCC unroll 8
    for (int r = 0; r < NB; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * k + kk);
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) acc[t][r] = _mm256_fmadd_ps(xv[t], wv, acc[t][r]);
    }
  }
  for (int t = 0; t < TB; ++t) {
    for (int r = 0; r < NB; ++r) {
      float s = hsum_canonical(acc[t][r]);
      const float* wr = w + r * k;
      for (int64_t kk = k8; kk < k; ++kk) s = __builtin_fmaf(xr[t][kk], wr[kk], s);
      y[t * y_stride + r] = bias ? s + bias[r] : s;
    }
  }
}

LLMRT_AVX2 void linear_avx2(const float* x, const int32_t* rows, int64_t t0, int64_t t1,
                            int64_t k, const float* w, int64_t ncols, const float* bias, float* y,
                            int64_t ys) {
  constexpr int64_t kRowChunk = 64;  // output rows whose weights stay in L2 across tokens
  auto xrow = [&](int64_t t) { return x + (rows ? rows[t] : t) * k; };
  for (int64_t nc = 0; nc < ncols; nc += kRowChunk) {
    const int64_t ne = std::min(nc + kRowChunk, ncols);
    int64_t t = t0;
    for (; t + 3 <= t1; t += 3) {
      const float* xr[3] = {xrow(t), xrow(t + 1), xrow(t + 2)};
      int64_t j = nc;
      for (; j + 4 <= ne; j += 4)
        tile_avx2<3, 4>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * ys + j, ys);
      for (; j < ne; ++j)
        tile_avx2<3, 1>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * ys + j, ys);
    }
    for (; t < t1; ++t) {
      const float* xr[1] = {xrow(t)};
      int64_t j = nc;
      for (; j + 8 <= ne; j += 8)
        tile_avx2<1, 8>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * ys + j, ys);
      for (; j < ne; ++j)
        tile_avx2<1, 1>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * ys + j, ys);
    }
  }
}

#endif  // LLMRT_HAVE_X86

bool use_avx2() {
#ifdef LLMRT_HAVE_X86
  return active_isa() >= CpuIsa::kAvx2;
#else
  return false;
#endif
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
#ifdef LLMRT_HAVE_X86
  if (use_avx2()) return dot_avx2(a, b, n);
#endif
  return dot_scalar(a, b, n);
}

void axpy(float a, const float* x, float* y, int64_t n) { vec::axpy(a, x, y, n); }

void axpy_rows(const float* a, int64_t count, const float* x, int64_t x_stride, float* y, int64_t n) {
  vec::axpy_rows(a, count, x, x_stride, y, n);
}

void linear_range(const float* x, const int32_t* rows, int64_t t0, int64_t t1, int64_t k,
                  const float* w, int64_t ncols, const float* bias, float* y, int64_t y_stride) {
#ifdef LLMRT_HAVE_X86
  if (use_avx2()) return linear_avx2(x, rows, t0, t1, k, w, ncols, bias, y, y_stride);
#endif
  linear_scalar(x, rows, t0, t1, k, w, ncols, bias, y, y_stride);
}

void linear(const float* x, const int32_t* rows, int64_t num_rows, int64_t k, const float* w,
            int64_t n, const float* bias, float* y, ThreadPool& pool) {
  if (num_rows <= 0 || n <= 0) return;
  auto body = [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int) {
    linear_range(x, rows, t0, t1, k, w + n0 * k, n1 - n0, bias ? bias + n0 : nullptr, y + n0, n);
  };
  split_linear_work(num_rows, n, pool, body);
}

}  // namespace llmrt::cpu

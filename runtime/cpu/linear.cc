// Dot products, axpy and the linear (matmul) kernel. See the numerical contract in kernels.h.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LLMRT_HAVE_X86 1
#endif

namespace llmrt::cpu {
namespace {

// ---------------- scalar: the executable statement of the contract ----------------

inline float reduce8(const float acc[8]) {
  float s4[4];
  for (int l = 0; l < 4; ++l) s4[l] = acc[l] + acc[l + 4];
  float s0 = s4[0] + s4[2];
  float s1 = s4[1] + s4[3];
  return s0 + s1;
}

float dot_scalar(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
  float s = reduce8(acc);
  for (int64_t k = n8; k < n; ++k) s = std::fma(a[k], b[k], s);
  return s;
}

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void linear_scalar(const float* x, const int32_t* rows, int64_t t0, int64_t t1, int64_t k,
                   const float* w, int64_t n, int64_t n0, int64_t n1, const float* bias,
                   float* y) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + (rows ? rows[t] : t) * k;
    for (int64_t j = n0; j < n1; ++j) {
      float s = dot_scalar(xr, w + j * k, k);
      y[t * n + j] = bias ? s + bias[j] : s;
    }
  }
}

// ---------------- AVX2 + FMA ----------------
#ifdef LLMRT_HAVE_X86

#define LLMRT_AVX2 __attribute__((target("avx2,fma")))

LLMRT_AVX2 inline float hsum_canonical(__m256 acc) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));      // [s4_0+s4_2, s4_1+s4_3, ..]
  __m128 s = _mm_add_ss(s2, _mm_movehdup_ps(s2));          // s2_0 + s2_1
  return _mm_cvtss_f32(s);
}

LLMRT_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  float s = hsum_canonical(acc);
  for (int64_t k = n8; k < n; ++k) s = __builtin_fmaf(a[k], b[k], s);
  return s;
}

LLMRT_AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (int64_t i = n8; i < n; ++i) y[i] = __builtin_fmaf(a, x[i], y[i]);
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
                            int64_t k, const float* w, int64_t n, int64_t n0, int64_t n1,
                            const float* bias, float* y) {
  constexpr int64_t kRowChunk = 64;  // output rows whose weights stay in L2 across tokens
  auto xrow = [&](int64_t t) { return x + (rows ? rows[t] : t) * k; };
  for (int64_t nc = n0; nc < n1; nc += kRowChunk) {
    const int64_t ne = std::min(nc + kRowChunk, n1);
    int64_t t = t0;
    for (; t + 3 <= t1; t += 3) {
      const float* xr[3] = {xrow(t), xrow(t + 1), xrow(t + 2)};
      int64_t j = nc;
      for (; j + 4 <= ne; j += 4)
        tile_avx2<3, 4>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * n + j, n);
      for (; j < ne; ++j)
        tile_avx2<3, 1>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * n + j, n);
    }
    for (; t < t1; ++t) {
      const float* xr[1] = {xrow(t)};
      int64_t j = nc;
      for (; j + 8 <= ne; j += 8)
        tile_avx2<1, 8>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * n + j, n);
      for (; j < ne; ++j)
        tile_avx2<1, 1>(xr, w + j * k, k, bias ? bias + j : nullptr, y + t * n + j, n);
    }
  }
}

#endif  // LLMRT_HAVE_X86

bool use_avx2() {
#ifdef LLMRT_HAVE_X86
  return active_isa() == CpuIsa::kAvx2;
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

void axpy(float a, const float* x, float* y, int64_t n) {
#ifdef LLMRT_HAVE_X86
  if (use_avx2()) return axpy_avx2(a, x, y, n);
#endif
  axpy_scalar(a, x, y, n);
}

void linear(const float* x, const int32_t* rows, int64_t num_rows, int64_t k, const float* w,
            int64_t n, const float* bias, float* y, ThreadPool& pool) {
  if (num_rows <= 0 || n <= 0) return;
  const bool avx2 = use_avx2();
  // Threads take contiguous ranges of output columns (16 at a time); with fewer column blocks
  // than threads (tiny n) they take token ranges instead. Neither splits a dot product.
  constexpr int64_t kUnit = 16;
  const int64_t units = (n + kUnit - 1) / kUnit;
  auto body = [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1) {
#ifdef LLMRT_HAVE_X86
    if (avx2) return linear_avx2(x, rows, t0, t1, k, w, n, n0, n1, bias, y);
#endif
    (void)avx2;
    linear_scalar(x, rows, t0, t1, k, w, n, n0, n1, bias, y);
  };
  if (units >= pool.num_threads() || num_rows == 1) {
    pool.parallel_for(units, [&](int64_t b, int64_t e, int) {
      body(0, num_rows, b * kUnit, std::min(e * kUnit, n));
    });
  } else {
    pool.parallel_for(num_rows, [&](int64_t b, int64_t e, int) { body(b, e, 0, n); });
  }
}

}  // namespace llmrt::cpu

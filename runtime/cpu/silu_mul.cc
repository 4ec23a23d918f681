// SwiGLU activation: silu(gate) * up, from separate or fused (gate first) inputs.
#include <cmath>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vexp.h"

namespace llmrt::cpu {
namespace {

// o = g / (1 + exp(-g)) * u with exp from vexp.h: scalar and AVX2 give the same bits.
void silu_mul_row_scalar(const float* g, const float* u, int64_t n, float* o) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + exp_scalar(-g[i])) * u[i];
}

#ifdef LLMRT_HAVE_X86
LLMRT_AVX2 void silu_mul_row_avx2(const float* g, const float* u, int64_t n, float* o) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 den = _mm256_add_ps(one, exp_avx2(_mm256_xor_ps(x, sign)));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(x, den), _mm256_loadu_ps(u + i)));
  }
  silu_mul_row_scalar(g + i, u + i, n - i, o + i);
}
#endif

}  // namespace

void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
              int64_t rows, int64_t inter, float* out, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* g = gate + t * gate_stride;
      const float* u = up + t * up_stride;
      float* o = out + t * inter;
#ifdef LLMRT_HAVE_X86
      if (active_isa() >= CpuIsa::kAvx2) {
        silu_mul_row_avx2(g, u, inter, o);
        continue;
      }
#endif
      silu_mul_row_scalar(g, u, inter, o);
    }
  });
}

}  // namespace llmrt::cpu

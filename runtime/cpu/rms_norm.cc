// RMSNorm (grouped) and the fused residual add + RMSNorm.
// The sum of squares is a canonical dot product; the scaling is (x * inv_rms) * w, as in
// Hugging Face's LlamaRMSNorm (weight * (x * rsqrt(mean + eps))).
#include <cmath>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"

namespace llmrt::cpu {
namespace {

inline void normalize_group(const float* x, int64_t g, const float* w, float eps, float* y) {
  const float ss = dot(x, x, g);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(g) + eps);
  vec::scale_mul(x, inv, w, y, g);
}

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* w, int64_t group, float eps,
              float* y, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t g0 = 0; g0 < dim; g0 += group)
        normalize_group(x + t * dim + g0, group, w, eps, y + t * dim + g0);
  });
}

void add_rms_norm(const float* x, const float* residual, int64_t rows, int64_t dim,
                  const float* w, float eps, float* normed, float* sum, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* xr = x + t * dim;
      const float* rr = residual + t * dim;
      float* sr = sum + t * dim;
      vec::add(xr, rr, sr, dim);
      normalize_group(sr, dim, w, eps, normed + t * dim);
    }
  });
}

}  // namespace llmrt::cpu

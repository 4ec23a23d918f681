// SwiGLU activation: silu(gate) * up, from separate or fused (gate first) inputs.
#include <cmath>

#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {

void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
              int64_t rows, int64_t inter, float* out, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* g = gate + t * gate_stride;
      const float* u = up + t * up_stride;
      float* o = out + t * inter;
      for (int64_t i = 0; i < inter; ++i) {
        const float x = g[i];
        o[i] = x / (1.0f + std::exp(-x)) * u[i];
      }
    }
  });
}

}  // namespace llmrt::cpu

// SwiGLU activation: silu(gate) * up, from separate or fused (gate first) inputs.
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"

namespace llmrt::cpu {

void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
              int64_t rows, int64_t inter, float* out, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) vec::silu_mul(gate + t * gate_stride, up + t * up_stride, inter, out + t * inter);
  });
}

}  // namespace llmrt::cpu

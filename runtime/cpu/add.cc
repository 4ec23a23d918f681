// Elementwise add.
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"

namespace llmrt::cpu {

void add(const float* a, const float* b, int64_t rows, int64_t width, float* c, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    vec::add(a + r0 * width, b + r0 * width, c + r0 * width, (r1 - r0) * width);
  });
}

}  // namespace llmrt::cpu

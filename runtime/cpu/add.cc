// Elementwise add.
#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {

void add(const float* a, const float* b, int64_t rows, int64_t width, float* c, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t i = r0 * width; i < r1 * width; ++i) c[i] = a[i] + b[i];
  });
}

}  // namespace llmrt::cpu

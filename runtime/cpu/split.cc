// Column split of a [rows, sum(sizes)] activation into one activation per size, and the column
// gather in front of a linear whose weight columns are permuted.
#include <cstring>

#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {

void split(const float* x, int64_t rows, int64_t width, std::span<const int64_t> sizes,
           float* const* outs, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      int64_t off = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::memcpy(outs[i] + t * sizes[i], x + t * width + off,
                    static_cast<size_t>(sizes[i]) * sizeof(float));
        off += sizes[i];
      }
    }
  });
}

void permute_columns(const float* x, int64_t rows, int64_t width, const int32_t* perm, float* y,
                     ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* xr = x + t * width;
      float* yr = y + t * width;
      for (int64_t j = 0; j < width; ++j) yr[j] = xr[perm[j]];
    }
  });
}

}  // namespace llmrt::cpu

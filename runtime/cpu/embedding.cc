// Embedding: row gather from the [vocab, dim] table.
#include <cstring>

#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {

void embedding(const int32_t* tokens, int64_t num_tokens, const float* table, int64_t dim,
               float* out, ThreadPool& pool) {
  pool.parallel_for(num_tokens, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t)
      std::memcpy(out + t * dim, table + static_cast<int64_t>(tokens[t]) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
  });
}

}  // namespace llmrt::cpu

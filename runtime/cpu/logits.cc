// Logits: gather the rows named by logits_indices, then multiply by the vocabulary matrix.
// The gather is folded into the linear kernel's row indirection (no copy).
#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {

void logits(const float* x, int64_t dim, const int32_t* indices, int64_t num_indices,
            const float* w, int64_t vocab, float* out, ThreadPool& pool) {
  linear(x, indices, num_indices, dim, w, vocab, nullptr, out, pool);
}

}  // namespace llmrt::cpu

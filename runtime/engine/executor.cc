#include "runtime/engine/executor.h"

#include <algorithm>

namespace llmrt {

Status Executor::forward_summary(const BatchInput& batch, LogitsSummary* summaries) {
  const int L = static_cast<int>(batch.logits_indices.size());
  const size_t vocab = static_cast<size_t>(vocab_size());
  host_rows_ = 0;
  host_logits_.resize(static_cast<size_t>(L) * vocab);
  RETURN_IF_ERROR(forward(batch, host_logits_.data()));
  host_rows_ = L;
  for (int i = 0; i < L; ++i)
    summarize_logits(host_logits_.data() + static_cast<size_t>(i) * vocab, vocab_size(), &summaries[i]);
  return ok_status();
}

Status Executor::read_logits(int first, int count, float* out) {
  if (first < 0 || count < 0 || first + count > host_rows_)
    return invalid_argument("read_logits: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                            ") outside the last step's " + std::to_string(host_rows_));
  const size_t vocab = static_cast<size_t>(vocab_size());
  std::copy_n(host_logits_.data() + static_cast<size_t>(first) * vocab, static_cast<size_t>(count) * vocab, out);
  return ok_status();
}

}  // namespace llmrt

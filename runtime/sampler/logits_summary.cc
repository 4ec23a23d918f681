#include "runtime/sampler/logits_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace llmrt {

double logits_log_sum(const float* row, int32_t vocab, float max) {
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return std::log(sum);
}

void summarize_logits(const float* row, int32_t vocab, LogitsSummary* out) {
  float mx = -std::numeric_limits<float>::infinity();
  int32_t valid = 0;
  for (int32_t i = 0; i < vocab; ++i)
    if (!std::isnan(row[i])) {
      mx = std::max(mx, row[i]);
      ++valid;
    }
  out->max = mx;
  out->num_valid = valid;
  out->reserved = 0;
  out->log_sum = logits_log_sum(row, vocab, mx);
  // The kLogitsSummaryTop largest non-NaN entries, logit descending, id ascending. A small
  // heap walk would do; a partial sort of the ids is simple and runs once per row.
  thread_local std::vector<int32_t> ids;
  ids.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (!std::isnan(row[i])) ids.push_back(i);
  const int32_t n = std::min<int32_t>(kLogitsSummaryTop, valid);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  out->count = n;
  for (int32_t i = 0; i < kLogitsSummaryTop; ++i) {
    out->ids[i] = i < n ? ids[static_cast<size_t>(i)] : -1;
    out->logits[i] = i < n ? row[ids[static_cast<size_t>(i)]] : 0.0f;
  }
}

}  // namespace llmrt

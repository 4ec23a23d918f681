// A row of logits reduced to what most sampling needs, so a GPU backend copies ~0.5 KiB per row
// back to the host instead of the whole vocabulary (512 KiB per row for a 128K vocabulary):
// the row's maximum and log-sum-exp (the raw logprob of any token in the summary) and its
// kLogitsSummaryTop largest entries. The sampler decides from the summary when that is exact
// (Sampler::sample_from_summary: greedy, top-k up to kLogitsSummaryTop, min-p that leaves only
// summarized tokens, OpenAI top logprobs) and reads the whole row otherwise.
//
// The layout is fixed (the GPU kernel of codegen/LogitsSummaryKernel.cpp writes it byte for byte):
//   offset 0  double  log_sum    log(sum_i exp(x_i - max)) over every entry (NaN if one is NaN)
//   offset 8  float   max        largest non-NaN entry (-inf when there is none)
//   offset 12 int32   count      entries in ids / logits: min(kLogitsSummaryTop, num_valid)
//   offset 16 int32   num_valid  non-NaN entries of the row
//   offset 20 int32   reserved   0
//   offset 24 int32   ids[kLogitsSummaryTop]     by logit descending, ties by id ascending
//   offset 24+4K float logits[kLogitsSummaryTop] the raw logits of those ids
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmrt {

inline constexpr int kLogitsSummaryTop = 64;

struct LogitsSummary {
  double log_sum = 0.0;
  float max = 0.0f;
  int32_t count = 0;
  int32_t num_valid = 0;
  int32_t reserved = 0;
  int32_t ids[kLogitsSummaryTop] = {};
  float logits[kLogitsSummaryTop] = {};

  /// The raw logprob of ids[i], as Sampler::sample computes it from the whole row.
  float logprob_at(int i) const {
    return static_cast<float>(static_cast<double>(logits[i]) - max - log_sum);
  }
  /// Index of `token` in ids, or -1.
  int find(int32_t token) const {
    for (int i = 0; i < count; ++i)
      if (ids[i] == token) return i;
    return -1;
  }
  /// Whether ids holds every non-NaN entry of the row.
  bool complete() const { return count == num_valid; }
};

static_assert(offsetof(LogitsSummary, log_sum) == 0 && offsetof(LogitsSummary, max) == 8 &&
              offsetof(LogitsSummary, count) == 12 && offsetof(LogitsSummary, num_valid) == 16 &&
              offsetof(LogitsSummary, ids) == 24 && offsetof(LogitsSummary, logits) == 24 + 4 * kLogitsSummaryTop &&
              sizeof(LogitsSummary) == 24 + 8 * kLogitsSummaryTop,
              "the GPU kernel writes this layout");

/// The summary of `row` [vocab] on the host: the reference the GPU kernel is tested against and
/// what backends without the kernel return. log_sum is summed in double in index order, so the
/// logprobs it gives are bit-identical to Sampler::sample's.
void summarize_logits(const float* row, int32_t vocab, LogitsSummary* out);

/// log(sum_i exp(row_i - max)) in double, index order (max: the largest non-NaN entry).
double logits_log_sum(const float* row, int32_t vocab, float max);

}  // namespace llmrt

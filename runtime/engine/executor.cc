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

Status Executor::sample_on_device(std::span<const DeviceDraw>, int32_t*, float*) {
  return unimplemented("this backend draws no tokens on a device");
}

StatusOr<std::vector<std::optional<SampleResult>>> draws_on_device(Executor& executor,
                                                                   std::span<const SamplingContext> contexts,
                                                                   std::span<const int32_t> rows,
                                                                   std::span<const LogitsSummary> summaries) {
  std::vector<std::optional<SampleResult>> out(contexts.size());
  if (!executor.samples_on_device() || rows.size() != contexts.size()) return out;
  std::vector<DeviceDraw> draws;
  std::vector<size_t> of;  // draws[k] is contexts[of[k]]'s
  for (size_t i = 0; i < contexts.size(); ++i)
    if (rows[i] >= 0 && static_cast<size_t>(rows[i]) < summaries.size())
      if (const std::optional<DeviceDraw> d = Sampler::device_draw(contexts[i], rows[i])) {
        draws.push_back(*d);
        of.push_back(i);
      }
  if (draws.empty()) return out;
  std::vector<int32_t> tokens(draws.size(), -1);
  std::vector<float> logits(draws.size(), 0.0f);
  RETURN_IF_ERROR(executor.sample_on_device(draws, tokens.data(), logits.data()));
  for (size_t k = 0; k < draws.size(); ++k) {
    if (tokens[k] < 0) continue;  // nothing to draw: Sampler::sample names why
    const LogitsSummary& s = summaries[static_cast<size_t>(draws[k].row)];
    // The raw logprob as Sampler::sample computes it with the row's summary.
    out[of[k]] = SampleResult{tokens[k], static_cast<float>(static_cast<double>(logits[k]) - s.max - s.log_sum)};
  }
  return out;
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

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

StatusOr<std::optional<SampleResult>> draw_on_device(Executor& executor, const SamplingContext& ctx, int32_t row,
                                                     const LogitsSummary& summary) {
  if (!executor.samples_on_device()) return std::optional<SampleResult>();
  const std::optional<DeviceDraw> d = Sampler::device_draw(ctx, row);
  if (!d) return std::optional<SampleResult>();
  int32_t token = -1;
  float logit = 0.0f;
  RETURN_IF_ERROR(executor.sample_on_device(std::span<const DeviceDraw>(&*d, 1), &token, &logit));
  if (token < 0) return std::optional<SampleResult>();
  return std::optional<SampleResult>(
      SampleResult{token, static_cast<float>(static_cast<double>(logit) - summary.max - summary.log_sum)});
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

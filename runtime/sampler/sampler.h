// Token sampling from one row of logits.
//
// Fixed order (each stage sees the previous stage's output):
//   1. penalties, as vLLM applies them: repetition_penalty over tokens seen in the prompt OR the
//      output (logit > 0: divided by it; logit <= 0: multiplied by it); then frequency_penalty *
//      count and presence_penalty * [count > 0] subtracted, counts over the OUTPUT tokens only;
//   2. logit bias (added);
//   3. logits processors, in the order given (e.g. structured-output masks setting -inf);
//   4. temperature: 0 means greedy — argmax, ties to the lowest id, stages 5-8 skipped;
//      otherwise logits / temperature, then softmax (max subtracted);
//   5. min-p: drop tokens with p < min_p * p_max;
//   6. top-k: keep the k most probable (ties to the lower id);
//   7. top-p: keep the smallest most-probable prefix whose mass reaches top_p x the mass of the
//      candidates left (summed in id order, or in the top-k order where top-k dropped some);
//   8. draw u in [0, 1) from the counter-based RNG below and pick the token where the cumulative
//      mass first exceeds u * mass; candidates are walked by probability desc, id asc when top-k
//      or top-p is active, else by id (either way a fixed order).
// The returned logprob is log_softmax of the RAW logits (before any stage) at the chosen token,
// as vLLM reports by default.
//
// RNG: counter-based, no state. bits = mix(mix(mix(seed) ^ request_id) ^ step) with mix the
// SplitMix64 finalizer (add 0x9e3779b97f4a7c15, xor-shift-multiply by 0xbf58476d1ce4e5b9 and
// 0x94d049bb133111eb); u = (bits >> 11) * 2^-53. The draw for (seed, request_id, step) is the
// same whatever the batch, the thread or the order of requests.
#pragma once

#include <cstdint>
#include <span>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sampler/logits_summary.h"

namespace llmrt {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias)
};

/// Checks ranges (temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, top_k >= 0,
/// repetition_penalty > 0, finite penalties, bias ids < vocab_size).
Status validate_sampling_params(const SamplingParams& params, int32_t vocab_size);

struct SamplingContext {
  const SamplingParams* params = nullptr;
  uint64_t request_id = 0;
  uint64_t step = 0;  // index of the token being generated (0 = first generated token)
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // generated so far
};

/// Edits logits in place before temperature (masks, grammars ...).
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual Status apply(const SamplingContext& context, std::span<float> logits) = 0;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // log_softmax(raw logits)[token]
};

/// The 64 random bits for (seed, request_id, step).
uint64_t sampling_random_bits(uint64_t seed, uint64_t request_id, uint64_t step);
/// Uniform double in [0, 1) from those bits.
double sampling_uniform(uint64_t seed, uint64_t request_id, uint64_t step);

/// Reusable sampler for one vocabulary; holds scratch buffers (not thread-safe: one per thread).
class Sampler {
 public:
  explicit Sampler(int32_t vocab_size);
  int32_t vocab_size() const { return vocab_size_; }

  /// `summary`, when given, is this row's (logits_summary.h): its max and log_sum give the
  /// logprob instead of another pass over the row.
  StatusOr<SampleResult> sample(const SamplingContext& context, std::span<const float> logits,
                                std::span<LogitsProcessor* const> processors = {},
                                const LogitsSummary* summary = nullptr);

  /// The same draw from a summary of the row (logits_summary.h) where the summary decides it
  /// exactly, i.e. the result equals sample() on the whole row bit for bit: no penalties, bias or
  /// processors, and either greedy, or every token that can be drawn is in the summary (the
  /// summary is complete, or min-p drops everything below its smallest entry), or top-k picks
  /// k summarized tokens whose k-th probability exceeds every token left out. Otherwise (and for
  /// rows where every token is masked) nullopt: read the row and call sample().
  StatusOr<std::optional<SampleResult>> sample_from_summary(const SamplingContext& context,
                                                            const LogitsSummary& summary,
                                                            std::span<LogitsProcessor* const> processors = {});

 private:
  /// Stages 5-8 over cand_ (unnormalized probabilities in id order) with pmax its largest.
  int32_t draw(const SamplingContext& context, float pmax);

  int32_t vocab_size_;
  std::vector<float> work_;
  std::vector<int32_t> counts_;
  std::vector<uint8_t> seen_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<std::pair<float, int32_t>> kept_;  // sample_from_summary's top-k check
  static constexpr size_t kMassBins = 4096;       // top-p's estimate of where its prefix ends
  std::vector<double> bin_mass_;
};

}  // namespace llmrt

// Token sampling from one row of logits.
//
// Fixed order (each stage sees the previous stage's output):
//   1. penalties, as vLLM applies them: repetition_penalty over tokens seen in the prompt OR the
//      output (logit > 0: divided by it; logit <= 0: multiplied by it); then frequency_penalty *
//      count and presence_penalty * [count > 0] subtracted, counts over the OUTPUT tokens only;
//   2. logit bias (added);
//   3. logits processors, in the order given (e.g. structured-output masks setting -inf);
//   4. temperature: 0 means greedy — argmax, ties to the lowest id, stages 5-8 skipped;
//      otherwise a token's probability is p = sampling_exp(logit * (1 / temperature) - max *
//      (1 / temperature)) (float operations as written, unnormalized: the max's is 1) and its mass
//      sampling_mass(p) = floor(p x 2^40), an integer; tokens of mass 0 (p < 2^-40) are dropped;
//   5. min-p: drop tokens with p < min_p * p_max;
//   6. top-k: keep the k most probable (p desc, ties to the lower id);
//   7. top-p: keep the smallest most-probable prefix (p desc, id asc) whose mass M satisfies
//      double(M) >= double(top_p) * double(the total mass of the tokens left);
//   8. draw: r = floor(u53 * total / 2^53) with u53 the RNG's top 53 bits (below), and the token
//      is the first, in id order, whose cumulative mass exceeds r.
// Masses are integers, so totals and prefixes are exact in any order: a GPU kernel computing
// the same float probabilities (sampling_exp's operations, rounded alike) draws the same token.
// The returned logprob is log_softmax of the RAW logits (before any stage) at the chosen token,
// as vLLM reports by default.
//
// RNG: counter-based, no state. bits = mix(mix(mix(seed) ^ request_id) ^ step) with mix the
// SplitMix64 finalizer (add 0x9e3779b97f4a7c15, xor-shift-multiply by 0xbf58476d1ce4e5b9 and
// 0x94d049bb133111eb); u = (bits >> 11) * 2^-53. The draw for (seed, request_id, step) is the
// same whatever the batch, the thread or the order of requests.
#pragma once

#include <bit>
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

/// e^x for x <= 0 from float operations only (Cody-Waite reduction, Taylor polynomial to x^7 in
/// Horner's order, the scale by 2^k from bits; 0 from -87 down and for NaN): within 1.22 units in
/// the last place of exp, and the same bits wherever the same IEEE operations run (no contraction:
/// the runtime builds with -ffp-contract=off; codegen/SamplingKernel.cpp spells them with _rn
/// intrinsics). Inline and branch-free, so a loop over a row vectorizes.
inline float sampling_exp(float x) {
  const bool in = x > -87.0f;  // (false for NaN)
  const float y = in ? x : 0.0f;
  // y = k ln2 + r: k the integer nearest y log2(e) (adding and taking away 1.5 x 2^23 rounds it),
  // ln2 in two parts (the first's 9 bits make k times it exact).
  const float k = (y * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = (y - k * 0.693359375f) + k * 2.12194440e-4f;
  // e^r, |r| <= 0.35: its Taylor series to r^7 (the rest below 5e-9 of it), Horner's order.
  float q = 1.98412698e-4f;
  q = q * r + 1.38888889e-3f;
  q = q * r + 8.33333333e-3f;
  q = q * r + 4.16666667e-2f;
  q = q * r + 1.66666667e-1f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  // times 2^k, k in [-126, 0]: a normal float's bits.
  const float e = q * std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23);
  return in ? e : 0.0f;
}
/// floor(p x 2^40): a probability's integer mass (0 below 2^-40).
uint64_t sampling_mass(float p);

/// The 64 random bits for (seed, request_id, step).
uint64_t sampling_random_bits(uint64_t seed, uint64_t request_id, uint64_t step);
/// Their top 53 bits, the draw's u53 (u = u53 x 2^-53 is uniform in [0, 1)).
uint64_t sampling_u53(uint64_t seed, uint64_t request_id, uint64_t step);

/// One draw for a device's sampling kernel (codegen/SamplingKernel.cpp reads this layout): the
/// logits row, 1 / temperature, top_p, min_p, top_k and the RNG's top 53 bits for (seed,
/// request_id, step). The kernel draws what Sampler::sample draws from that row.
struct DeviceDraw {
  int32_t row = 0;
  float inv_t = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;
  int32_t reserved = 0;
  uint64_t u53 = 0;
};
static_assert(sizeof(DeviceDraw) == 32, "the kernel reads 32-byte records");

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

  /// The draw a device's sampling kernel can make for row `row` instead of sample(): stages 4-8
  /// only, so not greedy, without penalties or bias (and the caller's processors, none). nullopt
  /// where those apply (or the params are invalid: sample() reports that).
  static std::optional<DeviceDraw> device_draw(const SamplingContext& context, int32_t row);

 private:
  /// Stages 5-8 over cand_ (unnormalized probabilities in id order) with pmax its largest.
  int32_t draw(const SamplingContext& context, float pmax);

  int32_t vocab_size_;
  std::vector<float> work_;
  std::vector<float> probs_;  // sample()'s probabilities of every entry
  std::vector<int32_t> counts_;
  std::vector<uint8_t> seen_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<std::pair<float, int32_t>> kept_;  // sample_from_summary's top-k check
  static constexpr size_t kMassBins = 4096;       // top-p's estimate of where its prefix ends
  std::vector<double> bin_mass_;
};

}  // namespace llmrt

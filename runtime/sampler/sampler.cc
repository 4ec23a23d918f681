#include "runtime/sampler/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/base/mix.h"

namespace llmrt {
namespace {

bool finite(float x) { return std::isfinite(x); }

// The unnormalized probability of logit w at temperature 1 / inv_t: the one expression both
// sample() and sample_from_summary() use (and the GPU's sampling kernel), so their draws agree
// bit for bit (the runtime builds without FP contraction).
float unnormalized(float w, float inv_t, float mx_scaled) { return sampling_exp(w * inv_t - mx_scaled); }

// sampling_exp is within 1.22 units in the last place of exp, and not exactly monotone: over every
// float of (-87, 0] it steps down 2861 times as x grows, by at most 7.7e-8 of its value (checked
// exhaustively, 2026-12-06). So a token left out of a summary may have a probability this much
// above the last summarized one's, no more.
constexpr float kExpSlack = 1.0f + 0x1p-16f;

// Probability desc, then id asc: the fixed candidate order.
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  if (a.first != b.first) return a.first > b.first;
  return a.second < b.second;
}

}  // namespace

uint64_t sampling_mass(float e) { return static_cast<uint64_t>(static_cast<double>(e) * 0x1p40); }

uint64_t sampling_random_bits(uint64_t seed, uint64_t request_id, uint64_t step) {
  return mix64(mix64(mix64(seed) ^ request_id) ^ step);
}

uint64_t sampling_u53(uint64_t seed, uint64_t request_id, uint64_t step) {
  return sampling_random_bits(seed, request_id, step) >> 11;
}

Status validate_sampling_params(const SamplingParams& p, int32_t vocab_size) {
  if (!finite(p.temperature) || p.temperature < 0.0f)
    return invalid_argument("temperature must be >= 0, got " + std::to_string(p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(p.min_p));
  if (p.top_k < 0) return invalid_argument("top_k must be >= 0 (0 = off)");
  if (!finite(p.repetition_penalty) || p.repetition_penalty <= 0.0f)
    return invalid_argument("repetition_penalty must be > 0");
  if (!finite(p.presence_penalty) || !finite(p.frequency_penalty))
    return invalid_argument("presence/frequency penalties must be finite");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size)
      return invalid_argument("logit_bias token id " + std::to_string(id) + " outside vocab of " +
                              std::to_string(vocab_size));
    if (!finite(bias)) return invalid_argument("logit_bias values must be finite");
  }
  return ok_status();
}

Sampler::Sampler(int32_t vocab_size)
    : vocab_size_(vocab_size), work_(vocab_size), probs_(vocab_size), counts_(vocab_size, 0), seen_(vocab_size, 0) {
  cand_.reserve(vocab_size);
}

StatusOr<SampleResult> Sampler::sample(const SamplingContext& ctx, std::span<const float> logits,
                                       std::span<LogitsProcessor* const> processors, const LogitsSummary* summary) {
  if (!ctx.params) return invalid_argument("sampling context has no params");
  const SamplingParams& p = *ctx.params;
  if (static_cast<int64_t>(logits.size()) != vocab_size_)
    return invalid_argument("logits row has " + std::to_string(logits.size()) +
                            " entries, vocab is " + std::to_string(vocab_size_));
  RETURN_IF_ERROR(validate_sampling_params(p, vocab_size_));
  for (int32_t t : ctx.prompt_tokens)
    if (t < 0 || t >= vocab_size_) return invalid_argument("prompt token id out of range");
  for (int32_t t : ctx.output_tokens)
    if (t < 0 || t >= vocab_size_) return invalid_argument("output token id out of range");

  std::copy(logits.begin(), logits.end(), work_.begin());
  float* w = work_.data();

  // 1. penalties
  if (p.repetition_penalty != 1.0f) {
    auto mark = [&](std::span<const int32_t> toks) {
      for (int32_t t : toks) seen_[t] = 1;
    };
    mark(ctx.prompt_tokens);
    mark(ctx.output_tokens);
    auto apply = [&](std::span<const int32_t> toks) {
      for (int32_t t : toks) {
        if (!seen_[t]) continue;  // already handled (a token may repeat)
        seen_[t] = 0;
        w[t] = w[t] > 0.0f ? w[t] / p.repetition_penalty : w[t] * p.repetition_penalty;
      }
    };
    apply(ctx.prompt_tokens);
    apply(ctx.output_tokens);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (int32_t t : ctx.output_tokens) ++counts_[t];
    for (int32_t t : ctx.output_tokens) {
      if (counts_[t] == 0) continue;
      w[t] -= p.frequency_penalty * static_cast<float>(counts_[t]) + p.presence_penalty;
      counts_[t] = 0;
    }
  }
  // 2. logit bias
  for (const auto& [id, bias] : p.logit_bias) w[id] += bias;
  // 3. processors
  for (LogitsProcessor* proc : processors) {
    if (!proc) continue;
    RETURN_IF_ERROR(proc->apply(ctx, std::span<float>(work_)));
  }

  // Raw logprob (log_softmax of the input logits): the summary's max and log_sum when given
  // (the same numbers, with logits_log_sum's pass over the row done already).
  auto raw_logprob = [&](int32_t tok) {
    if (summary)
      return static_cast<float>(static_cast<double>(logits[tok]) - summary->max - summary->log_sum);
    float mx = -INFINITY;
    for (float x : logits) mx = std::max(mx, x);
    return static_cast<float>(static_cast<double>(logits[tok]) - mx -
                              logits_log_sum(logits.data(), vocab_size_, mx));
  };

  // 4. temperature / greedy
  if (p.temperature == 0.0f) {
    int32_t best = -1;
    for (int32_t i = 0; i < vocab_size_; ++i)
      if (!std::isnan(w[i]) && w[i] != -INFINITY && (best < 0 || w[i] > w[best])) best = i;
    if (best < 0) return failed_precondition("every token is masked; nothing to sample");
    return SampleResult{best, raw_logprob(best)};
  }
  float mx = -INFINITY;
  for (int32_t i = 0; i < vocab_size_; ++i)
    if (!std::isnan(w[i])) mx = std::max(mx, w[i]);
  if (mx == -INFINITY) return failed_precondition("every token is masked; nothing to sample");
  const float inv_t = 1.0f / p.temperature;
  const float mx_scaled = mx * inv_t;
  cand_.clear();
  float pmax = 0.0f;
  // Every probability first (a loop the compiler vectorizes: sampling_exp is branch-free; NaN
  // and -inf give 0), then the candidates: those with a mass.
  float* prob = probs_.data();
  for (int32_t i = 0; i < vocab_size_; ++i) prob[i] = unnormalized(w[i], inv_t, mx_scaled);
  for (int32_t i = 0; i < vocab_size_; ++i) {
    if (std::isnan(w[i]) || w[i] == -INFINITY) continue;
    if (sampling_mass(prob[i]) > 0) cand_.emplace_back(prob[i], i);
    pmax = std::max(pmax, prob[i]);
  }
  if (cand_.empty())  // an infinite logit: every other probability is 0 beside it, its own NaN
    return failed_precondition("no token has a probability to draw (an infinite logit?)");
  const int32_t token = draw(ctx, pmax);
  return SampleResult{token, raw_logprob(token)};
}

std::optional<DeviceDraw> Sampler::device_draw(const SamplingContext& ctx, int32_t row) {
  if (!ctx.params) return std::nullopt;
  const SamplingParams& p = *ctx.params;
  if (p.temperature == 0.0f || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
      p.presence_penalty != 0.0f || !p.logit_bias.empty() || !validate_sampling_params(p, INT32_MAX).ok())
    return std::nullopt;
  DeviceDraw d;
  d.row = row;
  d.inv_t = 1.0f / p.temperature;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.top_k = p.top_k;
  d.u53 = sampling_u53(p.seed, ctx.request_id, ctx.step);
  return d;
}

int32_t Sampler::draw(const SamplingContext& ctx, float pmax) {
  const SamplingParams& p = *ctx.params;
  // 5. min-p (relative to the max, so normalization does not matter)
  if (p.min_p > 0.0f) {
    const float thr = p.min_p * pmax;
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(),
                               [&](const auto& c) { return c.first < thr; }),
                cand_.end());
  }
  // 6. top-k, 7. top-p: the (prob desc, id asc) order's first candidates, top-p only of the
  // smallest prefix that reaches its mass: sorted a chunk at a time (a selection of the next
  // chunk's entries, then their sort), never the whole vocabulary (a 128K-entry sort took 12 ms).
  size_t sorted = 0;  // cand_[0, sorted) is the sorted order's prefix
  auto sort_to = [&](size_t end) {
    end = std::min(end, cand_.size());
    if (end <= sorted) return;
    const auto first = cand_.begin() + static_cast<std::ptrdiff_t>(sorted), last = cand_.begin() + static_cast<std::ptrdiff_t>(end);
    if (end - sorted <= 1024) {  // a heap of the few (top-k's 40 of 128K: 1.4 ms, a selection 2 ms)
      std::partial_sort(first, last, cand_.end(), before);
    } else {
      if (end < cand_.size()) std::nth_element(first, last - 1, cand_.end(), before);
      std::sort(first, last, before);
    }
    sorted = end;
  };
  bool cut = false;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand_.size()) {
    sort_to(static_cast<size_t>(p.top_k));
    cand_.resize(static_cast<size_t>(p.top_k));
    cut = true;
  }
  if (p.top_p < 1.0f) {
    uint64_t total = 0;  // exact: any order
    for (const auto& c : cand_) total += sampling_mass(c.first);
    const double target = static_cast<double>(p.top_p) * static_cast<double>(total);
    if (sorted == 0 && cand_.size() > 4 * kMassBins) {
      // Where the prefix ends, roughly: the candidates' masses per bin of a probability's top
      // 12 bits (exponent and 4 mantissa bits; larger bits, larger probability), walked from the
      // top bin to the one that reaches the target. Those bins' candidates are the largest ones:
      // to the front in one pass, then sorted (the exact walk below sorts more if rounding left
      // it short).
      bin_mass_.assign(kMassBins, 0.0);
      for (const auto& c : cand_) bin_mass_[std::bit_cast<uint32_t>(c.first) >> 19] += c.first;  // (positive: < 4096)
      double mass = 0.0;
      size_t low = kMassBins;  // the lowest bin taken
      while (low > 0 && mass * 0x1p40 < target) mass += bin_mass_[--low];
      const auto end = std::partition(cand_.begin(), cand_.end(), [&](const auto& c) {
        return (std::bit_cast<uint32_t>(c.first) >> 19) >= low;
      });
      std::sort(cand_.begin(), end, before);
      sorted = static_cast<size_t>(end - cand_.begin());
    }
    uint64_t cum = 0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      if (keep == sorted) sort_to(std::max<size_t>(64, 2 * sorted));
      cum += sampling_mass(cand_[keep].first);
      ++keep;
      if (static_cast<double>(cum) >= target) break;
    }
    cand_.resize(std::max<size_t>(keep, 1));
    cut = true;
  }
  if (cut) std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  // 8. draw, in id order: the first candidate whose cumulative mass exceeds u x the total.
  uint64_t total = 0;
  for (const auto& c : cand_) total += sampling_mass(c.first);
  const uint64_t u53 = sampling_u53(p.seed, ctx.request_id, ctx.step);
  const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(u53) * total) >> 53);
  uint64_t cum = 0;
  for (const auto& c : cand_) {
    cum += sampling_mass(c.first);
    if (cum > r) return c.second;
  }
  return cand_.back().second;  // (not reached: r < total)
}

StatusOr<std::optional<SampleResult>> Sampler::sample_from_summary(const SamplingContext& ctx,
                                                                   const LogitsSummary& s,
                                                                   std::span<LogitsProcessor* const> processors) {
  const std::optional<SampleResult> kUndecided;
  if (!ctx.params) return invalid_argument("sampling context has no params");
  const SamplingParams& p = *ctx.params;
  RETURN_IF_ERROR(validate_sampling_params(p, vocab_size_));
  if (s.count < 0 || s.count > kLogitsSummaryTop || s.num_valid < s.count || s.num_valid > vocab_size_)
    return invalid_argument("logits summary with " + std::to_string(s.count) + " of " +
                            std::to_string(s.num_valid) + " entries");
  for (int i = 0; i < s.count; ++i)
    if (s.ids[i] < 0 || s.ids[i] >= vocab_size_) return invalid_argument("logits summary id out of range");
  // Stages 1-3 edit logits the summary does not hold.
  if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f ||
      !p.logit_bias.empty())
    return kUndecided;
  for (LogitsProcessor* proc : processors)
    if (proc) return kUndecided;
  if (s.count == 0 || s.logits[0] == -INFINITY) return kUndecided;  // all masked: sample() says so
  // 4. greedy: the first entry is the lowest id of the largest logit.
  if (p.temperature == 0.0f) return std::optional<SampleResult>(SampleResult{s.ids[0], s.logprob_at(0)});
  // The same probabilities as sample().
  const float mx = s.max;
  const float inv_t = 1.0f / p.temperature;
  const float mx_scaled = mx * inv_t;
  cand_.clear();
  float pmax = 0.0f;
  for (int i = 0; i < s.count; ++i) {
    if (s.logits[i] == -INFINITY) continue;
    const float e = unnormalized(s.logits[i], inv_t, mx_scaled);
    if (sampling_mass(e) > 0) cand_.emplace_back(e, s.ids[i]);
    pmax = std::max(pmax, e);
  }
  // Every token left out has a logit <= the last entry's, so a probability <= `floor` (with
  // sampling_exp's slack); none can be drawn when that has no mass or min-p drops it.
  const float floor = s.complete() ? 0.0f : unnormalized(s.logits[s.count - 1], inv_t, mx_scaled) * kExpSlack;
  bool confined = sampling_mass(floor) == 0 || (p.min_p > 0.0f && floor < p.min_p * pmax);
  if (!confined) {
    if (p.top_k == 0 || p.top_k > s.count) return kUndecided;
    // top-k decides among summarized tokens only when its k-th probability beats `floor`.
    std::vector<std::pair<float, int32_t>>& kept = kept_;
    kept.clear();
    const float thr = p.min_p * pmax;
    for (const auto& c : cand_)
      if (!(p.min_p > 0.0f && c.first < thr)) kept.push_back(c);
    if (kept.size() < static_cast<size_t>(p.top_k)) return kUndecided;
    std::nth_element(kept.begin(), kept.begin() + (p.top_k - 1), kept.end(), before);
    if (!(kept[static_cast<size_t>(p.top_k - 1)].first > floor)) return kUndecided;
  }
  if (cand_.empty()) return kUndecided;  // (an infinite logit: sample() says so)
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const int32_t token = draw(ctx, pmax);
  return std::optional<SampleResult>(SampleResult{token, s.logprob_at(s.find(token))});
}

}  // namespace llmrt

#include "runtime/eval/perplexity.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

namespace llmrt {

StatusOr<ChunkPlan> plan_chunks(int64_t num_tokens, int ctx, int max_chunks) {
  if (ctx < 3)
    return invalid_argument("--ctx " + std::to_string(ctx) +
                            ": a chunk needs at least 3 tokens (positions ctx/2 .. ctx-2 are scored)");
  if (num_tokens < ctx)
    return invalid_argument("the text has " + std::to_string(num_tokens) + " tokens, fewer than one chunk of --ctx " +
                            std::to_string(ctx));
  ChunkPlan plan;
  plan.ctx = ctx;
  int64_t n = num_tokens / ctx;
  if (max_chunks > 0) n = std::min<int64_t>(n, max_chunks);
  plan.num_chunks = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
  return plan;
}

std::vector<int32_t> chunk_tokens(std::span<const int32_t> tokens, const ChunkPlan& plan, int index,
                                  int32_t bos) {
  const size_t start = size_t(index) * size_t(plan.ctx);
  assert(start + plan.ctx <= tokens.size());
  std::vector<int32_t> chunk(tokens.begin() + start, tokens.begin() + start + plan.ctx);
  if (bos >= 0) chunk[0] = bos;
  return chunk;
}

int log_softmax(std::span<const float> x, std::span<double> out) {
  assert(!x.empty() && out.size() == x.size());
  int top = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[top]) top = static_cast<int>(i);
  const double mx = x[top];
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += std::exp(double(x[i]) - mx);
  // x - max is exact in double (both are floats); only log(sum) carries rounding.
  const double log_sum = std::log(sum);
  for (size_t i = 0; i < x.size(); ++i) out[i] = (double(x[i]) - mx) - log_sum;
  return top;
}

double kl_divergence(std::span<const double> logp, std::span<const double> logq) {
  assert(logp.size() == logq.size());
  double kl = 0;
  for (size_t i = 0; i < logp.size(); ++i) {
    const double p = std::exp(logp[i]);
    if (p > 0) kl += p * (logp[i] - logq[i]);
  }
  return kl;
}

double MeanStats::variance() const {
  if (count_ == 0) return 0;
  const double m = mean();
  return sum2_ / double(count_) - m * m;
}

double MeanStats::stddev() const {
  const double v = variance();
  return v > 0 ? std::sqrt(v) : 0.0;
}

double MeanStats::error() const {
  const double v = variance();
  return count_ > 1 && v > 0 ? std::sqrt(v / double(count_ - 1)) : 0.0;
}

double PerplexityStats::ppl() const { return std::exp(nll_.mean()); }

double PerplexityStats::ppl_error() const { return ppl() * nll_.error(); }

void KlStats::add(std::span<const double> logp_base, std::span<const double> logq, int base_top, int top,
                  int32_t target) {
  const double kl = kl_divergence(logp_base, logq);
  kl_.add(kl);
  max_kl_ = std::max(max_kl_, kl);
  ppl_.add(-logq[target]);
  ppl_base_.add(-logp_base[target]);
  if (base_top == top) ++same_top_;
}

double KlStats::same_top_error() const {
  const int64_t n = count();
  if (n < 2) return 0;
  const double f = same_top_fraction();
  return std::sqrt(f * (1 - f) / double(n - 1));
}

}  // namespace llmrt

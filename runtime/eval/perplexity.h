// Perplexity and KL divergence over fixed-size chunks of a token stream, measured the way
// llama.cpp's `llama-perplexity` measures them so the figures compare:
//   - the whole text is tokenized once (BOS first when the tokenizer adds one);
//   - it is cut into floor(n / ctx) chunks of ctx tokens (the rest is dropped), each evaluated
//     from an empty KV cache, with its first token replaced by BOS when the tokenizer adds BOS;
//   - only the second half of each chunk is scored: the logits at positions ctx/2 .. ctx-2
//     predicting the token that follows (ctx - 1 - ctx/2 positions per chunk);
//   - PPL = exp(mean NLL); its error is PPL * sqrt(var(NLL) / (n - 1)) (population variance),
//     as llama.cpp's "Final estimate: PPL = x +/- err".
// KL divergence is KL(P_base || Q) = sum_i p_i (log p_i - log q_i) per scored position, summed
// in double, with P the reference ("base", llama.cpp's --kl-divergence-base) and Q the model under
// test; "same top" counts positions where both distributions have the same argmax.
// Pure math: no executor, no I/O (tools/llmrt_eval.cc drives the model).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

/// How a token stream is cut into evaluation chunks.
struct ChunkPlan {
  int ctx = 0;         // tokens per chunk
  int num_chunks = 0;  // chunks evaluated
  int first_scored() const { return ctx / 2; }
  /// Scored positions per chunk: first_scored() .. ctx - 2.
  int scored_per_chunk() const { return ctx - 1 - ctx / 2; }
  int64_t scored_total() const { return int64_t{num_chunks} * scored_per_chunk(); }
};

/// Chunks of `ctx` tokens in `num_tokens` tokens, at most `max_chunks` of them (<= 0: all).
/// Errors: ctx < 3 (no position to score), fewer tokens than one chunk.
StatusOr<ChunkPlan> plan_chunks(int64_t num_tokens, int ctx, int max_chunks);

/// Chunk `index` of `tokens` (ctx tokens), its first token replaced by `bos` when bos >= 0.
std::vector<int32_t> chunk_tokens(std::span<const int32_t> tokens, const ChunkPlan& plan, int index,
                                  int32_t bos);

/// out[i] = (x[i] - max(x)) - log(sum_j exp(x[j] - max(x))), all in double. Returns the index of
/// the largest x (the first one on ties). out must have x.size() entries; x must not be empty.
int log_softmax(std::span<const float> x, std::span<double> out);

/// sum_i exp(logp[i]) * (logp[i] - logq[i]) in double; terms with exp(logp[i]) == 0 add 0.
double kl_divergence(std::span<const double> logp, std::span<const double> logq);

/// Mean of a sample and llama.cpp's uncertainty of that mean: sqrt(var / (n - 1)) with var the
/// population variance (0 when n < 2 or var <= 0).
class MeanStats {
 public:
  void add(double v) {
    sum_ += v;
    sum2_ += v * v;
    ++count_;
  }
  int64_t count() const { return count_; }
  double mean() const { return count_ ? sum_ / double(count_) : 0.0; }
  double variance() const;  // population variance
  double stddev() const;
  double error() const;     // uncertainty of the mean

 private:
  double sum_ = 0, sum2_ = 0;
  int64_t count_ = 0;
};

/// Negative log-likelihoods of the scored tokens and the perplexity they give.
class PerplexityStats {
 public:
  void add(double nll) { nll_.add(nll); }
  int64_t count() const { return nll_.count(); }
  double mean_nll() const { return nll_.mean(); }
  double ppl() const;
  double ppl_error() const;  // ppl * uncertainty of mean NLL

 private:
  MeanStats nll_;
};

/// Scored positions compared between a base distribution P and the model under test Q.
class KlStats {
 public:
  /// One position: log-probabilities of base and test over the vocabulary, their argmaxes and
  /// the token that actually follows.
  void add(std::span<const double> logp_base, std::span<const double> logq, int base_top, int top,
           int32_t target);
  int64_t count() const { return kl_.count(); }
  const MeanStats& kl() const { return kl_; }
  double max_kl() const { return max_kl_; }
  const PerplexityStats& ppl() const { return ppl_; }
  const PerplexityStats& ppl_base() const { return ppl_base_; }
  int64_t same_top() const { return same_top_; }
  double same_top_fraction() const { return count() ? double(same_top_) / double(count()) : 0.0; }
  /// Binomial uncertainty sqrt(f (1 - f) / (n - 1)), as llama.cpp's "Same top p".
  double same_top_error() const;

 private:
  MeanStats kl_;
  double max_kl_ = 0;
  PerplexityStats ppl_, ppl_base_;
  int64_t same_top_ = 0;
};

}  // namespace llmrt

#include "runtime/engine/batch_check.h"

#include <string>

namespace llmrt {
namespace {
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

Status check_batch(const BatchInput& b, const float* logits, const BatchLimits& lim, int32_t* seq_of_row) {
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  if (T <= 0) return invalid_argument("batch has no tokens");
  if (T > lim.max_tokens)
    return out_of_range("batch has " + str(T) + " tokens, the executor's cap is " + str(lim.max_tokens));
  if (static_cast<int64_t>(b.positions.size()) != T || static_cast<int64_t>(b.kv_slots.size()) != T)
    return invalid_argument("tokens, positions and kv_slots must have the same length");
  const int64_t S = static_cast<int64_t>(b.context_lens.size());
  if (S > lim.max_seqs)
    return out_of_range("batch has " + str(S) + " sequences, the executor's cap is " + str(lim.max_seqs));
  if (static_cast<int64_t>(b.query_start.size()) != S + 1)
    return invalid_argument("query_start must have num_seqs + 1 entries");
  if (S > 0 && (b.max_blocks_per_seq <= 0 ||
                static_cast<int64_t>(b.block_tables.size()) < S * int64_t{b.max_blocks_per_seq}))
    return invalid_argument("block_tables must hold num_seqs x max_blocks_per_seq entries");
  const int64_t L = static_cast<int64_t>(b.logits_indices.size());
  if (L > T) return invalid_argument("more logits_indices than tokens");
  if (L > 0 && !logits) return invalid_argument("logits output buffer is null");
  for (int64_t t = 0; t < T; ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= lim.vocab_rows)
      return invalid_argument("token " + str(b.tokens[t]) + " at row " + str(t) +
                              " is outside the vocabulary of " + str(lim.vocab_rows));
  if (b.query_start[0] != 0) return invalid_argument("query_start[0] must be 0");
  const int64_t bs = lim.block_size;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q0 = b.query_start[s], q1 = b.query_start[s + 1];
    if (q1 < q0 || q1 > T)
      return invalid_argument("query_start must be non-decreasing and at most num_tokens");
    const int64_t n = q1 - q0, ctx = b.context_lens[s];
    if (ctx < n || ctx > lim.max_model_len || ctx > int64_t{b.max_blocks_per_seq} * bs)
      return invalid_argument("sequence " + str(s) + ": context_len " + str(ctx) +
                              " must cover its " + str(n) + " tokens and fit max_model_len " +
                              str(lim.max_model_len) + " and its block table");
    const int32_t* table = b.block_tables.data() + s * int64_t{b.max_blocks_per_seq};
    for (int64_t j = 0; j < (ctx + bs - 1) / bs; ++j)
      if (table[j] < 0 || table[j] >= lim.num_kv_blocks)
        return invalid_argument("sequence " + str(s) + ": block table entry " + str(j) + " = " +
                                str(table[j]) + " outside the " + str(lim.num_kv_blocks) + " KV blocks");
    for (int64_t t = q0; t < q1; ++t) {
      const int64_t p = ctx - n + (t - q0);
      if (b.positions[t] != p)
        return invalid_argument("row " + str(t) + " (sequence " + str(s) + ") has position " +
                                str(b.positions[t]) + ", expected " + str(p) +
                                " (= context_len - tokens + index)");
      const int64_t slot = int64_t{table[p / bs]} * bs + p % bs;
      if (b.kv_slots[t] != slot)
        return invalid_argument("row " + str(t) + " has kv slot " + str(b.kv_slots[t]) +
                                ", its block table says " + str(slot));
      if (seq_of_row) seq_of_row[t] = static_cast<int32_t>(s);
    }
  }
  for (int64_t t = S > 0 ? b.query_start[S] : 0; t < T; ++t) {
    if (b.kv_slots[t] != -1)
      return invalid_argument("padding row " + str(t) + " must have kv slot -1");
    if (seq_of_row) seq_of_row[t] = -1;
  }
  for (int64_t i = 0; i < L; ++i)
    if (b.logits_indices[i] < 0 || b.logits_indices[i] >= T)
      return invalid_argument("logits index " + str(b.logits_indices[i]) + " outside the batch");
  return ok_status();
}

}  // namespace llmrt

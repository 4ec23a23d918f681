// Runs evaluation chunks (runtime/eval/perplexity.h) through a CpuExecutor: each chunk is its own
// sequence starting from an empty KV cache, several chunks share each forward pass, and only the
// logits of the scored positions come back. Sequence k of a call owns the fixed KV blocks
// k*B .. k*B + B - 1 (B = blocks per chunk), so no block manager is needed and nothing is shared.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/cpu_executor.h"

namespace llmrt {

class ChunkRunner {
 public:
  /// KV blocks an executor needs to run `batch_chunks` chunks of `ctx` tokens at once.
  static int blocks_needed(int ctx, int batch_chunks, int block_size);

  /// `executor` must outlive the runner. Errors: ctx beyond the executor's max_model_len, more
  /// chunks than its sequences per step, too few KV blocks.
  static StatusOr<ChunkRunner> create(CpuExecutor* executor, int ctx, int batch_chunks);

  /// Evaluates chunks[k] (ctx tokens each, at most batch_chunks of them) and writes the logits at
  /// positions first .. ctx-2 of each into *logits: [chunks.size()][ctx - 1 - first][vocab].
  Status run(std::span<const std::vector<int32_t>> chunks, int first, std::vector<float>* logits);

  int ctx() const { return ctx_; }
  int batch_chunks() const { return batch_chunks_; }

 private:
  ChunkRunner() = default;
  CpuExecutor* ex_ = nullptr;
  int ctx_ = 0, batch_chunks_ = 0, blocks_per_chunk_ = 0;
  // Step buffers, reused.
  std::vector<int32_t> tokens_, positions_, query_start_, context_lens_, block_tables_, logits_indices_;
  std::vector<int64_t> kv_slots_;
  std::vector<float> step_logits_;
  std::vector<std::pair<int, int>> row_dest_;  // (chunk, scored index) of each logits row
};

}  // namespace llmrt

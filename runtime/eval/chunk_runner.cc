#include "runtime/eval/chunk_runner.h"

#include <algorithm>
#include <string>

namespace llmrt {

int ChunkRunner::blocks_needed(int ctx, int batch_chunks, int block_size) {
  return batch_chunks * ((ctx + block_size - 1) / block_size);
}

StatusOr<ChunkRunner> ChunkRunner::create(CpuExecutor* executor, int ctx, int batch_chunks) {
  if (ctx < 2) return invalid_argument("--ctx " + std::to_string(ctx) + ": a chunk needs at least 2 tokens");
  if (ctx > executor->max_model_len())
    return out_of_range("--ctx " + std::to_string(ctx) + " is longer than the plan's max_model_len " +
                        std::to_string(executor->max_model_len()));
  if (batch_chunks < 1 || batch_chunks > executor->max_seqs_per_step())
    return out_of_range("--batch-chunks " + std::to_string(batch_chunks) + " must be 1 .. " +
                        std::to_string(executor->max_seqs_per_step()) + " (the plan's sequences per step)");
  if (executor->num_kv_blocks() < blocks_needed(ctx, batch_chunks, executor->block_size()))
    return resource_exhausted("the executor has " + std::to_string(executor->num_kv_blocks()) +
                              " KV blocks, " + std::to_string(batch_chunks) + " chunks of " + std::to_string(ctx) +
                              " tokens need " +
                              std::to_string(blocks_needed(ctx, batch_chunks, executor->block_size())));
  ChunkRunner r;
  r.ex_ = executor;
  r.ctx_ = ctx;
  r.batch_chunks_ = batch_chunks;
  r.blocks_per_chunk_ = (ctx + executor->block_size() - 1) / executor->block_size();
  return r;
}

Status ChunkRunner::run(std::span<const std::vector<int32_t>> chunks, int first, std::vector<float>* logits) {
  const int n = static_cast<int>(chunks.size());
  if (n < 1 || n > batch_chunks_)
    return invalid_argument("ChunkRunner::run: " + std::to_string(n) + " chunks, at most " +
                            std::to_string(batch_chunks_));
  if (first < 0 || first > ctx_ - 2) return invalid_argument("ChunkRunner::run: bad first scored position");
  for (const auto& c : chunks)
    if (static_cast<int>(c.size()) != ctx_) return invalid_argument("ChunkRunner::run: chunk of the wrong length");
  const int vocab = ex_->vocab_size();
  const int64_t bs = ex_->block_size();
  const int scored = ctx_ - 1 - first;
  logits->resize(size_t(n) * scored * size_t(vocab));
  std::vector<int> done(n, 0);
  const int budget = ex_->max_tokens_per_step();
  std::vector<int> step_chunks;

  for (;;) {
    tokens_.clear();
    positions_.clear();
    kv_slots_.clear();
    query_start_.assign(1, 0);
    context_lens_.clear();
    logits_indices_.clear();
    row_dest_.clear();
    step_chunks.clear();
    for (int k = 0; k < n; ++k) {
      if (done[k] == ctx_) continue;
      const int room = budget - static_cast<int>(tokens_.size());
      if (room <= 0) break;
      const int m = std::min(room, ctx_ - done[k]);
      for (int j = 0; j < m; ++j) {
        const int p = done[k] + j;
        const int row = static_cast<int>(tokens_.size());
        tokens_.push_back(chunks[k][p]);
        positions_.push_back(p);
        kv_slots_.push_back((int64_t{k} * blocks_per_chunk_ + p / bs) * bs + p % bs);
        if (p >= first && p <= ctx_ - 2) {
          logits_indices_.push_back(row);
          row_dest_.push_back({k, p - first});
        }
      }
      done[k] += m;
      context_lens_.push_back(done[k]);
      query_start_.push_back(static_cast<int32_t>(tokens_.size()));
      step_chunks.push_back(k);
    }
    if (step_chunks.empty()) break;
    block_tables_.resize(step_chunks.size() * size_t(blocks_per_chunk_));
    for (size_t s = 0; s < step_chunks.size(); ++s)
      for (int b = 0; b < blocks_per_chunk_; ++b)
        block_tables_[s * blocks_per_chunk_ + b] = step_chunks[s] * blocks_per_chunk_ + b;
    step_logits_.resize(logits_indices_.size() * size_t(vocab));
    BatchInput batch;
    batch.tokens = tokens_;
    batch.positions = positions_;
    batch.kv_slots = kv_slots_;
    batch.query_start = query_start_;
    batch.context_lens = context_lens_;
    batch.block_tables = block_tables_;
    batch.max_blocks_per_seq = blocks_per_chunk_;
    batch.logits_indices = logits_indices_;
    RETURN_IF_ERROR(ex_->forward(batch, step_logits_.empty() ? nullptr : step_logits_.data()));
    for (size_t i = 0; i < row_dest_.size(); ++i) {
      const auto [k, idx] = row_dest_[i];
      std::copy_n(step_logits_.begin() + i * size_t(vocab), vocab,
                  logits->begin() + (size_t(k) * scored + idx) * size_t(vocab));
    }
  }
  return ok_status();
}

}  // namespace llmrt

// Paged KV cache bookkeeping: a fixed pool of blocks, one block table per sequence, reference
// counts so sequences can share blocks (fork / prefix sharing) with copy-on-write of a shared,
// partially filled last block. Pure bookkeeping: it never touches the cache memory; block copies
// it requires are returned to the caller, who performs them before the next forward.
//
// Slot of position p of a sequence = block_table[p / block_size] * block_size + p % block_size.
// Not thread-safe (the scheduler owns it).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

/// Copy physical block `src` to `dst` (all layers, K and V) before the next forward.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  size_t num_sequences() const { return seqs_.size(); }
  bool has_sequence(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }

  /// Registers an empty sequence. Error if the id is in use.
  Status add_sequence(int64_t seq_id);
  /// New blocks append_slots(seq_id, count) would take (including a copy-on-write block).
  StatusOr<int32_t> blocks_needed(int64_t seq_id, int32_t count) const;
  /// Extends the sequence by `count` tokens and appends their kv slots to *slots (in position
  /// order). If the last block is shared and partially filled it is first replaced by a private
  /// copy, reported in *copies. All-or-nothing: resource_exhausted (state unchanged) when the pool
  /// has too few free blocks.
  Status append_slots(int64_t seq_id, int32_t count, std::vector<int64_t>* slots,
                      std::vector<BlockCopy>* copies);
  /// `child` (new id) shares all of `parent`'s blocks (ref counts incremented).
  Status fork(int64_t parent, int64_t child);
  /// Shortens the sequence to `num_tokens` (speculative-decoding rollback), releasing blocks
  /// that no longer hold any of its tokens.
  Status truncate(int64_t seq_id, int32_t num_tokens);
  /// Drops the sequence and releases its blocks (a block returns to the pool at ref count 0).
  Status free_sequence(int64_t seq_id);

  StatusOr<std::span<const int32_t>> block_table(int64_t seq_id) const;
  StatusOr<int32_t> num_tokens(int64_t seq_id) const;
  /// References to `block` (0 = free). -1 if out of range.
  int32_t ref_count(int32_t block) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int32_t num_tokens = 0;
  };
  int32_t take_block();
  void release_block(int32_t block);
  int32_t needed(const Sequence& seq, int32_t count) const;

  int32_t block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // stack; the lowest ids are handed out first
  std::unordered_map<int64_t, Sequence> seqs_;
};

}  // namespace llmrt

// Paged KV cache bookkeeping: a fixed pool of blocks, one block table per sequence, reference
// counts so sequences can share blocks (fork / prefix sharing) with copy-on-write of a shared,
// partially filled last block. Pure bookkeeping: it never touches the cache memory; block copies
// it requires are returned to the caller, who performs them before the next forward.
//
// Automatic prefix caching (enable_prefix_caching): a full block whose KV has been computed
// (mark_computed) is registered under a hash chained from the start of the sequence —
// h_i = XXH3-128(h_{i-1}, tokens of block i) — so only an identical prefix can match. A block
// nobody references any more stays in the cache, in LRU order, until a fresh block is needed and
// no never-used block is left; add_sequence() with a prompt reuses matching blocks. truncate()
// withdraws the blocks it rolls back (and a partially kept one) from the cache, since their
// contents will be overwritten.
//
// Slot of position p of a sequence = block_table[p / block_size] * block_size + p % block_size.
// Not thread-safe (the scheduler owns it).
#pragma once

#include <cstdint>
#include <list>
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
  BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching = false);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  /// Blocks a sequence can take: never used plus cached-but-unreferenced (evictable).
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  /// Unreferenced blocks kept for the prefix cache.
  int32_t num_cached_free_blocks() const { return static_cast<int32_t>(lru_.size()); }
  /// Blocks referenced by at least one sequence.
  int32_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  bool prefix_caching() const { return prefix_caching_; }
  size_t num_sequences() const { return seqs_.size(); }
  bool has_sequence(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }

  /// Registers an empty sequence. Error if the id is in use.
  Status add_sequence(int64_t seq_id);
  /// Registers a sequence that will start with `prompt` and takes over the longest cached prefix
  /// of it in whole blocks, leaving at least one prompt token to compute (its logits are needed).
  /// Returns the number of prompt tokens already in the cache (the sequence starts with them).
  StatusOr<int32_t> add_sequence_with_prefix(int64_t seq_id, std::span<const int32_t> prompt);
  /// Cached prefix tokens add_sequence_with_prefix would reuse now (no state change).
  int32_t cached_prefix_tokens(std::span<const int32_t> prompt) const;
  /// New blocks append_slots(seq_id, count) would take (including a copy-on-write block).
  StatusOr<int32_t> blocks_needed(int64_t seq_id, int32_t count) const;
  /// Extends the sequence by `count` tokens and appends their kv slots to *slots (in position
  /// order). If the last block is shared and partially filled it is first replaced by a private
  /// copy, reported in *copies. All-or-nothing: resource_exhausted (state unchanged) when the pool
  /// has too few free blocks.
  Status append_slots(int64_t seq_id, int32_t count, std::vector<int64_t>* slots,
                      std::vector<BlockCopy>* copies);
  /// Same, with the tokens' values (needed for the prefix cache; a sequence extended by count
  /// alone is never registered).
  Status append_tokens(int64_t seq_id, std::span<const int32_t> tokens, std::vector<int64_t>* slots,
                       std::vector<BlockCopy>* copies);
  /// The KV of the sequence's first `num_tokens` tokens is now in the cache: full blocks among
  /// them are registered for prefix reuse (no-op without prefix caching).
  Status mark_computed(int64_t seq_id, int32_t num_tokens);
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
  struct Hash {
    uint64_t lo = 0, hi = 0;
    bool operator==(const Hash& o) const { return lo == o.lo && hi == o.hi; }
  };
  struct HashOf {
    size_t operator()(const Hash& h) const { return static_cast<size_t>(h.lo); }
  };
  struct Sequence {
    std::vector<int32_t> blocks;
    int32_t num_tokens = 0;
    bool hashable = true;            // every token value known
    std::vector<int32_t> tokens;     // values (prefix caching only)
    std::vector<Hash> hashes;        // chain hash of each full computed block, in order
  };
  int32_t take_block();
  void release_block(int32_t block);
  void uncache(int32_t block);
  int32_t needed(const Sequence& seq, int32_t count) const;
  Status append(int64_t seq_id, int32_t count, const int32_t* tokens, std::vector<int64_t>* slots,
                std::vector<BlockCopy>* copies);
  Hash chain(const Hash& prev, const int32_t* tokens) const;

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // never-used (or withdrawn) blocks; stack, lowest ids first
  std::unordered_map<int64_t, Sequence> seqs_;
  // Prefix cache: hash → block, block → hash, and unreferenced cached blocks (LRU front).
  std::unordered_map<Hash, int32_t, HashOf> cached_;
  std::vector<Hash> block_hash_;
  std::vector<uint8_t> block_cached_;
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  mutable std::vector<uint8_t> hash_buf_;
};

}  // namespace llmrt

#include "runtime/kv/block_manager.h"

#include <cassert>
#include <cstring>
#include <string>

#include <xxhash.h>

namespace llmrt {
namespace {
std::string seq_name(int64_t id) { return "sequence " + std::to_string(id); }
}  // namespace

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size > 0 ? block_size : 1),
      prefix_caching_(enable_prefix_caching),
      ref_counts_(num_blocks > 0 ? num_blocks : 0, 0),
      block_hash_(ref_counts_.size()),
      block_cached_(ref_counts_.size(), 0),
      lru_pos_(ref_counts_.size()) {
  free_.reserve(ref_counts_.size());
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {  // evict the least recently released cached block
    b = lru_.front();
    lru_.pop_front();
    cached_.erase(block_hash_[b]);
    block_cached_[b] = 0;
  }
  ref_counts_[b] = 1;
  return b;
}

void BlockManager::release_block(int32_t block) {
  assert(ref_counts_[block] > 0);
  if (--ref_counts_[block] != 0) return;
  if (block_cached_[block])
    lru_pos_[block] = lru_.insert(lru_.end(), block);
  else
    free_.push_back(block);
}

void BlockManager::uncache(int32_t block) {
  if (!block_cached_[block]) return;
  cached_.erase(block_hash_[block]);
  block_cached_[block] = 0;
  if (ref_counts_[block] == 0) {
    lru_.erase(lru_pos_[block]);
    free_.push_back(block);
  }
}

BlockManager::Hash BlockManager::chain(const Hash& prev, const int32_t* tokens) const {
  // One hash over (previous hash, block tokens): a block matches only with its whole prefix.
  std::vector<uint8_t>& buf = hash_buf_;
  const size_t bytes = sizeof(int32_t) * static_cast<size_t>(block_size_);
  buf.resize(sizeof prev + bytes);
  std::memcpy(buf.data(), &prev, sizeof prev);
  std::memcpy(buf.data() + sizeof prev, tokens, bytes);
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return Hash{h.low64, h.high64};
}

Status BlockManager::add_sequence(int64_t seq_id) {
  if (has_sequence(seq_id)) return invalid_argument(seq_name(seq_id) + " already exists");
  seqs_.emplace(seq_id, Sequence{});
  return ok_status();
}

int32_t BlockManager::cached_prefix_tokens(std::span<const int32_t> prompt) const {
  if (!prefix_caching_ || prompt.empty()) return 0;
  const size_t max_blocks = (prompt.size() - 1) / static_cast<size_t>(block_size_);
  Hash h;
  size_t i = 0;
  for (; i < max_blocks; ++i) {
    h = chain(h, prompt.data() + i * block_size_);
    if (!cached_.count(h)) break;
  }
  return static_cast<int32_t>(i) * block_size_;
}

StatusOr<int32_t> BlockManager::add_sequence_with_prefix(int64_t seq_id, std::span<const int32_t> prompt) {
  RETURN_IF_ERROR(add_sequence(seq_id));
  Sequence& seq = seqs_[seq_id];
  if (!prefix_caching_ || prompt.empty()) return 0;
  const size_t max_blocks = (prompt.size() - 1) / static_cast<size_t>(block_size_);
  Hash h;
  for (size_t i = 0; i < max_blocks; ++i) {
    h = chain(h, prompt.data() + i * block_size_);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    const int32_t b = it->second;
    if (ref_counts_[b]++ == 0) lru_.erase(lru_pos_[b]);
    seq.blocks.push_back(b);
    seq.hashes.push_back(h);
    seq.tokens.insert(seq.tokens.end(), prompt.begin() + i * block_size_,
                      prompt.begin() + (i + 1) * block_size_);
    seq.num_tokens += block_size_;
  }
  return seq.num_tokens;
}

int32_t BlockManager::needed(const Sequence& seq, int32_t count) const {
  const int64_t total = static_cast<int64_t>(seq.num_tokens) + count;
  const int64_t blocks_after = (total + block_size_ - 1) / block_size_;
  int64_t n = blocks_after - static_cast<int64_t>(seq.blocks.size());
  const bool partial = seq.num_tokens % block_size_ != 0;
  if (count > 0 && partial && ref_counts_[seq.blocks.back()] > 1) ++n;  // copy-on-write
  return static_cast<int32_t>(n);
}

StatusOr<int32_t> BlockManager::blocks_needed(int64_t seq_id, int32_t count) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  if (count < 0) return invalid_argument("negative token count");
  return needed(it->second, count);
}

Status BlockManager::append_slots(int64_t seq_id, int32_t count, std::vector<int64_t>* slots,
                                  std::vector<BlockCopy>* copies) {
  return append(seq_id, count, nullptr, slots, copies);
}

Status BlockManager::append_tokens(int64_t seq_id, std::span<const int32_t> tokens,
                                   std::vector<int64_t>* slots, std::vector<BlockCopy>* copies) {
  if (tokens.size() > INT32_MAX) return out_of_range("too many tokens");
  return append(seq_id, static_cast<int32_t>(tokens.size()), tokens.data(), slots, copies);
}

Status BlockManager::append(int64_t seq_id, int32_t count, const int32_t* tokens,
                            std::vector<int64_t>* slots, std::vector<BlockCopy>* copies) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  if (count < 0) return invalid_argument("negative token count");
  if (static_cast<int64_t>(it->second.num_tokens) + count > INT32_MAX)
    return out_of_range(seq_name(seq_id) + " would exceed 2^31 tokens");
  Sequence& seq = it->second;
  const int32_t need = needed(seq, count);
  if (need > num_free_blocks())
    return resource_exhausted("KV cache: " + seq_name(seq_id) + " needs " + std::to_string(need) +
                              " more blocks, " + std::to_string(num_free_blocks()) + " free");
  if (count == 0) return ok_status();
  if (seq.num_tokens % block_size_ != 0 && ref_counts_[seq.blocks.back()] > 1) {
    const int32_t old = seq.blocks.back();
    const int32_t fresh = take_block();
    release_block(old);
    seq.blocks.back() = fresh;
    if (copies) copies->push_back({old, fresh});
  }
  for (int32_t i = 0; i < count; ++i) {
    const int32_t pos = seq.num_tokens + i;
    if (pos / block_size_ >= static_cast<int32_t>(seq.blocks.size()))
      seq.blocks.push_back(take_block());
    if (slots)
      slots->push_back(static_cast<int64_t>(seq.blocks[pos / block_size_]) * block_size_ +
                       pos % block_size_);
  }
  seq.num_tokens += count;
  if (prefix_caching_) {
    if (tokens && seq.hashable)
      seq.tokens.insert(seq.tokens.end(), tokens, tokens + count);
    else
      seq.hashable = false;
  }
  return ok_status();
}

Status BlockManager::mark_computed(int64_t seq_id, int32_t num_tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  Sequence& seq = it->second;
  if (num_tokens < 0 || num_tokens > seq.num_tokens)
    return out_of_range(seq_name(seq_id) + " has " + std::to_string(seq.num_tokens) +
                        " tokens, not " + std::to_string(num_tokens));
  if (!prefix_caching_ || !seq.hashable) return ok_status();
  const size_t full = static_cast<size_t>(num_tokens / block_size_);
  for (size_t i = seq.hashes.size(); i < full; ++i) {
    const Hash h = chain(i ? seq.hashes[i - 1] : Hash{}, seq.tokens.data() + i * block_size_);
    seq.hashes.push_back(h);
    const int32_t b = seq.blocks[i];
    if (block_cached_[b] || cached_.count(h)) continue;  // already registered (same content)
    cached_.emplace(h, b);
    block_hash_[b] = h;
    block_cached_[b] = 1;
  }
  return ok_status();
}

Status BlockManager::fork(int64_t parent, int64_t child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return not_found(seq_name(parent) + " does not exist");
  if (has_sequence(child)) return invalid_argument(seq_name(child) + " already exists");
  Sequence copy = it->second;
  for (int32_t b : copy.blocks) ++ref_counts_[b];
  seqs_.emplace(child, std::move(copy));
  return ok_status();
}

Status BlockManager::truncate(int64_t seq_id, int32_t num_tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  Sequence& seq = it->second;
  if (num_tokens < 0 || num_tokens > seq.num_tokens)
    return out_of_range("cannot truncate " + seq_name(seq_id) + " of " +
                        std::to_string(seq.num_tokens) + " tokens to " +
                        std::to_string(num_tokens));
  const size_t keep = (static_cast<size_t>(num_tokens) + block_size_ - 1) / block_size_;
  // Blocks from the first one that loses a token on are withdrawn from the prefix cache: their
  // contents will be overwritten.
  const size_t intact = static_cast<size_t>(num_tokens) / block_size_;
  for (size_t i = intact; i < seq.blocks.size(); ++i) uncache(seq.blocks[i]);
  if (seq.hashes.size() > intact) seq.hashes.resize(intact);
  if (seq.tokens.size() > static_cast<size_t>(num_tokens)) seq.tokens.resize(num_tokens);
  while (seq.blocks.size() > keep) {
    release_block(seq.blocks.back());
    seq.blocks.pop_back();
  }
  seq.num_tokens = num_tokens;
  return ok_status();
}

Status BlockManager::free_sequence(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  for (int32_t b : it->second.blocks) release_block(b);
  seqs_.erase(it);
  return ok_status();
}

StatusOr<std::span<const int32_t>> BlockManager::block_table(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  return std::span<const int32_t>(it->second.blocks);
}

StatusOr<int32_t> BlockManager::num_tokens(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return not_found(seq_name(seq_id) + " does not exist");
  return it->second.num_tokens;
}

int32_t BlockManager::ref_count(int32_t block) const {
  if (block < 0 || block >= num_blocks()) return -1;
  return ref_counts_[block];
}

}  // namespace llmrt

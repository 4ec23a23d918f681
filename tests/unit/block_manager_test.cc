#include "runtime/kv/block_manager.h"

#include <gtest/gtest.h>

#include <set>

namespace llmrt {
namespace {

TEST(BlockManager, AllocatesSlotsInPositionOrder) {
  BlockManager bm(4, 4);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  std::vector<int64_t> slots;
  ASSERT_TRUE(bm.append_slots(1, 6, &slots, nullptr).ok());
  ASSERT_EQ(slots.size(), 6u);
  auto table = *bm.block_table(1);
  ASSERT_EQ(table.size(), 2u);
  for (int p = 0; p < 6; ++p) EXPECT_EQ(slots[p], int64_t{table[p / 4]} * 4 + p % 4);
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_EQ(*bm.num_tokens(1), 6);
  slots.clear();
  ASSERT_TRUE(bm.append_slots(1, 2, &slots, nullptr).ok());  // fills block 2, no new block
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_EQ(slots[0], int64_t{table[1]} * 4 + 2);
  EXPECT_EQ(slots[1], int64_t{table[1]} * 4 + 3);
  ASSERT_TRUE(bm.append_slots(1, 1, &slots, nullptr).ok());
  EXPECT_EQ(bm.num_free_blocks(), 1);
}

TEST(BlockManager, OutOfBlocksIsResourceExhaustedAndAtomic) {
  BlockManager bm(3, 2);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.add_sequence(2).ok());
  ASSERT_TRUE(bm.append_slots(1, 4, nullptr, nullptr).ok());
  std::vector<int64_t> slots;
  Status st = bm.append_slots(2, 3, &slots, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_TRUE(slots.empty());
  EXPECT_EQ(bm.num_free_blocks(), 1);
  EXPECT_EQ(*bm.num_tokens(2), 0);
  EXPECT_EQ(*bm.blocks_needed(2, 3), 2);
  EXPECT_TRUE(bm.append_slots(2, 2, &slots, nullptr).ok());
  EXPECT_EQ(bm.num_free_blocks(), 0);
}

TEST(BlockManager, FreeReturnsBlocksAndDistinctSequencesNeverShare) {
  BlockManager bm(8, 4);
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(bm.add_sequence(s).ok());
    ASSERT_TRUE(bm.append_slots(s, 5, nullptr, nullptr).ok());
  }
  std::set<int32_t> used;
  for (int s = 0; s < 4; ++s) {
    const std::span<const int32_t> table = *bm.block_table(s);  // copy the span out of the StatusOr
    for (int32_t b : table) EXPECT_TRUE(used.insert(b).second) << "block " << b << " reused";
  }
  EXPECT_EQ(bm.num_free_blocks(), 0);
  ASSERT_TRUE(bm.free_sequence(2).ok());
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_FALSE(bm.has_sequence(2));
  EXPECT_EQ(bm.free_sequence(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(bm.append_slots(2, 1, nullptr, nullptr).code(), StatusCode::kNotFound);
  EXPECT_FALSE(bm.add_sequence(1).ok()) << "duplicate id";
  EXPECT_FALSE(bm.append_slots(1, -1, nullptr, nullptr).ok());
}

TEST(BlockManager, ForkSharesAndCopiesOnWrite) {
  BlockManager bm(6, 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.append_slots(1, 6, nullptr, nullptr).ok());  // 1 full block + 2 of the next
  const std::vector<int32_t> parent(bm.block_table(1)->begin(), bm.block_table(1)->end());
  ASSERT_TRUE(bm.fork(1, 2).ok());
  EXPECT_EQ(bm.ref_count(parent[0]), 2);
  EXPECT_EQ(bm.ref_count(parent[1]), 2);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(*bm.blocks_needed(2, 1), 1);  // copy-on-write of the partial block
  std::vector<int64_t> slots;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.append_slots(2, 1, &slots, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, parent[1]);
  const auto child = *bm.block_table(2);
  EXPECT_EQ(child[0], parent[0]);  // full block still shared
  EXPECT_EQ(copies[0].dst, child[1]);
  EXPECT_NE(child[1], parent[1]);
  EXPECT_EQ(slots[0], int64_t{child[1]} * 4 + 2);
  EXPECT_EQ(bm.ref_count(parent[1]), 1);
  // the parent keeps its block and appends without a copy
  copies.clear();
  ASSERT_TRUE(bm.append_slots(1, 1, nullptr, &copies).ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ((*bm.block_table(1))[1], parent[1]);
  // freeing both releases everything
  ASSERT_TRUE(bm.free_sequence(1).ok());
  EXPECT_EQ(bm.ref_count(parent[0]), 1);
  ASSERT_TRUE(bm.free_sequence(2).ok());
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_EQ(bm.ref_count(parent[0]), 0);
  EXPECT_EQ(bm.ref_count(99), -1);
}

TEST(BlockManager, ForkAtBlockBoundaryNeedsNoCopy) {
  BlockManager bm(4, 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.append_slots(1, 4, nullptr, nullptr).ok());
  ASSERT_TRUE(bm.fork(1, 2).ok());
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.append_slots(2, 1, nullptr, &copies).ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.block_table(2)->size(), 2u);
  EXPECT_FALSE(bm.fork(3, 4).ok());
  EXPECT_FALSE(bm.fork(1, 2).ok());
}

TEST(BlockManager, TruncateRollsBack) {
  BlockManager bm(4, 4);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.append_slots(1, 10, nullptr, nullptr).ok());
  EXPECT_EQ(bm.num_free_blocks(), 1);
  ASSERT_TRUE(bm.truncate(1, 5).ok());
  EXPECT_EQ(*bm.num_tokens(1), 5);
  EXPECT_EQ(bm.block_table(1)->size(), 2u);
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_EQ(bm.truncate(1, 6).code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(bm.truncate(1, -1).ok());
  std::vector<int64_t> slots;
  ASSERT_TRUE(bm.append_slots(1, 1, &slots, nullptr).ok());
  EXPECT_EQ(slots[0], int64_t{(*bm.block_table(1))[1]} * 4 + 1);
  ASSERT_TRUE(bm.truncate(1, 0).ok());
  EXPECT_EQ(bm.num_free_blocks(), 4);
}

}  // namespace
}  // namespace llmrt

namespace llmrt {
namespace {

std::vector<int32_t> iota_tokens(int n, int from = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[i] = from + i;
  return t;
}

TEST(BlockManagerPrefixCache, ComputedFullBlocksAreReusedByTheSamePrefixOnly) {
  BlockManager bm(8, 4, /*enable_prefix_caching=*/true);
  const std::vector<int32_t> prompt = iota_tokens(10);
  ASSERT_EQ(*bm.add_sequence_with_prefix(1, prompt), 0);
  ASSERT_TRUE(bm.append_tokens(1, prompt, nullptr, nullptr).ok());
  // Nothing is registered before the KV is computed.
  EXPECT_EQ(bm.cached_prefix_tokens(prompt), 0);
  ASSERT_TRUE(bm.mark_computed(1, 10).ok());
  EXPECT_EQ(bm.cached_prefix_tokens(prompt), 8);  // two full blocks; the partial one is not
  const std::vector<int32_t> table1(bm.block_table(1)->begin(), bm.block_table(1)->end());

  ASSERT_EQ(*bm.add_sequence_with_prefix(2, prompt), 8);
  EXPECT_EQ(*bm.num_tokens(2), 8);
  EXPECT_EQ((*bm.block_table(2))[0], table1[0]);
  EXPECT_EQ((*bm.block_table(2))[1], table1[1]);
  EXPECT_EQ(bm.ref_count(table1[0]), 2);
  // At least one prompt token is always left to compute: an 8-token prompt reuses one block.
  EXPECT_EQ(bm.cached_prefix_tokens(iota_tokens(8)), 4);
  EXPECT_EQ(bm.cached_prefix_tokens(iota_tokens(9)), 8);
  // A different first block breaks the chain even if the second block's tokens match.
  std::vector<int32_t> other = prompt;
  other[0] = 99;
  EXPECT_EQ(bm.cached_prefix_tokens(other), 0);
}

TEST(BlockManagerPrefixCache, FreedCachedBlocksStayUntilEvictedInLruOrder) {
  BlockManager bm(4, 2, true);
  const std::vector<int32_t> a = iota_tokens(5, 0), b = iota_tokens(5, 100);
  for (auto [id, toks] : {std::pair{1, a}, std::pair{2, b}}) {
    ASSERT_TRUE(bm.add_sequence(id).ok());
    ASSERT_TRUE(bm.append_tokens(id, std::span(toks).first(4), nullptr, nullptr).ok());
    ASSERT_TRUE(bm.mark_computed(id, 4).ok());
  }
  EXPECT_EQ(bm.num_free_blocks(), 0);
  ASSERT_TRUE(bm.free_sequence(1).ok());  // a's blocks released first: LRU front
  ASSERT_TRUE(bm.free_sequence(2).ok());
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.num_cached_free_blocks(), 4);
  EXPECT_EQ(bm.num_used_blocks(), 0);
  EXPECT_EQ(bm.cached_prefix_tokens(a), 4);
  EXPECT_EQ(bm.cached_prefix_tokens(b), 4);
  // A new sequence needing two fresh blocks evicts a's two (the least recently released).
  ASSERT_TRUE(bm.add_sequence(3).ok());
  ASSERT_TRUE(bm.append_tokens(3, iota_tokens(4, 500), nullptr, nullptr).ok());
  EXPECT_EQ(bm.cached_prefix_tokens(a), 0);
  EXPECT_EQ(bm.cached_prefix_tokens(b), 4);
  // Reusing b's cached blocks takes them out of the evictable set.
  ASSERT_EQ(*bm.add_sequence_with_prefix(4, b), 4);
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_EQ(bm.num_used_blocks(), 4);
}

TEST(BlockManagerPrefixCache, TruncateWithdrawsRolledBackBlocks) {
  BlockManager bm(8, 4, true);
  const std::vector<int32_t> t = iota_tokens(13);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.append_tokens(1, t, nullptr, nullptr).ok());
  ASSERT_TRUE(bm.mark_computed(1, 13).ok());
  EXPECT_EQ(bm.cached_prefix_tokens(t), 12);
  // Back to 6 tokens: block 0 intact, block 1 partly rolled back, block 2 dropped.
  ASSERT_TRUE(bm.truncate(1, 6).ok());
  EXPECT_EQ(bm.cached_prefix_tokens(t), 4);
  // Regrowing with other tokens registers the new contents, never the old hash.
  std::vector<int32_t> regrow = {50, 51, 52, 53, 54, 55, 56};
  ASSERT_TRUE(bm.append_tokens(1, regrow, nullptr, nullptr).ok());
  ASSERT_TRUE(bm.mark_computed(1, 13).ok());
  std::vector<int32_t> now(t.begin(), t.begin() + 6);
  now.insert(now.end(), regrow.begin(), regrow.end());
  EXPECT_EQ(bm.cached_prefix_tokens(now), 12);
  EXPECT_EQ(bm.cached_prefix_tokens(t), 4);
  ASSERT_TRUE(bm.free_sequence(1).ok());
  EXPECT_EQ(bm.num_used_blocks(), 0);
}

TEST(BlockManagerPrefixCache, ForkedSequencesShareAndCopyOnWrite) {
  BlockManager bm(8, 4, true);
  const std::vector<int32_t> t = iota_tokens(6);
  ASSERT_TRUE(bm.add_sequence(1).ok());
  ASSERT_TRUE(bm.append_tokens(1, t, nullptr, nullptr).ok());
  ASSERT_TRUE(bm.mark_computed(1, 6).ok());
  ASSERT_TRUE(bm.fork(1, 2).ok());
  std::vector<BlockCopy> copies;
  std::vector<int64_t> slots;
  const int32_t shared_last = (*bm.block_table(1))[1];
  ASSERT_TRUE(bm.append_tokens(2, std::vector<int32_t>{7}, &slots, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared_last);
  EXPECT_NE((*bm.block_table(2))[1], shared_last);
  EXPECT_EQ((*bm.block_table(2))[0], (*bm.block_table(1))[0]);
  ASSERT_TRUE(bm.mark_computed(2, 7).ok());
  ASSERT_TRUE(bm.free_sequence(1).ok());
  ASSERT_TRUE(bm.free_sequence(2).ok());
  EXPECT_EQ(bm.num_used_blocks(), 0);
  EXPECT_EQ(bm.num_cached_free_blocks(), 1);  // the one full block
}

}  // namespace
}  // namespace llmrt

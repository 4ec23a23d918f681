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

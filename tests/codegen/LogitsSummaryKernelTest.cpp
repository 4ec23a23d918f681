// The logits_summary kernel (codegen/LogitsSummaryKernel.cpp) through the host emulation against
// the runtime's host summary (runtime/sampler/logits_summary.h), which the sampler's exactness
// rests on: max, counts, ids and logits must match bit for bit; log_sum (summed in a different
// order) to 1e-12.

#include "codegen/KernelFamilies.h"
#include "runtime/sampler/logits_summary.h"

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

using llmc::testing::HostKernel;
using llmrt::LogitsSummary;
using SummaryFn = void (*)(const float *, unsigned char *, unsigned char *, int, unsigned);
using UnsplitFn = void (*)(const float *, unsigned char *, int, unsigned);

// Row r of `kind`: distinct values, ties everywhere, half masked, NaN and a flat tail, all -inf,
// all NaN, exactly kLogitsSummaryTop entries far above the rest (the radix select's first digit
// then holds exactly as many as it takes: its bin ends the count).
std::vector<float> makeRow(int vocab, int kind, uint32_t seed) {
  std::vector<float> v = llmc::testing::randomVector(size_t(vocab), seed, 0.0f, 1.0f);
  int high = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    float &x = v[i];
    switch (kind) {
    case 0: x = 16.0f * x - 8.0f; break;
    case 1: x = std::floor(5.0f * x) - 2.0f; break;
    case 2: x = x < 0.5f ? -INFINITY : 30.0f * x; break;
    case 3: x = x < 0.02f ? NAN : (x < 0.3f ? -1.0f : -x); break;
    case 4: x = -INFINITY; break;
    case 5: x = NAN; break;
    default: x = i % 7 == 3 && high < llmrt::kLogitsSummaryTop ? 10.0f + 0.01f * float(high++) : -x; break;
    }
  }
  return v;
}

// Steps of up to 32 rows split rows of 4096 entries or more into parts (a block each, merged
// through the workspace); more rows keep a block per row (its parts one after another). Both must
// give the host's summary. Row r is of kind kinds[r % kinds.size()] (all of makeRow's by default);
// the grid is a block per (row, part), then 5 blocks unless onlyFullGrid.
void checkVocab(int vocab, int L, int parts, std::vector<int> kinds = {0, 1, 2, 3, 4, 5, 6},
                bool onlyFullGrid = false) {
  SCOPED_TRACE("vocab " + std::to_string(vocab) + ", " + std::to_string(L) + " rows");
  auto spec = llmc::emitLogitsSummaryKernel(vocab);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "logits_summary");
  EXPECT_EQ(spec->gridRule, parts == 1 ? "rows" : "rows x" + std::to_string(parts) + " when rows<=32");
  EXPECT_EQ(spec->workspaceBytes > 0, parts > 1);
  // The workspace parameter exists only when rows split.
  HostKernel k(*spec,
               parts > 1 ? "const float *logits, unsigned char *out, unsigned char *work, int L"
                         : "const float *logits, unsigned char *out, int L",
               parts > 1 ? "logits, out, work, L" : "logits, out, L");
  ASSERT_TRUE(k.ok()) << k.error();
  auto kindOf = [&](int r) { return kinds[size_t(r) % kinds.size()]; };
  std::vector<float> logits;
  for (int r = 0; r < L; ++r) {
    std::vector<float> row = makeRow(vocab, kindOf(r), uint32_t(vocab + 31 * r));
    if (kindOf(r) == 2 && parts > 1) // whole parts of -inf next to finite ones
      for (int i = 0; i < vocab * 6 / 10; ++i)
        row[size_t(i)] = -INFINITY;
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<unsigned char> work(std::max<uint64_t>(spec->workspaceBytes, 1), 0); // zero-filled once
  const unsigned split = L <= 32 ? unsigned(parts) : 1u;
  // Every (row, part) its own block, then fewer blocks than that: the grid-stride loop reuses the
  // block's shared memory and the merge falls to whichever part finishes last.
  for (const unsigned grid : {unsigned(L) * split, 5u}) {
    if (onlyFullGrid && grid == 5u)
      break;
    SCOPED_TRACE("grid " + std::to_string(grid));
    std::vector<LogitsSummary> got(L);
    std::memset(static_cast<void *>(got.data()), 0xAB, sizeof(LogitsSummary) * L); // device memory is not zeroed
    if (parts > 1)
      k.get<SummaryFn>()(logits.data(), reinterpret_cast<unsigned char *>(got.data()), work.data(), L, grid);
    else
      k.get<UnsplitFn>()(logits.data(), reinterpret_cast<unsigned char *>(got.data()), L, grid);
    if (parts > 1) // the counters are reset for the next launch
      for (int r = 0; r < 32; ++r)
        EXPECT_EQ(reinterpret_cast<const int *>(work.data())[r], 0) << "counter " << r;
    for (int r = 0; r < L; ++r) {
      SCOPED_TRACE("row " + std::to_string(r) + " kind " + std::to_string(kindOf(r)));
      LogitsSummary want;
      llmrt::summarize_logits(logits.data() + size_t(r) * vocab, vocab, &want);
      const LogitsSummary &g = got[r];
      EXPECT_EQ(std::memcmp(&g.max, &want.max, sizeof(float)), 0) << g.max << " vs " << want.max;
      EXPECT_EQ(g.count, want.count);
      EXPECT_EQ(g.num_valid, want.num_valid);
      EXPECT_EQ(g.reserved, 0);
      EXPECT_EQ(std::memcmp(g.ids, want.ids, sizeof(g.ids)), 0) << "first ids " << g.ids[0] << " " << g.ids[1]
                                                                << " vs " << want.ids[0] << " " << want.ids[1];
      EXPECT_EQ(std::memcmp(g.logits, want.logits, sizeof(g.logits)), 0);
      if (std::isnan(want.log_sum))
        EXPECT_TRUE(std::isnan(g.log_sum)) << g.log_sum;
      else
        EXPECT_NEAR(g.log_sum, want.log_sum, 1e-12 * std::max(1.0, std::fabs(want.log_sum)));
    }
  }
}

TEST(LogitsSummaryKernel, MatchesTheHostSummary) {
  for (int vocab : {5, 64, 200, 3001})
    checkVocab(vocab, 12, 1);
}

// Parts: 2 of 2049 and 2048 entries; 9 of 2223 (the last shorter), also with more rows than
// steps split (one block per row then).
TEST(LogitsSummaryKernel, SplitRowsMatchTheHostSummary) {
  checkVocab(4097, 12, 2);
  checkVocab(20000, 12, 9);
  checkVocab(20000, 33, 9);
}

// Llama 3's vocabulary: 32 parts of 4008 entries (8 a thread), a merge of 2048 (4 a thread).
// 300000 entries: more parts than 32 (37 of 8109, 16 entries a thread; a merge of 2368, 5 a thread).
TEST(LogitsSummaryKernel, LongRowsMatchTheHostSummary) {
  checkVocab(128256, 4, 32, {0, 1, 2, 6}, true);
  checkVocab(300000, 2, 37, {3, 2}, true);
}

// Up to kMaxLogitsSummaryVocab entries (64 parts of 8192); plans of longer rows have no summary
// kernel (tests/cli: the runtime copies their rows).
TEST(LogitsSummaryKernel, RefusesVocabulariesItCannotIndex) {
  EXPECT_FALSE(llmc::emitLogitsSummaryKernel(0).ok());
  auto most = llmc::emitLogitsSummaryKernel(llmc::kMaxLogitsSummaryVocab);
  ASSERT_TRUE(most.ok()) << most.status().to_string();
  EXPECT_EQ(most->gridRule, "rows x64 when rows<=32");
  const auto longer = llmc::emitLogitsSummaryKernel(llmc::kMaxLogitsSummaryVocab + 1);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("vocab size 524289 outside [1, 524288]"), std::string::npos)
      << longer.status().message();
}

} // namespace

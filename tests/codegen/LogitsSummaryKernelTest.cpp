// The logits_summary kernel (codegen/LogitsSummaryKernel.cpp) through the host emulation against
// the runtime's host summary (runtime/sampler/logits_summary.h), which the sampler's exactness
// rests on: max, counts, ids and logits must match bit for bit; log_sum (summed in a different
// order) to 1e-12.

#include "codegen/KernelFamilies.h"
#include "runtime/sampler/logits_summary.h"

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using llmc::testing::HostKernel;
using llmrt::LogitsSummary;
using SummaryFn = void (*)(const float *, unsigned char *, int, unsigned);

// Row r of `kind`: distinct values, ties everywhere, half masked, NaN and a flat tail, all -inf,
// all NaN.
std::vector<float> makeRow(int vocab, int kind, uint32_t seed) {
  std::vector<float> v = llmc::testing::randomVector(size_t(vocab), seed, 0.0f, 1.0f);
  for (float &x : v) {
    switch (kind) {
    case 0: x = 16.0f * x - 8.0f; break;
    case 1: x = std::floor(5.0f * x) - 2.0f; break;
    case 2: x = x < 0.5f ? -INFINITY : 30.0f * x; break;
    case 3: x = x < 0.02f ? NAN : (x < 0.3f ? -1.0f : -x); break;
    case 4: x = -INFINITY; break;
    default: x = NAN; break;
    }
  }
  return v;
}

void checkVocab(int vocab) {
  SCOPED_TRACE("vocab " + std::to_string(vocab));
  auto spec = llmc::emitLogitsSummaryKernel(vocab);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "logits_summary");
  EXPECT_EQ(spec->gridRule, "rows");
  HostKernel k(*spec, "const float *logits, unsigned char *out, int L", "logits, out, L");
  ASSERT_TRUE(k.ok()) << k.error();
  const int kinds = 6, L = 2 * kinds;
  std::vector<float> logits;
  for (int r = 0; r < L; ++r) {
    std::vector<float> row = makeRow(vocab, r % kinds, uint32_t(vocab + 31 * r));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<LogitsSummary> got(L);
  std::memset(static_cast<void *>(got.data()), 0xAB, sizeof(LogitsSummary) * L); // device memory is not zeroed
  // Fewer blocks than rows: the grid-stride loop reuses the block's shared memory.
  k.get<SummaryFn>()(logits.data(), reinterpret_cast<unsigned char *>(got.data()), L, 5);
  for (int r = 0; r < L; ++r) {
    SCOPED_TRACE("row " + std::to_string(r) + " kind " + std::to_string(r % kinds));
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

TEST(LogitsSummaryKernel, MatchesTheHostSummary) {
  for (int vocab : {5, 64, 200, 3001})
    checkVocab(vocab);
}

TEST(LogitsSummaryKernel, RefusesVocabulariesItCannotIndex) {
  EXPECT_FALSE(llmc::emitLogitsSummaryKernel(0).ok());
  EXPECT_FALSE(llmc::emitLogitsSummaryKernel((int64_t(1) << 30) + 1).ok());
}

} // namespace

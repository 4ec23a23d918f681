// The sampling kernel (codegen/SamplingKernel.cpp) through the host emulation against the host
// sampler (runtime/sampler/sampler.h): for every draw (temperatures, top-k, top-p, min-p, steps)
// the kernel's token must be Sampler::sample's on the same row, bit for bit: both compute the
// same float probabilities and integer masses.

#include "codegen/KernelFamilies.h"
#include "runtime/sampler/logits_summary.h"
#include "runtime/sampler/sampler.h"

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using llmc::testing::HostKernel;
using SampleFn = void (*)(const float *, const unsigned char *, const unsigned char *, int *, int, unsigned);

// Row kinds: spread (a nucleus of thousands), peaked (a few dozen well above the rest), ties (8
// values), half masked with a NaN, every entry masked, an infinite logit.
std::vector<float> makeRow(int vocab, int kind, uint32_t seed) {
  std::vector<float> v = llmc::testing::randomVector(size_t(vocab), seed, 0.0f, 1.0f);
  for (size_t i = 0; i < v.size(); ++i) {
    float &x = v[i];
    switch (kind) {
    case 0: x = 6.0f * x; break;
    case 1: x = i % 97 == 5 ? 9.0f + x : 3.0f * x; break;
    case 2: x = std::floor(8.0f * x) * 0.25f; break;
    case 3: x = i == 7 ? NAN : x < 0.5f ? -INFINITY : 10.0f * x; break;
    case 4: x = -INFINITY; break;
    default: x = i == 3 ? INFINITY : x; break;
    }
  }
  return v;
}

void checkVocab(int vocab, const std::vector<int> &kinds) {
  SCOPED_TRACE("vocab " + std::to_string(vocab));
  auto spec = llmc::emitSamplingKernel(vocab);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "sample");
  HostKernel k(*spec,
               "const float *logits, const unsigned char *summaries, const unsigned char *draws, int *tokens, int n",
               "logits, summaries, draws, tokens, n");
  ASSERT_TRUE(k.ok()) << k.error();
  std::vector<float> logits;
  std::vector<llmrt::LogitsSummary> sums(kinds.size());
  for (size_t r = 0; r < kinds.size(); ++r) {
    const std::vector<float> row = makeRow(vocab, kinds[r], uint32_t(vocab + 13 * r));
    llmrt::summarize_logits(row.data(), vocab, &sums[r]);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  // Each stage alone and together (the emulation runs 1024 fibers a block: a few dozen draws).
  struct Setting {
    float t;
    int top_k;
    float top_p, min_p;
  };
  const Setting settings[] = {{1.0f, 0, 1.0f, 0.0f},   {0.6f, 0, 0.9f, 0.0f},    {1.0f, 40, 1.0f, 0.0f},
                              {1.7f, 40, 0.9f, 0.02f}, {1.0f, 1, 1.0f, 0.0f},    {1.0f, 1 << 30, 0.3f, 0.0f},
                              {0.6f, 0, 1.0f, 0.02f}};
  std::vector<llmrt::SamplingParams> params;
  for (const Setting &st : settings) {
    llmrt::SamplingParams p;
    p.temperature = st.t;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = 99;
    params.push_back(p);
  }
  // Every (row, params, step) one draw, all in one launch (then the same on 3 blocks).
  std::vector<llmrt::DeviceDraw> draws;
  std::vector<llmrt::SamplingContext> ctxs;
  for (size_t r = 0; r < kinds.size(); ++r)
    for (const llmrt::SamplingParams &p : params)
      for (uint64_t step = 0; step < 2; ++step) {
        llmrt::SamplingContext c;
        c.params = &p;
        c.request_id = r;
        c.step = step;
        auto d = llmrt::Sampler::device_draw(c, int32_t(r));
        ASSERT_TRUE(d.has_value());
        draws.push_back(*d);
        ctxs.push_back(c);
      }
  llmrt::Sampler host(vocab);
  int drawn = 0, masked = 0;
  for (const unsigned grid : {unsigned(draws.size()), 3u}) {
    if (grid == 3u && vocab > 5000)
      break; // (the grid-stride loop once is enough)
    SCOPED_TRACE("grid " + std::to_string(grid));
    std::vector<int> tokens(2 * draws.size(), -7);
    k.get<SampleFn>()(logits.data(), reinterpret_cast<const unsigned char *>(sums.data()),
                      reinterpret_cast<const unsigned char *>(draws.data()), tokens.data(), int(draws.size()), grid);
    for (size_t i = 0; i < draws.size(); ++i) {
      const llmrt::SamplingParams &p = *ctxs[i].params;
      const std::span<const float> row(logits.data() + size_t(draws[i].row) * vocab, size_t(vocab));
      auto want = host.sample(ctxs[i], row);
      if (!want.ok()) { // every entry masked, or an infinite logit: the kernel draws nothing
        EXPECT_EQ(tokens[2 * i], -1) << want.status().message();
        ++masked;
        continue;
      }
      float logit;
      std::memcpy(&logit, &tokens[2 * i + 1], 4);
      EXPECT_EQ(std::memcmp(&logit, &row[size_t(want->token)], 4), 0) << "the token's logit";
      ASSERT_EQ(tokens[2 * i], want->token) << "row kind " << kinds[size_t(draws[i].row)] << " t " << p.temperature
                                        << " top_k " << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p
                                        << " step " << ctxs[i].step;
      ++drawn;
    }
  }
  EXPECT_GT(drawn, 0);
  EXPECT_EQ(masked > 0, vocab < 5000); // (the small rows have masked and infinite kinds)
}

// Below and above the 1024 threads x a chunk of ids (3001: chunks of 3; 20000: of 20); every kind.
TEST(SamplingKernel, DrawsWhatTheHostSamplerDraws) {
  checkVocab(3001, {0, 1, 2, 3, 4, 5});
  checkVocab(20000, {0, 1, 2});
}

TEST(SamplingKernel, RefusesVocabulariesItCannotIndex) {
  EXPECT_FALSE(llmc::emitSamplingKernel(0).ok());
  EXPECT_TRUE(llmc::emitSamplingKernel(llmc::kMaxLogitsSummaryVocab).ok());
  EXPECT_FALSE(llmc::emitSamplingKernel(llmc::kMaxLogitsSummaryVocab + 1).ok());
}

} // namespace

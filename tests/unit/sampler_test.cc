#include "runtime/sampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace llmrt {
namespace {

SamplingContext ctx(const SamplingParams& p, uint64_t request = 0, uint64_t step = 0) {
  SamplingContext c;
  c.params = &p;
  c.request_id = request;
  c.step = step;
  return c;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(5);
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  auto r = s.sample(ctx(p), logits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 1);
  // logprob is log_softmax of the raw logits
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(r->logprob, 2.0 - std::log(z), 1e-5);
}

TEST(Sampler, RngIsCounterBasedAndDocumented) {
  // The documented construction, recomputed here.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  EXPECT_EQ(sampling_random_bits(42, 7, 3), mix(mix(mix(42) ^ 7) ^ 3));
  EXPECT_NE(sampling_random_bits(42, 7, 3), sampling_random_bits(42, 7, 4));
  EXPECT_NE(sampling_random_bits(42, 7, 3), sampling_random_bits(42, 8, 3));
  EXPECT_NE(sampling_random_bits(42, 7, 3), sampling_random_bits(43, 7, 3));
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t u53 = sampling_u53(1, 2, i);
    ASSERT_EQ(u53, sampling_random_bits(1, 2, i) >> 11);  // the top 53 bits
    const double u = static_cast<double>(u53) * 0x1p-53;
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Sampler, DeterministicAndIndependentOfCallOrder) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f) * 3;
  SamplingParams p;
  p.seed = 1234;
  Sampler a(100), b(100);
  std::vector<int32_t> first;
  for (int step = 0; step < 20; ++step) first.push_back(a.sample(ctx(p, 5, step), logits)->token);
  // other requests interleaved, steps in reverse order, a different Sampler object
  for (int step = 19; step >= 0; --step) {
    (void)b.sample(ctx(p, 6, step), logits);
    EXPECT_EQ(b.sample(ctx(p, 5, step), logits)->token, first[step]);
  }
  std::set<int32_t> distinct(first.begin(), first.end());
  EXPECT_GT(distinct.size(), 3u) << "the draws should vary with the step";
}

TEST(Sampler, MatchesTheDistribution) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(3);
  SamplingParams p;
  p.seed = 9;
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.sample(ctx(p, 0, i), logits)->token]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.015);
}

TEST(Sampler, TopKTopPMinPRestrictTheSupport) {
  // probabilities proportional to 40, 25, 15, 10, 6, 4
  std::vector<float> logits;
  for (float w : {40.f, 25.f, 15.f, 10.f, 6.f, 4.f}) logits.push_back(std::log(w));
  Sampler s(6);
  auto support = [&](SamplingParams p) {
    std::set<int32_t> seen;
    for (int i = 0; i < 3000; ++i) seen.insert(s.sample(ctx(p, 1, i), logits)->token);
    return seen;
  };
  SamplingParams p;
  EXPECT_EQ(support(p).size(), 6u);
  p.top_k = 2;
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1}));
  p = {};
  p.top_p = 0.7f;  // 0.40 + 0.25 = 0.65 < 0.7 -> include the third
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2}));
  p.top_p = 0.65f;
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1}));
  p = {};
  p.min_p = 0.3f;  // keep p >= 0.3 * 0.4 = 0.12
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.3f;
  p.top_k = 1;  // min-p then top-k
  EXPECT_EQ(support(p), (std::set<int32_t>{0}));
  p = {};
  p.temperature = 0.05f;  // very cold: almost always the argmax
  auto cold = support(p);
  EXPECT_EQ(cold, (std::set<int32_t>{0}));
}

TEST(Sampler, PenaltiesFollowVllm) {
  // token 0 positive logit, token 1 negative, token 2 unseen
  std::vector<float> logits = {2.0f, -1.0f, 1.9f, 0.0f};
  Sampler s(4);
  SamplingParams p;
  p.temperature = 0;
  std::vector<int32_t> prompt = {0, 1};
  SamplingContext c = ctx(p);
  c.prompt_tokens = prompt;
  EXPECT_EQ(s.sample(c, logits)->token, 0);
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.818 < 1.9
  EXPECT_EQ(s.sample(c, logits)->token, 2);
  // negative logits are multiplied: token 1 becomes -1.1, still below token 3 (0.0)
  // frequency / presence penalties count only output tokens
  p = {};
  p.temperature = 0;
  p.frequency_penalty = 0.05f;
  std::vector<int32_t> out = {0, 0};  // 2.0 - 2 * 0.05 = 1.9 == token 2 -> tie, lowest id wins
  c = ctx(p);
  c.prompt_tokens = prompt;
  c.output_tokens = out;
  EXPECT_EQ(s.sample(c, logits)->token, 0);
  p.frequency_penalty = 0.06f;
  EXPECT_EQ(s.sample(c, logits)->token, 2);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.2f;  // once, regardless of count
  EXPECT_EQ(s.sample(c, logits)->token, 2);
  c.output_tokens = {};
  EXPECT_EQ(s.sample(c, logits)->token, 0) << "prompt tokens do not count for presence";
}

class MaskAllBut : public LogitsProcessor {
 public:
  explicit MaskAllBut(std::set<int32_t> allowed) : allowed_(std::move(allowed)) {}
  Status apply(const SamplingContext&, std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i)
      if (!allowed_.count(static_cast<int32_t>(i))) logits[i] = -INFINITY;
    return ok_status();
  }
  std::set<int32_t> allowed_;
};

class Recorder : public LogitsProcessor {
 public:
  Status apply(const SamplingContext&, std::span<float> logits) override {
    seen.assign(logits.begin(), logits.end());
    return ok_status();
  }
  std::vector<float> seen;
};

class Failing : public LogitsProcessor {
 public:
  Status apply(const SamplingContext&, std::span<float>) override { return invalid_argument("bad grammar"); }
};

TEST(Sampler, OrderPenaltiesThenBiasThenProcessorsThenTemperature) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  Sampler s(3);
  SamplingParams p;
  p.temperature = 0.5f;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{0, 10.0f}};
  std::vector<int32_t> prompt = {2};
  SamplingContext c = ctx(p);
  c.prompt_tokens = prompt;
  Recorder rec;
  LogitsProcessor* procs[] = {&rec};
  ASSERT_TRUE(s.sample(c, logits, procs).ok());
  // the processor sees penalties (3 / 2) and bias (1 + 10) applied, but not temperature
  EXPECT_EQ(rec.seen, (std::vector<float>{11.0f, 2.0f, 1.5f}));
  // processors mask before sampling; the raw logprob is reported
  MaskAllBut only1({1});
  LogitsProcessor* mask[] = {&only1};
  for (int i = 0; i < 50; ++i) {
    auto r = s.sample(ctx(p, 0, i), logits, mask);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token, 1);
    EXPECT_NEAR(r->logprob, 2.0 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-5);
  }
  MaskAllBut none({});
  LogitsProcessor* all[] = {&none};
  EXPECT_EQ(s.sample(ctx(p), logits, all).status().code(), StatusCode::kFailedPrecondition);
  Failing f;
  LogitsProcessor* failing[] = {&f};
  EXPECT_FALSE(s.sample(ctx(p), logits, failing).ok());
}

TEST(Sampler, BadParamsAreErrors) {
  Sampler s(3);
  std::vector<float> logits = {0, 0, 0};
  auto bad = [&](auto mutate) {
    SamplingParams p;
    mutate(p);
    return !s.sample(ctx(p), logits).ok();
  };
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = 2; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{3, 1.0f}}; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.frequency_penalty = NAN; }));
  SamplingParams p;
  std::vector<float> short_row = {0, 0};
  EXPECT_FALSE(s.sample(ctx(p), short_row).ok());
  SamplingContext c = ctx(p);
  std::vector<int32_t> bad_prompt = {5};
  c.prompt_tokens = bad_prompt;
  EXPECT_FALSE(s.sample(c, logits).ok());
  SamplingContext no_params;
  EXPECT_FALSE(s.sample(no_params, logits).ok());
}


// ---- sampling from a logits summary (logits_summary.h) ----

// Rows with distinct values, heavy ties, masked (-inf) runs, a NaN, and vocabularies both
// below and above the summary's 64 entries.
std::vector<float> summaryRow(int vocab, int kind, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(vocab));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float u = float((s >> 40) & 0xFFFFFF) / float(1 << 24);
    switch (kind) {
      case 0: x = 8.0f * u - 4.0f; break;                           // distinct
      case 1: x = std::floor(6.0f * u) * 0.5f; break;               // six values: ties everywhere
      case 2: x = u < 0.5f ? -INFINITY : 20.0f * u; break;          // half masked
      default: x = u < 0.01f ? NAN : 3.0f * u * u * u; break;        // a few NaN, a long flat tail
    }
  }
  return v;
}

TEST(SamplerSummary, DecidesExactlyAsTheWholeRowOrDeclines) {
  std::vector<SamplingParams> params;
  auto add = [&](float t, int k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 1234;
    params.push_back(p);
  };
  for (float t : {0.0f, 0.3f, 1.0f, 2.5f})
    for (int k : {0, 1, 5, 40, 64, 65, 200})
      for (float top_p : {1.0f, 0.9f, 0.3f})
        for (float min_p : {0.0f, 0.05f, 0.5f}) add(t, k, top_p, min_p);
  int decided = 0, declined = 0, greedy_decided = 0, topk_decided = 0;
  for (int vocab : {7, 64, 65, 300, 2000})
    for (int kind = 0; kind < 4; ++kind) {
      const std::vector<float> row = summaryRow(vocab, kind, static_cast<uint32_t>(vocab * 10 + kind));
      LogitsSummary sum;
      summarize_logits(row.data(), vocab, &sum);
      Sampler whole(vocab), quick(vocab);
      for (const SamplingParams& p : params)
        for (uint64_t step = 0; step < 4; ++step) {
          const SamplingContext c = ctx(p, 3, step);
          auto want = whole.sample(c, row);
          auto got = quick.sample_from_summary(c, sum);
          ASSERT_TRUE(got.ok()) << got.status().message();
          if (!got->has_value()) {
            ++declined;
            continue;
          }
          ++decided;
          greedy_decided += p.temperature == 0.0f;
          topk_decided += p.temperature > 0.0f && p.top_k > 0 && p.min_p == 0.0f && vocab > 64;
          ASSERT_TRUE(want.ok()) << "the summary decided a row the whole row refuses";
          EXPECT_EQ((*got)->token, want->token)
              << "vocab " << vocab << " kind " << kind << " t " << p.temperature << " k " << p.top_k << " p "
              << p.top_p << " min_p " << p.min_p << " step " << step;
          if (std::isnan(want->logprob))
            EXPECT_TRUE(std::isnan((*got)->logprob));
          else
            EXPECT_EQ((*got)->logprob, want->logprob);  // bit for bit: the same log_sum
        }
    }
  // The summary must carry most of the load, and still decline where it cannot know.
  EXPECT_GT(greedy_decided, 0);
  EXPECT_GT(topk_decided, 0);
  EXPECT_GT(declined, 0);
  EXPECT_GT(decided, declined);
}

TEST(SamplerSummary, DeclinesWhereTokensOutsideTheSummaryCouldBeDrawn) {
  // 100 tokens: 0..59 distinct and large, 60..99 all equal: the 64th and 65th are tied.
  const int vocab = 100;
  std::vector<float> row(vocab);
  for (int i = 0; i < vocab; ++i) row[i] = i < 60 ? 10.0f - 0.1f * i : 1.0f;
  LogitsSummary sum;
  summarize_logits(row.data(), vocab, &sum);
  ASSERT_EQ(sum.count, 64);
  EXPECT_FALSE(sum.complete());
  EXPECT_EQ(sum.ids[60], 60);  // ties by id ascending
  EXPECT_EQ(sum.ids[63], 63);
  Sampler s(vocab);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 64;  // the 64th probability equals the 65th's: undecided
  EXPECT_FALSE(s.sample_from_summary(ctx(p), sum)->has_value());
  p.top_k = 60;  // the 60th beats everything left out
  EXPECT_TRUE(s.sample_from_summary(ctx(p), sum)->has_value());
  p.top_k = 0;  // the whole distribution: undecided
  EXPECT_FALSE(s.sample_from_summary(ctx(p), sum)->has_value());
  p.min_p = 0.5f;  // min-p drops everything left out (e^-9 < 0.5): decided
  EXPECT_TRUE(s.sample_from_summary(ctx(p), sum)->has_value());
  p.min_p = 0.0f;
  p.top_k = 5;
  p.repetition_penalty = 1.2f;  // penalties edit logits the summary does not hold
  EXPECT_FALSE(s.sample_from_summary(ctx(p), sum)->has_value());
  p.repetition_penalty = 1.0f;
  p.logit_bias = {{99, 50.0f}};
  EXPECT_FALSE(s.sample_from_summary(ctx(p), sum)->has_value());
  // A corrupt summary is an error, not a read out of bounds.
  p.logit_bias.clear();
  sum.ids[3] = vocab;
  EXPECT_FALSE(s.sample_from_summary(ctx(p), sum).ok());
}

// Stages 4-8 as sampler.h states them, the plain way (every candidate sorted), for rows no penalty
// or processor edits: what the sampler's chunked sorting must draw.
int32_t reference_draw(const std::vector<float>& w, const SamplingParams& p, uint64_t request, uint64_t step) {
  float mx = -INFINITY;
  for (float x : w)
    if (!std::isnan(x)) mx = std::max(mx, x);
  const float inv_t = 1.0f / p.temperature, mx_scaled = mx * inv_t;
  std::vector<std::pair<float, int32_t>> cand;
  float pmax = 0.0f;
  for (int32_t i = 0; i < static_cast<int32_t>(w.size()); ++i) {
    if (std::isnan(w[i]) || w[i] == -INFINITY) continue;
    const float e = sampling_exp(w[i] * inv_t - mx_scaled);
    if (sampling_mass(e) > 0) cand.emplace_back(e, i);
    pmax = std::max(pmax, e);
  }
  if (p.min_p > 0.0f)
    std::erase_if(cand, [&](const auto& c) { return c.first < p.min_p * pmax; });
  auto before = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  std::sort(cand.begin(), cand.end(), before);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand.size()) cand.resize(static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    uint64_t total = 0, cum = 0;
    for (const auto& c : cand) total += sampling_mass(c.first);
    size_t keep = 0;
    while (keep < cand.size()) {
      cum += sampling_mass(cand[keep++].first);
      if (static_cast<double>(cum) >= static_cast<double>(p.top_p) * static_cast<double>(total)) break;
    }
    cand.resize(std::max<size_t>(keep, 1));
  }
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  uint64_t total = 0;
  for (const auto& c : cand) total += sampling_mass(c.first);
  const unsigned __int128 u53 = sampling_random_bits(p.seed, request, step) >> 11;
  const uint64_t r = static_cast<uint64_t>(u53 * total >> 53);
  uint64_t cum = 0;
  for (const auto& c : cand)
    if ((cum += sampling_mass(c.first)) > r) return c.second;
  return -1;
}

// sampling_exp: e^x within 4 units in the last place over (-87, 0] (a sweep of 2^22 points), 1 at
// 0, 0 from -87 down and for -inf and NaN; where it steps down as x grows (it is not exactly
// monotone), by less than the summary's slack (1 + 2^-16): every float of [-1, -0.5] and of a
// window around each point where its reduction's k changes ((j + 1/2) ln 2).
TEST(Sampler, SamplingExpIsExpWithinAFewUlp) {
  EXPECT_EQ(sampling_exp(0.0f), 1.0f);
  EXPECT_EQ(sampling_exp(-0.0f), 1.0f);
  EXPECT_EQ(sampling_exp(-87.0f), 0.0f);
  EXPECT_EQ(sampling_exp(-INFINITY), 0.0f);
  EXPECT_EQ(sampling_exp(NAN), 0.0f);
  double worst = 0.0;
  const int n = 1 << 22;
  for (int i = 1; i <= n; ++i) {
    const float x = -87.0f + 87.0f * static_cast<float>(i) / static_cast<float>(n);
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(sampling_exp(x) - want) / std::ldexp(1.0, std::ilogb(want) - 23));
  }
  EXPECT_LE(worst, 4.0);
  double worst_drop = 0.0;
  auto walk = [&](float lo, float hi) {
    float prev = sampling_exp(lo);
    for (float x = std::nextafter(lo, 1.0f); x <= hi; x = std::nextafter(x, 1.0f)) {
      const float e = sampling_exp(x);
      if (e < prev) worst_drop = std::max(worst_drop, static_cast<double>(prev) / e - 1.0);
      prev = e;
    }
  };
  walk(-1.0f, -0.5f);
  for (int j = 0; j < 126; ++j) {
    const float b = -(static_cast<float>(j) + 0.5f) * 0.693147181f;
    walk(b - 0x1p-12f * std::max(1.0f, -b), b + 0x1p-12f * std::max(1.0f, -b));
  }
  EXPECT_LT(worst_drop, 0x1p-16) << worst_drop;
}

// Rows of 40000 and 128256 entries (more than 16384 candidates: top-p's bins find where its
// prefix ends, a chunk is sorted, not the row): spread (the nucleus thousands of tokens),
// peaked (a few dozen) and tied logits, with top-k, min-p and temperatures.
TEST(Sampler, TopPSortsOnlyItsPrefixAndDrawsAsAWholeSort) {
  int draws = 0;
  for (int vocab : {40000, 128256})
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> row(static_cast<size_t>(vocab));
      uint64_t st = static_cast<uint64_t>(vocab) * 31 + static_cast<uint64_t>(kind);
      for (size_t i = 0; i < row.size(); ++i) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        const float u = float((st >> 40) & 0xFFFFFF) / float(1 << 24);
        row[i] = kind == 0 ? 6.0f * u : kind == 1 ? (i % 997 == 5 ? 12.0f + u : 3.0f * u) : std::floor(8.0f * u);
      }
      Sampler s(vocab);
      for (float t : {0.7f, 1.3f})
        for (float top_p : {0.5f, 0.9f, 0.99f})
          for (int k : {0, 40, 1 << 20})
            for (float min_p : {0.0f, 0.001f}) {
              SamplingParams p;
              p.temperature = t;
              p.top_p = top_p;
              p.top_k = k;
              p.min_p = min_p;
              p.seed = 77;
              for (uint64_t step = 0; step < 2; ++step) {
                auto got = s.sample(ctx(p, 4, step), row);
                ASSERT_TRUE(got.ok()) << got.status().message();
                ASSERT_EQ(got->token, reference_draw(row, p, 4, step))
                    << "vocab " << vocab << " kind " << kind << " t " << t << " top_p " << top_p << " k " << k
                    << " min_p " << min_p << " step " << step;
                ++draws;
              }
            }
    }
  EXPECT_EQ(draws, 2 * 3 * 2 * 3 * 3 * 2 * 2);
}

// With the row's summary the logprob comes from its max and log_sum: the same number.
TEST(Sampler, TheRowsSummaryGivesTheSameLogprob) {
  const std::vector<float> row = summaryRow(3000, 0, 5);
  LogitsSummary sum;
  summarize_logits(row.data(), 3000, &sum);
  Sampler s(3000);
  SamplingParams p;
  p.seed = 3;
  for (uint64_t step = 0; step < 8; ++step) {
    auto plain = s.sample(ctx(p, 1, step), row);
    auto with = s.sample(ctx(p, 1, step), row, {}, &sum);
    ASSERT_TRUE(plain.ok() && with.ok());
    EXPECT_EQ(with->token, plain->token);
    EXPECT_EQ(with->logprob, plain->logprob);
  }
}

TEST(SamplerSummary, HostSummaryOrdersByLogitThenId) {
  const std::vector<float> row = {1.0f, NAN, 3.0f, -INFINITY, 3.0f, 2.0f};
  LogitsSummary sum;
  summarize_logits(row.data(), 6, &sum);
  EXPECT_EQ(sum.num_valid, 5);
  ASSERT_EQ(sum.count, 5);
  EXPECT_TRUE(sum.complete());
  EXPECT_EQ(sum.max, 3.0f);
  const std::vector<int32_t> ids(sum.ids, sum.ids + 5);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 4, 5, 0, 3}));
  EXPECT_TRUE(std::isnan(sum.log_sum));  // as the whole row's logprobs are
  EXPECT_EQ(sum.ids[5], -1);
}
}  // namespace
}  // namespace llmrt

// The serving engine on the tiny plan: continuous batching, chunked prefill, prefix caching,
// preemption, n > 1, logprobs, aborts, and submit-time errors. Every answer produced while many
// requests run together is compared with the same request run alone.
#include "runtime/serve/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <random>

#include "runtime/serve/metrics.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

using std::chrono::milliseconds;

struct Result {
  std::map<int, std::vector<int32_t>> tokens;          // choice → tokens
  std::map<int, std::vector<float>> logprobs;
  std::map<int, std::string> finish;
  std::vector<uint64_t> token_steps;                   // step of every event carrying tokens
  int32_t cached_tokens = 0;
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> tops;
  Status error;
};

Result collect(RequestHandle& h) {
  Result r;
  for (;;) {
    auto e = h.next(milliseconds(60000));
    if (!e) {
      r.error = internal_error("timed out waiting for the engine");
      return r;
    }
    r.cached_tokens = std::max(r.cached_tokens, e->cached_tokens);
    if (!e->prompt_logprobs.empty()) r.prompt_logprobs = e->prompt_logprobs;
    bool any = false;
    for (const ChoiceDelta& d : e->choices) {
      for (const TokenLogprob& t : d.tokens) {
        r.tokens[d.index].push_back(t.token);
        r.logprobs[d.index].push_back(t.logprob);
        r.tops.push_back(t.top);
        any = true;
      }
      if (!d.finish_reason.empty()) r.finish[d.index] = d.finish_reason;
    }
    if (any) r.token_steps.push_back(e->step);
    if (e->finished) {
      r.error = e->error;
      return r;
    }
  }
}

struct Tiny {
  testing::TinyPlanSpec spec;
  std::unique_ptr<Plan> plan;
};

Tiny tiny(int max_model_len = 64, int max_seqs = 64, int max_tokens = 64, const std::string& kv_dtype = "f32") {
  testing::TinyPlanConfig cfg;
  cfg.kv_dtype = kv_dtype;
  cfg.max_model_len = max_model_len;
  cfg.max_seqs = max_seqs;
  cfg.max_tokens = max_tokens;
  cfg.fused = true;
  Tiny t{testing::make_tiny_plan(cfg), nullptr};
  auto p = testing::open_tiny_plan(t.spec);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  t.plan = std::move(p).value();
  return t;
}

// Bytes of one KV block on the CPU backend (K and V, every layer: fp32, bf16 / f16, or int8 codes
// plus an f32 scale per token and head).
uint64_t kv_block_bytes(const Tiny& t) {
  const uint64_t row = t.spec.kv_dtype == fb::DType::I8       ? t.spec.kv_head_dim + 4ull
                       : t.spec.kv_dtype == fb::DType::F8E4M3 ? t.spec.kv_head_dim * 1ull
                       : t.spec.kv_dtype == fb::DType::F32    ? t.spec.kv_head_dim * 4ull
                                                              : t.spec.kv_head_dim * 2ull;
  return 2ull * t.spec.kv_layers * t.spec.kv_heads * row * t.spec.kv_block_size;
}

std::unique_ptr<Engine> engine(const Plan& plan, EngineOptions o, Metrics* metrics = nullptr) {
  if (!o.threads) o.threads = 2;
  auto e = Engine::create(plan, o, metrics);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  return p;
}

EngineRequest make_request(std::mt19937& rng, int i, int vocab) {
  EngineRequest r;
  r.prompt = random_prompt(rng, 1 + static_cast<int>(rng() % 30), vocab);
  r.max_tokens = 1 + static_cast<int>(rng() % 20);
  r.ignore_eos = true;
  if (i % 2 == 0) {
    r.sampling.temperature = 0;  // greedy
  } else {
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.has_seed = true;
  }
  if (i % 7 == 3) r.n = 2;
  return r;
}

// Runs each request alone (one at a time) on a fresh engine.
std::vector<Result> run_alone(const Plan& plan, const std::vector<EngineRequest>& reqs, EngineOptions o) {
  auto e = engine(plan, o);
  std::vector<Result> out;
  for (const EngineRequest& r : reqs) {
    auto h = e->submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    out.push_back(collect(**h));
  }
  return out;
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  ASSERT_TRUE(got.error.ok()) << what << ": " << got.error.to_string();
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.finish, want.finish) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (const auto& [i, lp] : want.logprobs) {
    ASSERT_EQ(got.logprobs.at(i).size(), lp.size()) << what;
    for (size_t k = 0; k < lp.size(); ++k) EXPECT_EQ(got.logprobs.at(i)[k], lp[k]) << what << " token " << k;
  }
}

TEST(Engine, SixtyFourConcurrentRequestsEqualEachRunAlone) {
  Tiny t = tiny();
  std::mt19937 rng(7);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 64; ++i) reqs.push_back(make_request(rng, i, t.spec.config.vocab));
  EngineOptions o;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 64;
  o.kv_cache_bytes = 1ull << 30;  // room for everyone: no preemption here
  const std::vector<Result> alone = run_alone(*t.plan, reqs, o);

  Metrics metrics("tiny");
  auto e = engine(*t.plan, o, &metrics);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const EngineRequest& r : reqs) handles.push_back(*e->submit(r));
  std::vector<Result> together;
  for (auto& h : handles) together.push_back(collect(*h));
  for (size_t i = 0; i < reqs.size(); ++i) {
    expect_same(together[i], alone[i], "request " + std::to_string(i));
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(reqs[i].n));
    for (const auto& [c, toks] : together[i].tokens) EXPECT_EQ(toks.size(), static_cast<size_t>(reqs[i].max_tokens));
  }
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  const EngineStats st = e->stats();
  EXPECT_EQ(st.num_used_blocks, 0) << "blocks still referenced after every request finished";
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_preemptions, 0u);
  // Batching happened: far fewer steps than tokens.
  int64_t total = 0;
  for (const auto& r : reqs) total += r.max_tokens * r.n;
  EXPECT_LT(static_cast<int64_t>(st.num_steps), total / 4);
  const std::string text = metrics.serialize();
  EXPECT_NE(text.find("llmrt:request_success_total{finished_reason=\"length\",model_name=\"tiny\"} 64"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("llmrt:kv_cache_usage_perc{model_name=\"tiny\"} 0"), std::string::npos);
}

TEST(Engine, CompactKvCachesKeepAnswersIndependentOfLoadForksAndPreemption) {
  // The int8 cache quantizes each token's row on its own, bf16, f16 and fp8 caches round each
  // element on its own, so batching, copy-on-write forks (n=2) and recompute after preemption give
  // the same answers as running alone.
  for (const auto& [kv, dtype] : {std::pair{"int8", fb::DType::I8}, std::pair{"bf16", fb::DType::BF16},
                                  std::pair{"f16", fb::DType::F16}, std::pair{"fp8", fb::DType::F8E4M3}}) {
    SCOPED_TRACE(kv);
    Tiny t = tiny(64, 64, 64, kv);
    ASSERT_EQ(t.spec.kv_dtype, dtype);
    std::mt19937 rng(71);
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 24; ++i) reqs.push_back(make_request(rng, i, t.spec.config.vocab));
    EngineOptions big;
    big.kv_cache_bytes = 1ull << 26;
    const std::vector<Result> alone = run_alone(*t.plan, reqs, big);
    EngineOptions small;
    small.kv_cache_bytes = kv_block_bytes(t) * 40;  // tight: preemptions
    small.max_num_seqs = 16;
    auto e = engine(*t.plan, small);
    EXPECT_EQ(e->config().num_kv_blocks, 40);  // blocks of (head_dim + 4) / (4 * head_dim), a half or a quarter of f32
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const EngineRequest& r : reqs) handles.push_back(*e->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(collect(*handles[i]), alone[i], std::string(kv) + " KV request " + std::to_string(i));
    ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
    EXPECT_EQ(e->stats().num_used_blocks, 0);
    EXPECT_GT(e->stats().num_preemptions, 0u) << "the pool was meant to force preemptions";
  }
}

TEST(Engine, SmallKvPoolPreemptsAndStillAnswersCorrectly) {
  Tiny t = tiny();
  std::mt19937 rng(11);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    EngineRequest r = make_request(rng, i, t.spec.config.vocab);
    r.prompt = random_prompt(rng, 20, t.spec.config.vocab);
    r.max_tokens = 30;
    reqs.push_back(r);
  }
  EngineOptions big;
  big.kv_cache_bytes = 1ull << 30;
  const std::vector<Result> alone = run_alone(*t.plan, reqs, big);

  EngineOptions small;
  small.max_num_batched_tokens = 64;
  // Exactly enough for two sequences of max_model_len (64 tokens = 16 blocks of 4).
  const uint64_t block_bytes = kv_block_bytes(t);
  small.kv_cache_bytes = block_bytes * 32;
  small.enable_prefix_caching = false;
  Metrics metrics("tiny");
  auto e = engine(*t.plan, small, &metrics);
  ASSERT_EQ(e->config().num_kv_blocks, 32);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const EngineRequest& r : reqs) handles.push_back(*e->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(collect(*handles[i]), alone[i], "request " + std::to_string(i));
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  EXPECT_GT(e->stats().num_preemptions, 0u) << "the pool was meant to be too small for everyone";
  EXPECT_EQ(e->stats().num_used_blocks, 0);
  EXPECT_NE(metrics.serialize().find("llmrt:num_preemptions_total{model_name=\"tiny\"} "), std::string::npos);
}

TEST(Engine, PrefixCacheHitGivesSameAnswer) {
  Tiny t = tiny();
  std::mt19937 rng(3);
  EngineRequest r;
  r.prompt = random_prompt(rng, 30, t.spec.config.vocab);
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  auto e = engine(*t.plan, o);
  Result first = collect(**e->submit(r));
  Result second = collect(**e->submit(r));
  EXPECT_EQ(first.cached_tokens, 0);
  // 30 tokens, blocks of 4: 7 full blocks hold 28 tokens, at most 29 may be reused.
  EXPECT_EQ(second.cached_tokens, 28);
  expect_same(second, first, "cached prefix");
  // Same prefix, other ending: the shared full blocks are reused, the answer matches a cold run.
  EngineRequest other = r;
  other.prompt.resize(21);
  other.prompt.push_back(5);
  Result warm = collect(**e->submit(other));
  EXPECT_EQ(warm.cached_tokens, 20);
  EngineOptions cold = o;
  cold.enable_prefix_caching = false;
  Result reference = run_alone(*t.plan, {other}, cold)[0];
  expect_same(warm, reference, "partial prefix");
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  EXPECT_EQ(e->stats().num_used_blocks, 0);
  EXPECT_GT(e->stats().num_cached_blocks, 0);
}

TEST(Engine, ChunkedPrefillKeepsDecodesGoing) {
  // A decodes for far longer than B's prefill takes, even if the engine runs many steps
  // between A's first token and B's submission (tiny steps take microseconds).
  Tiny t = tiny(/*max_model_len=*/2048, 8, 64);
  std::mt19937 rng(5);
  EngineOptions o;
  o.max_num_batched_tokens = 8;
  o.kv_cache_bytes = 1ull << 26;
  auto e = engine(*t.plan, o);
  EngineRequest a;
  a.prompt = random_prompt(rng, 4, t.spec.config.vocab);
  a.max_tokens = 2000;
  a.ignore_eos = true;
  a.sampling.temperature = 0;
  auto ha = *e->submit(a);
  // Wait for A's first token, then submit a long prompt.
  Result a_res;
  auto first = ha->next(milliseconds(60000));
  ASSERT_TRUE(first.has_value());
  // B arrives after the step that gave A its first token (and after every published step).
  const uint64_t submitted_after = std::max(first->step, e->stats().num_steps);
  EngineRequest b;
  b.prompt = random_prompt(rng, 60, t.spec.config.vocab);
  b.max_tokens = 1;
  b.ignore_eos = true;
  b.sampling.temperature = 0;
  Result b_res = collect(**e->submit(b));
  ha->cancel();  // A's remaining tokens do not matter
  a_res = collect(*ha);
  ASSERT_TRUE(b_res.error.ok());
  ASSERT_EQ(b_res.token_steps.size(), 1u);
  const uint64_t b_first = b_res.token_steps[0];
  // 60 prompt tokens at <= 7 per step (one of the 8 goes to A's decode) take >= 9 steps.
  ASSERT_GE(b_first, submitted_after + 9);
  std::set<uint64_t> a_steps(a_res.token_steps.begin(), a_res.token_steps.end());
  for (uint64_t s = submitted_after + 1; s <= b_first; ++s)
    EXPECT_TRUE(a_steps.count(s)) << "A got no token in step " << s << " while B was prefilling";
}

TEST(Engine, NChoicesShareThePromptAndDiffer) {
  Tiny t = tiny();
  std::mt19937 rng(9);
  EngineRequest r;
  r.prompt = random_prompt(rng, 10, t.spec.config.vocab);
  r.max_tokens = 12;
  r.n = 4;
  r.ignore_eos = true;
  r.sampling.temperature = 1.5f;
  r.sampling.seed = 42;
  r.has_seed = true;
  r.logprobs = 3;
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  auto e = engine(*t.plan, o);
  Result res = collect(**e->submit(r));
  ASSERT_TRUE(res.error.ok()) << res.error.to_string();
  ASSERT_EQ(res.tokens.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [i, toks] : res.tokens) {
    EXPECT_EQ(toks.size(), 12u);
    EXPECT_EQ(res.finish.at(i), "length");
    distinct.insert(toks);
  }
  EXPECT_GT(distinct.size(), 1u) << "four samples at temperature 1.5 all equal";
  for (const auto& top : res.tops) {
    ASSERT_EQ(top.size(), 3u);
    EXPECT_GE(top[0].second, top[1].second);
    EXPECT_GE(top[1].second, top[2].second);
  }
  // Reproducible: the same seed gives the same four answers.
  Result again = collect(**e->submit(r));
  EXPECT_EQ(again.tokens, res.tokens);
}

TEST(Engine, MoreChoicesThanSequencesPerStepEqualRunAlone) {
  Tiny t = tiny(/*max_model_len=*/256);
  std::mt19937 rng(23);
  EngineRequest r;
  r.prompt = random_prompt(rng, 6, t.spec.config.vocab);
  r.max_tokens = 100;
  r.n = 6;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  r.has_seed = true;
  EngineOptions big;
  big.kv_cache_bytes = 1ull << 26;
  const Result want = run_alone(*t.plan, {r}, big)[0];
  EngineOptions o;
  o.max_num_seqs = 4;  // fewer than the 6 choices
  const uint64_t block_bytes = kv_block_bytes(t);
  // The n=6 request alone needs up to 157 blocks; with the other one growing beside it, more.
  o.kv_cache_bytes = block_bytes * 170;
  o.enable_prefix_caching = false;
  auto e = engine(*t.plan, o);
  EngineRequest other;
  other.prompt = random_prompt(rng, 40, t.spec.config.vocab);
  other.max_tokens = 200;
  other.ignore_eos = true;
  other.priority = -1;  // scheduled first: the n=6 request is the one preempted
  auto h1 = *e->submit(r);
  auto h2 = *e->submit(other);
  expect_same(collect(*h1), want, "n=6 with max_num_seqs 4");
  EXPECT_TRUE(collect(*h2).error.ok());
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  EXPECT_EQ(e->stats().num_used_blocks, 0);
}

TEST(Engine, HigherPriorityArrivalPreemptsLowerPriorityWork) {
  Tiny t = tiny(/*max_model_len=*/256);
  std::mt19937 rng(29);
  EngineRequest low;
  low.prompt = random_prompt(rng, 8, t.spec.config.vocab);
  low.max_tokens = 240;
  low.ignore_eos = true;
  low.sampling.temperature = 0;
  EngineRequest high;
  high.prompt = random_prompt(rng, 200, t.spec.config.vocab);
  high.max_tokens = 20;
  high.ignore_eos = true;
  high.sampling.temperature = 0;
  high.priority = -1;
  EngineOptions big;
  big.kv_cache_bytes = 1ull << 26;
  const std::vector<Result> want = run_alone(*t.plan, {low, high}, big);
  EngineOptions o;
  const uint64_t block_bytes = kv_block_bytes(t);
  o.kv_cache_bytes = block_bytes * 64;  // one sequence of 256 tokens
  o.enable_prefix_caching = false;
  // Once the low-priority answer holds more than 14 blocks (> 56 tokens), the 200-token prompt
  // (50 blocks) is admitted with a partial chunk and needs the low request's blocks for the rest.
  // Where the low request stands when the high one arrives decides which block each needs in
  // which step (a scheduler that fed the low decode first livelocked the high prompt on some
  // alignments), so several arrival points are tried.
  for (size_t arrival : {60u, 61u, 62u, 63u, 90u}) {
    SCOPED_TRACE("high submitted after " + std::to_string(arrival) + " low tokens");
    auto e = engine(*t.plan, o);
    auto hl = *e->submit(low);
    size_t seen = 0;
    while (seen < arrival) {
      auto ev = hl->next(milliseconds(60000));
      ASSERT_TRUE(ev.has_value());
      for (const ChoiceDelta& d : ev->choices) seen += d.tokens.size();
      ASSERT_FALSE(ev->finished);
    }
    auto hh = *e->submit(high);
    Result high_res = collect(*hh);
    Result low_rest = collect(*hl);
    expect_same(high_res, want[1], "high priority");
    ASSERT_TRUE(low_rest.error.ok());
    EXPECT_EQ(low_rest.finish[0], "length");
    EXPECT_GT(e->stats().num_preemptions, 0u);
    // The low-priority request resumed after the high one finished (recompute), and its answer is
    // unchanged: its last tokens equal the tail of the run alone.
    const std::vector<int32_t>& tail = low_rest.tokens[0];
    ASSERT_EQ(tail.size() + seen, 240u);
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), want[0].tokens.at(0).begin() + seen));
    EXPECT_LT(high_res.token_steps.back(), low_rest.token_steps.back());
  }
}

TEST(Engine, LogprobsMatchTheNaiveReference) {
  Tiny t = tiny();
  std::mt19937 rng(13);
  EngineRequest r;
  r.prompt = random_prompt(rng, 12, t.spec.config.vocab);
  r.max_tokens = 3;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.prompt_logprobs = 2;
  r.logprobs = 2;
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  o.max_num_batched_tokens = 5;  // prompt logprobs across chunks
  auto e = engine(*t.plan, o);
  Result res = collect(**e->submit(r));
  ASSERT_TRUE(res.error.ok()) << res.error.to_string();
  ASSERT_EQ(res.prompt_logprobs.size(), r.prompt.size());
  EXPECT_TRUE(std::isnan(res.prompt_logprobs[0].logprob));
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), res.tokens[0].begin(), res.tokens[0].end());
  const int vocab = t.spec.config.vocab;
  const std::vector<float> ref = testing::reference_logits(t.spec, all);
  auto ref_logprob = [&](size_t pos, int32_t token) {
    const float* row = ref.data() + pos * vocab;
    double mx = row[0], sum = 0;
    for (int i = 0; i < vocab; ++i) mx = std::max<double>(mx, row[i]);
    for (int i = 0; i < vocab; ++i) sum += std::exp(row[i] - mx);
    return row[token] - mx - std::log(sum);
  };
  for (size_t p = 1; p < r.prompt.size(); ++p) {
    EXPECT_EQ(res.prompt_logprobs[p].token, r.prompt[p]);
    EXPECT_NEAR(res.prompt_logprobs[p].logprob, ref_logprob(p - 1, r.prompt[p]), 1e-4) << "prompt position " << p;
    EXPECT_EQ(res.prompt_logprobs[p].top.size(), 2u);
  }
  for (size_t k = 0; k < res.tokens[0].size(); ++k) {
    const size_t pos = r.prompt.size() - 1 + k;
    EXPECT_NEAR(res.logprobs[0][k], ref_logprob(pos, res.tokens[0][k]), 1e-4) << "output token " << k;
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(res.tops[k][0].first, res.tokens[0][k]);
  }
}

TEST(Engine, StopsAtEosAndStopIds) {
  Tiny t = tiny();
  std::mt19937 rng(17);
  EngineRequest r;
  r.prompt = random_prompt(rng, 6, t.spec.config.vocab);
  r.max_tokens = 20;
  r.sampling.temperature = 0;
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  // Find the greedy answer, then make its third token a stop id / an EOS.
  Result base = run_alone(*t.plan, {r}, o)[0];
  ASSERT_EQ(base.tokens[0].size(), 20u);
  const int32_t third = base.tokens[0][2];
  const size_t cut = std::find(base.tokens[0].begin(), base.tokens[0].end(), third) - base.tokens[0].begin() + 1;
  EngineRequest with_stop = r;
  with_stop.stop_token_ids = {third};
  Result stopped = run_alone(*t.plan, {with_stop}, o)[0];
  EXPECT_EQ(stopped.finish[0], "stop");
  EXPECT_EQ(stopped.tokens[0], std::vector<int32_t>(base.tokens[0].begin(), base.tokens[0].begin() + cut));
  EngineOptions eos = o;
  eos.eos_ids = {third};
  Result eos_res = run_alone(*t.plan, {r}, eos)[0];
  EXPECT_EQ(eos_res.finish[0], "stop");
  EXPECT_EQ(eos_res.tokens[0].size(), cut);
  r.ignore_eos = true;
  Result ignored = run_alone(*t.plan, {r}, eos)[0];
  EXPECT_EQ(ignored.tokens[0].size(), 20u);
}

TEST(Engine, AbortFreesBlocksAndReportsAbort) {
  Tiny t = tiny(/*max_model_len=*/1024, 8, 64);
  std::mt19937 rng(19);
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  auto e = engine(*t.plan, o);
  EngineRequest r;
  r.prompt = random_prompt(rng, 8, t.spec.config.vocab);
  r.max_tokens = 1000;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  auto h = *e->submit(r);
  ASSERT_TRUE(h->next(milliseconds(60000)).has_value());
  h->cancel();
  Result rest = collect(*h);
  EXPECT_TRUE(rest.error.ok());
  EXPECT_EQ(rest.finish[0], "abort");
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  EXPECT_EQ(e->stats().num_used_blocks, 0);
  // Shutting down with a request in flight ends it with an error instead of hanging.
  auto h2 = *e->submit(r);
  e->shutdown();
  Result ended = collect(*h2);
  EXPECT_FALSE(ended.error.ok());
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kUnavailable);
}

TEST(Engine, SubmitErrors) {
  Tiny t = tiny();
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  o.max_queue = 1;
  auto e = engine(*t.plan, o);
  EngineRequest r;
  r.max_tokens = 4;
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);  // empty prompt
  r.prompt.assign(64, 1);
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kOutOfRange);  // no room to answer
  r.prompt = {1, 2, 999};
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);
  r.prompt = {1, 2, 3};
  r.n = 0;
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);
  r.n = 1;
  r.max_tokens = -5;
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);
  r.max_tokens = 4;
  r.sampling.top_p = 0;
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);
  r.sampling.top_p = 1;
  r.logprobs = 21;
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kInvalidArgument);
  r.logprobs = -1;
  e->drain();
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kUnavailable);

  // A pool of exactly one max-length sequence: n = 4 long answers can never fit.
  EngineOptions tight;
  const uint64_t block_bytes = kv_block_bytes(t);
  tight.kv_cache_bytes = block_bytes * 16;
  auto e2 = engine(*t.plan, tight);
  r.n = 4;
  r.max_tokens = 60;
  EXPECT_EQ(e2->submit(r).status().code(), StatusCode::kInvalidArgument);
  // Too little memory for even one sequence is refused at start.
  tight.kv_cache_bytes = block_bytes * 15;
  EXPECT_EQ(Engine::create(*t.plan, tight).status().code(), StatusCode::kResourceExhausted);
}

TEST(Engine, QueueLimitIsResourceExhausted) {
  Tiny t = tiny(/*max_model_len=*/1024, 8, 64);
  EngineOptions o;
  o.kv_cache_bytes = 1ull << 26;
  o.max_queue = 2;
  o.max_num_seqs = 1;  // one runs, the rest wait
  auto e = engine(*t.plan, o);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 500;
  r.ignore_eos = true;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  hs.push_back(*e->submit(r));
  ASSERT_TRUE(hs[0]->next(milliseconds(60000)).has_value());  // admitted: no longer queued
  hs.push_back(*e->submit(r));
  hs.push_back(*e->submit(r));
  EXPECT_EQ(e->submit(r).status().code(), StatusCode::kResourceExhausted);
  for (auto& h : hs) h->cancel();
  ASSERT_TRUE(e->wait_idle(milliseconds(10000)));
  EXPECT_TRUE(e->submit(r).ok());
}

}  // namespace
}  // namespace llmrt

// The CPU executor on tiny plans built here: (a) logits equal a naive full recompute, (b) batch
// invariance (ragged batches, permuted physical blocks, chunked prefill, thread counts) with
// bit-identical logits, (c) bad plans and bad batches are errors, not crashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "runtime/engine/cpu_executor.h"
#include "runtime/kv/block_manager.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

using testing::TinyPlanConfig;
using testing::TinyPlanSpec;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

struct Chunk {
  int64_t seq;
  std::vector<int32_t> tokens;
};

// Drives an executor with a BlockManager: each step() appends chunks to sequences and returns
// the logits of every chunk row.
class Harness {
 public:
  Harness(std::unique_ptr<CpuExecutor> ex)
      : ex_(std::move(ex)), bm_(ex_->num_kv_blocks(), ex_->block_size()) {}
  CpuExecutor& executor() { return *ex_; }
  BlockManager& blocks() { return bm_; }

  // Returns per chunk [rows, vocab] logits. `padding` extra rows at the end (token 0, slot -1).
  std::vector<std::vector<float>> step(const std::vector<Chunk>& chunks, int padding = 0,
                                       int max_blocks = 0) {
    BatchInput b;
    std::vector<int32_t> tokens, positions, qs = {0}, ctx, tables, idx;
    std::vector<int64_t> slots;
    std::vector<std::vector<int32_t>> tabs;
    for (const Chunk& c : chunks) {
      if (!bm_.has_sequence(c.seq)) {
        EXPECT_TRUE(bm_.add_sequence(c.seq).ok());
      }
      const int32_t before = *bm_.num_tokens(c.seq);
      std::vector<BlockCopy> copies;
      Status st = bm_.append_slots(c.seq, static_cast<int32_t>(c.tokens.size()), &slots, &copies);
      EXPECT_TRUE(st.ok()) << st.to_string();
      for (const BlockCopy& cp : copies) EXPECT_TRUE(ex_->copy_kv_block(cp.src, cp.dst).ok());
      for (size_t i = 0; i < c.tokens.size(); ++i) {
        idx.push_back(static_cast<int32_t>(tokens.size()));
        tokens.push_back(c.tokens[i]);
        positions.push_back(before + static_cast<int32_t>(i));
      }
      qs.push_back(static_cast<int32_t>(tokens.size()));
      ctx.push_back(before + static_cast<int32_t>(c.tokens.size()));
      auto t = *bm_.block_table(c.seq);
      tabs.emplace_back(t.begin(), t.end());
      max_blocks = std::max<int>(max_blocks, static_cast<int>(t.size()));
    }
    for (int i = 0; i < padding; ++i) {
      tokens.push_back(0);
      positions.push_back(0);
      slots.push_back(-1);
    }
    for (auto& t : tabs) {
      t.resize(max_blocks, -1);
      tables.insert(tables.end(), t.begin(), t.end());
    }
    b.tokens = tokens;
    b.positions = positions;
    b.kv_slots = slots;
    b.query_start = qs;
    b.context_lens = ctx;
    b.block_tables = tables;
    b.max_blocks_per_seq = max_blocks;
    b.logits_indices = idx;
    const int V = ex_->vocab_size();
    std::vector<float> logits(idx.size() * V);
    Status st = ex_->forward(b, logits.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    std::vector<std::vector<float>> out;
    size_t row = 0;
    for (const Chunk& c : chunks) {
      out.emplace_back(logits.begin() + row * V, logits.begin() + (row + c.tokens.size()) * V);
      row += c.tokens.size();
    }
    return out;
  }

 private:
  std::unique_ptr<CpuExecutor> ex_;
  BlockManager bm_;
};

struct Built {
  TinyPlanSpec spec;
  std::unique_ptr<Plan> plan;
};

Built build(const TinyPlanConfig& cfg) {
  Built b{testing::make_tiny_plan(cfg), nullptr};
  auto plan = testing::open_tiny_plan(b.spec);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (plan.ok()) b.plan = std::move(plan).value();
  return b;
}

Harness harness(const Plan& plan, int threads, int blocks = 64) {
  CpuExecutorOptions opt;
  opt.threads = threads;
  opt.num_kv_blocks = blocks;
  auto ex = CpuExecutor::create(plan, opt);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  return Harness(std::move(ex).value());
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i)
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i])));
  EXPECT_LT(max_err, tol) << what;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> rows_of(const std::vector<float>& all, int first, int count, int vocab) {
  return std::vector<float>(all.begin() + int64_t(first) * vocab,
                            all.begin() + int64_t(first + count) * vocab);
}

struct Variant {
  const char* name;
  std::function<void(TinyPlanConfig&)> apply;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"unfused", [](TinyPlanConfig&) {}},
      {"fused", [](TinyPlanConfig& c) { c.fused = true; }},
      {"rope_kv_store_interleaved_llama3",
       [](TinyPlanConfig& c) {
         c.fused = true;
         c.rope_kv_store = true;
         c.rope_style = "interleaved";
         c.rope_type = "llama3";
         c.rope_factor = 4.0;
         c.rope_theta = 500.0;
       }},
      {"fused_bias_qknorm_interleaved_llama3",
       [](TinyPlanConfig& c) {
         c.fused = true;
         c.qkv_bias = true;
         c.qk_norm = true;
         c.rope_style = "interleaved";
         c.rope_type = "llama3";
         c.rope_factor = 4.0;
         c.rope_original_max_position = 16;
         c.rope_theta = 500.0;
       }},
      {"window_tied_linear_mha",
       [](TinyPlanConfig& c) {
         c.sliding_window = 5;
         c.tie_embeddings = true;
         c.rope_type = "linear";
         c.kv_heads = 4;
         c.reuse_memory = false;
       }},
      {"odd_sizes",
       [](TinyPlanConfig& c) {
         c.hidden = 36;
         c.heads = 3;
         c.kv_heads = 1;
         c.head_dim = 10;
         c.intermediate = 27;
         c.vocab = 67;
         c.block_size = 3;
       }},
  };
  return v;
}

class ExecutorVariant : public ::testing::TestWithParam<int> {};

TEST_P(ExecutorVariant, MatchesNaiveReferenceForPrefillAndDecode) {
  TinyPlanConfig cfg;
  variants()[GetParam()].apply(cfg);
  Built b = build(cfg);
  ASSERT_TRUE(b.plan);
  Harness h = harness(*b.plan, 2);
  const int V = cfg.vocab;
  auto toks = random_tokens(14, V, 7);
  // prefill 11 tokens, then decode 3 one at a time
  std::vector<int32_t> prompt(toks.begin(), toks.begin() + 11);
  auto pre = h.step({{1, prompt}});
  auto ref = testing::reference_logits(b.spec, toks);
  expect_close(pre[0], rows_of(ref, 0, 11, V), 2e-4, "prefill");
  for (int i = 11; i < 14; ++i) {
    auto dec = h.step({{1, {toks[i]}}});
    expect_close(dec[0], rows_of(ref, i, 1, V), 2e-4, "decode " + std::to_string(i));
  }
}

TEST_P(ExecutorVariant, BatchInvariantBitForBit) {
  TinyPlanConfig cfg;
  variants()[GetParam()].apply(cfg);
  Built b = build(cfg);
  ASSERT_TRUE(b.plan);
  const int V = cfg.vocab;
  const auto prompt = random_tokens(10, V, 11);
  const auto next = random_tokens(2, V, 12);
  const auto other1 = random_tokens(7, V, 13), other2 = random_tokens(3, V, 14);

  // Baseline: the prompt alone, 1 thread; then two decode steps alone.
  Harness base = harness(*b.plan, 1);
  auto alone = base.step({{1, prompt}})[0];
  auto dec1 = base.step({{1, {next[0]}}})[0];
  auto dec2 = base.step({{1, {next[1]}}})[0];

  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    {  // inside a ragged batch (before and after other sequences), with padding rows
      Harness h = harness(*b.plan, threads);
      auto r = h.step({{5, other1}, {1, prompt}, {6, other2}}, /*padding=*/3);
      EXPECT_TRUE(same_bits(r[1], alone)) << "ragged batch changed the prompt's logits";
      auto d = h.step({{6, {1}}, {1, {next[0]}}, {5, {2, 3}}});
      EXPECT_TRUE(same_bits(d[1], dec1)) << "ragged decode changed the logits";
      auto d2 = h.step({{1, {next[1]}}, {7, other1}});
      EXPECT_TRUE(same_bits(d2[0], dec2));
    }
    {  // permuted physical blocks: a held block at the front, the rest handed out in reverse
      Harness h = harness(*b.plan, threads);
      ASSERT_TRUE(h.blocks().add_sequence(100).ok());
      ASSERT_TRUE(h.blocks().add_sequence(101).ok());
      ASSERT_TRUE(h.blocks().append_slots(100, 1, nullptr, nullptr).ok());
      ASSERT_TRUE(h.blocks().append_slots(101, 8 * cfg.block_size, nullptr, nullptr).ok());
      ASSERT_TRUE(h.blocks().free_sequence(101).ok());
      auto r = h.step({{1, prompt}});
      auto table = *h.blocks().block_table(1);
      EXPECT_NE(table[0], 0);
      EXPECT_GT(table[0], table[1]) << "blocks were not permuted";
      EXPECT_TRUE(same_bits(r[0], alone)) << "physical blocks changed the logits";
      EXPECT_TRUE(same_bits(h.step({{1, {next[0]}}})[0], dec1));
    }
    {  // chunked prefill 3 + 4 + 3, each chunk in a batch with another sequence
      Harness h = harness(*b.plan, threads);
      std::vector<float> chunked;
      int pos = 0;
      int64_t other = 20;
      for (int len : {3, 4, 3}) {
        std::vector<int32_t> part(prompt.begin() + pos, prompt.begin() + pos + len);
        auto r = h.step({{other++, other2}, {1, part}});
        chunked.insert(chunked.end(), r[1].begin(), r[1].end());
        pos += len;
      }
      EXPECT_TRUE(same_bits(chunked, alone)) << "chunked prefill changed the logits";
      EXPECT_TRUE(same_bits(h.step({{1, {next[0]}}})[0], dec1));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ExecutorVariant, ::testing::Range(0, static_cast<int>(variants().size())),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(variants()[i.param].name);
                         });

TEST(CpuExecutor, ForkSharesPrefixWithCopyOnWrite) {
  TinyPlanConfig cfg;
  Built b = build(cfg);
  ASSERT_TRUE(b.plan);
  Harness h = harness(*b.plan, 2);
  const auto prompt = random_tokens(6, cfg.vocab, 31);  // 1.5 blocks: last block shared, partial
  h.step({{1, prompt}});
  ASSERT_TRUE(h.blocks().fork(1, 2).ok());
  auto a = h.step({{1, {5}}})[0];
  auto bb = h.step({{2, {9}}})[0];  // needs a copy of the shared partial block
  auto ref_a = prompt, ref_b = prompt;
  ref_a.push_back(5);
  ref_b.push_back(9);
  expect_close(a, rows_of(testing::reference_logits(b.spec, ref_a), 6, 1, cfg.vocab), 2e-4, "parent");
  expect_close(bb, rows_of(testing::reference_logits(b.spec, ref_b), 6, 1, cfg.vocab), 2e-4, "child");
}

TEST(CpuExecutor, ReportsSizes) {
  TinyPlanConfig cfg;
  Built b = build(cfg);
  ASSERT_TRUE(b.plan);
  CpuExecutorOptions opt;
  opt.threads = 2;
  opt.num_kv_blocks = 10;
  auto ex = CpuExecutor::create(*b.plan, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ((*ex)->vocab_size(), cfg.vocab);
  EXPECT_EQ((*ex)->block_size(), cfg.block_size);
  EXPECT_EQ((*ex)->num_kv_blocks(), 10);
  EXPECT_EQ((*ex)->kv_cache_bytes(),
            size_t(2) * cfg.layers * 10 * cfg.kv_heads * cfg.block_size * cfg.head_dim * 4);
  EXPECT_GE((*ex)->workspace_bytes(), b.spec.arena_bytes_per_token * cfg.max_tokens);
  opt.num_kv_blocks = 0;  // default: one full-length sequence
  auto ex2 = CpuExecutor::create(*b.plan, opt);
  ASSERT_TRUE(ex2.ok());
  EXPECT_EQ((*ex2)->num_kv_blocks(), cfg.max_model_len / cfg.block_size);
}

TEST(CpuExecutor, MemoryReuseIsActuallyExercised) {
  TinyPlanConfig cfg;
  cfg.fused = true;
  TinyPlanSpec reuse = testing::make_tiny_plan(cfg);
  cfg.reuse_memory = false;
  TinyPlanSpec flat = testing::make_tiny_plan(cfg);
  EXPECT_LT(reuse.arena_bytes_per_token, flat.arena_bytes_per_token / 2);
}

// ---------------- bad plans ----------------

Status create_from(const TinyPlanSpec& spec, CpuExecutorOptions opt = {}) {
  auto plan = testing::open_tiny_plan(spec);
  if (!plan.ok()) return plan.status().with_context("open");
  opt.threads = opt.threads ? opt.threads : 1;
  auto ex = CpuExecutor::create(**plan, opt);
  return ex.ok() ? ok_status() : ex.status();
}

int find_step(const TinyPlanSpec& s, fb::OpKind op, int nth = 0) {
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].op == op && nth-- == 0) return static_cast<int>(i);
  return -1;
}

struct BadPlan {
  const char* name;
  std::function<void(TinyPlanSpec&)> corrupt;
  const char* expect;  // substring of the error
};

TEST(CpuExecutor, BadPlansAreErrors) {
  TinyPlanConfig cfg;
  cfg.fused = true;
  const TinyPlanSpec good = testing::make_tiny_plan(cfg);
  ASSERT_TRUE(create_from(good).ok()) << create_from(good).to_string();
  const std::vector<BadPlan> cases = {
      {"unknown op", [](TinyPlanSpec& s) { s.steps[3].op = static_cast<fb::OpKind>(200); }, "not supported"},
      {"wrong weight shape",
       [](TinyPlanSpec& s) {
         int i = find_step(s, fb::OpKind::Linear);
         s.steps[i].weights[0] = s.tensor_index("model.layers.0.mlp.down_proj.weight");
       },
       "shape"},
      {"missing eps",
       [](TinyPlanSpec& s) { s.steps[find_step(s, fb::OpKind::RmsNorm)].params.clear(); }, "eps"},
      {"missing rope theta",
       [](TinyPlanSpec& s) {
         auto& p = s.steps[find_step(s, fb::OpKind::Rope)].params;
         p.erase(std::remove_if(p.begin(), p.end(), [](auto& x) { return x.key == "theta"; }), p.end());
       },
       "theta"},
      {"unknown rope type",
       [](TinyPlanSpec& s) {
         for (auto& p : s.steps[find_step(s, fb::OpKind::Rope)].params)
           if (p.key == "rope_type") p.s = "yarn";
       },
       "yarn"},
      {"kv heads differ from KvSpec",
       [](TinyPlanSpec& s) { s.kv_heads = 1; }, "num_kv_heads"},
      {"layer out of range",
       [](TinyPlanSpec& s) {
         for (auto& p : s.steps[find_step(s, fb::OpKind::KvStore)].params)
           if (p.key == "layer") p.i = 7;
       },
       "layer"},
      {"heads not multiple of kv heads",
       [](TinyPlanSpec& s) {
         for (auto& p : s.steps[find_step(s, fb::OpKind::PagedAttention)].params)
           if (p.key == "num_heads") p.i = 3;
       },
       "num_heads"},
      {"split sizes do not sum",
       [](TinyPlanSpec& s) { s.steps[find_step(s, fb::OpKind::Split)].params[0].ints[0] = 31; }, "size"},
      {"f16 activation",
       [](TinyPlanSpec& s) { s.values[5].dtype = fb::DType::F16; }, "dtype"},
      {"i32 kv cache", [](TinyPlanSpec& s) { s.kv_dtype = fb::DType::I32; }, "KV cache dtype"},
      {"kv cache dtype other than its steps'",
       [](TinyPlanSpec& s) { s.kv_dtype = fb::DType::BF16; }, "differs from the KV spec's BF16"},
      {"read before write",
       [](TinyPlanSpec& s) { std::swap(s.steps[1], s.steps[2]); }, "before it is written"},
      {"value outside arena",
       [](TinyPlanSpec& s) { s.values[4].offset_per_row = s.arena_bytes_per_token; }, "outside the arena"},
      {"memory plan clobbers a live value",
       [](TinyPlanSpec& s) {
         // the residual stream (embedding output) is read much later; put q on top of it
         const int q_linear = find_step(s, fb::OpKind::Linear);
         s.values[s.steps[q_linear].outputs[0]].offset_per_row = s.values[2].offset_per_row;
       },
       "overwrites"},
      {"embedding not fed by tokens",
       [](TinyPlanSpec& s) { s.steps[0].inputs[0] = 1; }, "token input"},
      {"logits to a non-output value",
       [](TinyPlanSpec& s) {
         s.values.push_back({"x", fb::RowKind::LogitRows, s.config.vocab, fb::DType::F32, 0});
         s.steps.back().outputs[0] = static_cast<int>(s.values.size()) - 1;
       },
       ""},
      {"no max_tokens cap", [](TinyPlanSpec& s) { s.max_tokens = 0; }, "max_tokens"},
      {"input value id out of range",
       [](TinyPlanSpec& s) { s.steps[4].inputs[0] = 10000; }, ""},
      {"quantized-like weight dtype",
       [](TinyPlanSpec& s) {
         auto& t = s.tensors[s.tensor_index("model.layers.0.mlp.down_proj.weight")];
         t.dtype = fb::DType::I32;
       },
       "dtype"},
  };
  for (const BadPlan& c : cases) {
    TinyPlanSpec s = good;
    c.corrupt(s);
    Status st = create_from(s);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.name << ": " << st.to_string();
  }
  // The fused rope + KV write step.
  TinyPlanConfig fused_cfg = cfg;
  fused_cfg.rope_kv_store = true;
  const TinyPlanSpec fused = testing::make_tiny_plan(fused_cfg);
  ASSERT_TRUE(create_from(fused).ok()) << create_from(fused).to_string();
  auto param = [](TinyPlanSpec& s, const char* key) -> testing::TinyParam& {
    for (auto& p : s.steps[find_step(s, fb::OpKind::RopeKvStore)].params)
      if (p.key == key) return p;
    throw std::runtime_error(key);
  };
  const std::vector<BadPlan> fused_cases = {
      {"rope_kv_store heads do not fit the width", [&](TinyPlanSpec& s) { param(s, "num_heads").i = 2; }, "widths"},
      {"rope_kv_store heads not a multiple of kv heads", [&](TinyPlanSpec& s) { param(s, "num_heads").i = 3; },
       "multiple"},
      {"rope_kv_store layer out of range", [&](TinyPlanSpec& s) { param(s, "layer").i = 9; }, "layer"},
      {"rope_kv_store rope type", [&](TinyPlanSpec& s) { param(s, "rope_type").s = "yarn"; }, "yarn"},
      {"rope_kv_store head_dim", [&](TinyPlanSpec& s) { param(s, "head_dim").i = 4; }, "head_dim"},
      {"rope_kv_store reads tokens as positions",
       [](TinyPlanSpec& s) { s.steps[find_step(s, fb::OpKind::RopeKvStore)].inputs[1] = 0; }, "position input"},
  };
  for (const BadPlan& c : fused_cases) {
    TinyPlanSpec s = fused;
    c.corrupt(s);
    Status st = create_from(s);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.name << ": " << st.to_string();
  }
  CpuExecutorOptions too_many;
  too_many.max_tokens_per_step = cfg.max_tokens + 1;
  EXPECT_FALSE(create_from(good, too_many).ok());
  CpuExecutorOptions neg;
  neg.num_kv_blocks = -1;
  EXPECT_FALSE(create_from(good, neg).ok());
}

// GPTQ desc_act: a linear whose weight columns are permuted reads x[:, perm] (PermuteColumns).
// Permuting every linear's weight and gathering its input the same way must give the model's
// logits; a perm that is not a permutation is refused at load.
TEST(CpuExecutor, PermuteColumnsFeedsLinearsWithPermutedWeights) {
  TinyPlanConfig cfg;
  TinyPlanSpec s = testing::make_tiny_plan(cfg);
  const auto toks = random_tokens(9, cfg.vocab, 5);
  const auto want = testing::reference_logits(s, toks);
  std::mt19937 rng(11);
  int permuted = 0;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    if (s.steps[i].op != fb::OpKind::Linear) continue;
    const int in = s.steps[i].inputs[0];
    const int64_t k = s.values[in].width;
    std::vector<int64_t> perm(k);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    testing::TinyTensor& w = s.tensors[s.steps[i].weights[0]];
    const std::vector<float> orig = w.data;
    for (int64_t o = 0; o < w.shape[0]; ++o)
      for (int64_t j = 0; j < k; ++j) w.data[o * k + j] = orig[o * k + perm[j]];
    s.values.push_back({"permuted_" + std::to_string(i), fb::RowKind::Tokens, k, fb::DType::F32, 0});
    const int xp = static_cast<int>(s.values.size()) - 1;
    testing::TinyParam p;
    p.key = "perm";
    p.ints = perm;
    s.steps[i].inputs[0] = xp;
    s.steps.insert(s.steps.begin() + static_cast<std::ptrdiff_t>(i),
                   testing::TinyStep{fb::OpKind::PermuteColumns, {in}, {xp}, {}, {p}, "perm"});
    ++i;
    ++permuted;
  }
  ASSERT_EQ(permuted, 7 * cfg.layers);
  testing::plan_tiny_memory(&s, true);
  auto plan = testing::open_tiny_plan(s);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  Harness h = harness(**plan, 2);
  expect_close(h.step({{1, toks}})[0], want, 2e-4, "permuted linears");

  const int step = find_step(s, fb::OpKind::PermuteColumns);
  TinyPlanSpec repeat = s;
  repeat.steps[step].params[0].ints[1] = repeat.steps[step].params[0].ints[0];
  EXPECT_NE(create_from(repeat).message().find("is not a permutation"), std::string::npos)
      << create_from(repeat).to_string();
  TinyPlanSpec shorter = s;
  shorter.steps[step].params[0].ints.pop_back();
  EXPECT_NE(create_from(shorter).message().find("one input column per output column"), std::string::npos)
      << create_from(shorter).to_string();
}

// Random single-field corruptions: create() must refuse them or produce an executor that runs a
// valid batch without touching memory it does not own (run under ASan to make this bite).
TEST(CpuExecutor, RandomCorruptionsNeverCrash) {
  TinyPlanConfig cfg;
  cfg.fused = true;
  cfg.qkv_bias = true;
  const TinyPlanSpec good = testing::make_tiny_plan(cfg);
  std::mt19937 rng(2024);
  int accepted = 0;
  for (int iter = 0; iter < 150; ++iter) {
    TinyPlanSpec s = good;
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    switch (pick(6)) {
      case 0: s.values[2 + pick(s.values.size() - 2)].width = 1 + pick(80); break;
      case 1: s.values[2 + pick(s.values.size() - 2)].offset_per_row = 4 * pick(s.arena_bytes_per_token / 4 + 8); break;
      case 2: {
        auto& st = s.steps[pick(s.steps.size())];
        if (!st.inputs.empty()) st.inputs[pick(st.inputs.size())] = static_cast<int>(pick(s.values.size()));
        break;
      }
      case 3: {
        auto& st = s.steps[pick(s.steps.size())];
        if (!st.params.empty()) {
          auto& p = st.params[pick(st.params.size())];
          p.i = static_cast<int64_t>(pick(20)) - 3;
          p.f = (static_cast<double>(pick(100)) - 10.0) / 7.0;
        }
        break;
      }
      case 4: {
        auto& st = s.steps[pick(s.steps.size())];
        if (!st.weights.empty()) st.weights[pick(st.weights.size())] = static_cast<int>(pick(s.tensors.size()));
        break;
      }
      case 5: s.arena_bytes_per_token = pick(s.arena_bytes_per_token + 1); break;
    }
    auto plan = testing::open_tiny_plan(s);
    if (!plan.ok()) continue;
    CpuExecutorOptions opt;
    opt.threads = 2;
    opt.num_kv_blocks = 16;
    auto ex = CpuExecutor::create(**plan, opt);
    if (!ex.ok()) continue;
    ++accepted;
    // one sequence of 6 tokens in blocks {2, 0} plus a padding row; the status may be an error
    // (e.g. a swapped embedding table with fewer rows), but nothing may crash.
    std::vector<int32_t> tokens = random_tokens(7, 16, iter), positions = {0, 1, 2, 3, 4, 5, 0};
    std::vector<int64_t> slots = {8, 9, 10, 11, 0, 1, -1};
    std::vector<int32_t> qs = {0, 6}, ctx = {6}, tables = {2, 0}, idx = {5, 2};
    BatchInput b;
    b.tokens = tokens;
    b.positions = positions;
    b.kv_slots = slots;
    b.query_start = qs;
    b.context_lens = ctx;
    b.block_tables = tables;
    b.max_blocks_per_seq = 2;
    b.logits_indices = idx;
    std::vector<float> logits(2 * static_cast<size_t>((*ex)->vocab_size()));
    (void)(*ex)->forward(b, logits.data());
  }
  EXPECT_GT(accepted, 0) << "some corruptions (e.g. a param value that does not matter) are harmless";
}

TEST(CpuExecutor, InPlaceElementwiseAliasingIsAllowed) {
  TinyPlanConfig cfg;
  cfg.reuse_memory = false;  // one slot per value, then put every rope output on its input
  TinyPlanSpec s = testing::make_tiny_plan(cfg);
  for (auto& st : s.steps)
    if (st.op == fb::OpKind::Rope)
      s.values[st.outputs[0]].offset_per_row = s.values[st.inputs[0]].offset_per_row;
  auto plan = testing::open_tiny_plan(s);
  ASSERT_TRUE(plan.ok());
  CpuExecutorOptions opt;
  opt.threads = 2;
  auto ex = CpuExecutor::create(**plan, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  Harness h(std::move(ex).value());
  auto toks = random_tokens(9, cfg.vocab, 3);
  auto got = h.step({{1, toks}})[0];
  expect_close(got, testing::reference_logits(s, toks), 2e-4, "in-place rope");
}

// ---------------- bad batches ----------------

TEST(CpuExecutor, BadBatchesAreErrors) {
  TinyPlanConfig cfg;
  Built b = build(cfg);
  ASSERT_TRUE(b.plan);
  CpuExecutorOptions opt;
  opt.threads = 2;
  opt.num_kv_blocks = 8;
  auto ex = CpuExecutor::create(*b.plan, opt);
  ASSERT_TRUE(ex.ok());
  CpuExecutor& e = **ex;
  // A valid batch: one sequence of 5 tokens in blocks {3, 6}, plus one padding row.
  struct B {
    std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 0}, positions = {0, 1, 2, 3, 4, 0};
    std::vector<int64_t> slots = {12, 13, 14, 15, 24, -1};
    std::vector<int32_t> qs = {0, 5}, ctx = {5}, tables = {3, 6, -1}, idx = {4};
    int32_t max_blocks = 3;
    BatchInput in() const {
      BatchInput b;
      b.tokens = tokens;
      b.positions = positions;
      b.kv_slots = slots;
      b.query_start = qs;
      b.context_lens = ctx;
      b.block_tables = tables;
      b.max_blocks_per_seq = max_blocks;
      b.logits_indices = idx;
      return b;
    }
  };
  std::vector<float> logits(cfg.vocab * 8);
  {
    B ok;
    Status st = e.forward(ok.in(), logits.data());
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  const std::vector<std::pair<const char*, std::function<void(B&)>>> cases = {
      {"token >= vocab", [&](B& x) { x.tokens[2] = cfg.vocab; }},
      {"negative token", [](B& x) { x.tokens[0] = -1; }},
      {"position mismatch", [](B& x) { x.positions[3] = 7; }},
      {"slot mismatch", [](B& x) { x.slots[1] = 20; }},
      {"padding row with a slot", [](B& x) { x.slots[5] = 30; }},
      {"block out of range", [](B& x) { x.tables[1] = 8; }},
      {"negative block", [](B& x) { x.tables[0] = -1; }},
      {"context too short", [](B& x) { x.ctx[0] = 4; }},
      {"context beyond table", [](B& x) { x.ctx[0] = 13; }},
      {"context beyond max_model_len", [&](B& x) { x.ctx[0] = cfg.max_model_len + 1; x.max_blocks = 100; x.tables.resize(100, 0); }},
      {"query_start not starting at 0", [](B& x) { x.qs[0] = 1; }},
      {"query_start past T", [](B& x) { x.qs[1] = 7; }},
      {"query_start size", [](B& x) { x.qs.push_back(6); }},
      {"positions size", [](B& x) { x.positions.pop_back(); }},
      {"slots size", [](B& x) { x.slots.pop_back(); }},
      {"logits index out of range", [](B& x) { x.idx[0] = 6; }},
      {"too many logits", [](B& x) { x.idx.assign(7, 0); }},
      {"block table too small", [](B& x) { x.tables.resize(2); }},
      {"zero max blocks", [](B& x) { x.max_blocks = 0; }},
      {"empty batch", [](B& x) { x.tokens.clear(); x.positions.clear(); x.slots.clear(); x.qs = {0}; x.ctx.clear(); x.idx.clear(); }},
      {"too many tokens", [&](B& x) { x.tokens.assign(cfg.max_tokens + 1, 0); x.positions.assign(cfg.max_tokens + 1, 0); x.slots.assign(cfg.max_tokens + 1, -1); }},
  };
  for (const auto& [name, corrupt] : cases) {
    B x;
    corrupt(x);
    Status st = e.forward(x.in(), logits.data());
    EXPECT_FALSE(st.ok()) << name;
  }
  B nolog;
  EXPECT_FALSE(e.forward(nolog.in(), nullptr).ok()) << "null logits buffer";
  EXPECT_FALSE(e.copy_kv_block(0, 8).ok());
  EXPECT_FALSE(e.copy_kv_block(-1, 0).ok());
  B ok;
  EXPECT_TRUE(e.forward(ok.in(), logits.data()).ok()) << "the executor still works after errors";
}

}  // namespace
}  // namespace llmrt

// runtime/eval: chunking, log-softmax / KL / perplexity statistics, float16 and .npy streaming,
// and ChunkRunner against the naive reference model (tests/unit/tiny_plan.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine/cpu_executor.h"
#include "runtime/eval/chunk_runner.h"
#include "runtime/eval/npy_stream.h"
#include "runtime/eval/perplexity.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

TEST(Perplexity, ChunksLikeLlamaPerplexity) {
  auto p = plan_chunks(1100, 512, 0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->num_chunks, 2);  // the remainder is dropped
  EXPECT_EQ(p->first_scored(), 256);
  EXPECT_EQ(p->scored_per_chunk(), 255);  // positions 256..510 predict tokens 257..511
  EXPECT_EQ(p->scored_total(), 510);
  EXPECT_EQ(plan_chunks(5000, 512, 3)->num_chunks, 3);
  EXPECT_EQ(plan_chunks(5000, 512, 100)->num_chunks, 9);
  EXPECT_EQ(plan_chunks(7, 3, 0)->scored_per_chunk(), 1);  // ctx 3: position 1 predicts 2
  EXPECT_EQ(plan_chunks(7, 4, 0)->first_scored(), 2);
  EXPECT_FALSE(plan_chunks(100, 2, 0).ok());  // nothing would be scored
  EXPECT_FALSE(plan_chunks(100, 0, 0).ok());
  EXPECT_FALSE(plan_chunks(511, 512, 0).ok());
}

TEST(Perplexity, ChunkTokensReplaceTheFirstWithBos) {
  std::vector<int32_t> t = {10, 11, 12, 13, 14, 15, 16};
  ChunkPlan p{3, 2};
  EXPECT_EQ(chunk_tokens(t, p, 0, 1), (std::vector<int32_t>{1, 11, 12}));
  EXPECT_EQ(chunk_tokens(t, p, 1, 1), (std::vector<int32_t>{1, 14, 15}));
  EXPECT_EQ(chunk_tokens(t, p, 1, -1), (std::vector<int32_t>{13, 14, 15}));
}

TEST(Perplexity, LogSoftmaxIsNormalizedAndStable) {
  std::vector<float> x = {1000.f, 1001.f, 999.f, 1001.f};
  std::vector<double> out(4);
  EXPECT_EQ(log_softmax(x, out), 1);  // first of the tied maxima
  double sum = 0;
  for (double v : out) sum += std::exp(v);
  EXPECT_NEAR(sum, 1.0, 1e-14);
  const double lse = 1001.0 + std::log(std::exp(-1.0) + 2.0 + std::exp(-2.0));
  EXPECT_NEAR(out[0], 1000.0 - lse, 1e-12);
  EXPECT_NEAR(out[2], 999.0 - lse, 1e-12);
}

TEST(Perplexity, KlDivergence) {
  std::vector<double> p = {std::log(0.5), std::log(0.5)}, q = {std::log(0.9), std::log(0.1)};
  EXPECT_NEAR(kl_divergence(p, q), 0.5 * std::log(0.5 / 0.9) + 0.5 * std::log(0.5 / 0.1), 1e-15);
  EXPECT_EQ(kl_divergence(p, p), 0.0);
  // A zero-probability token of P adds nothing even where Q is -inf there.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> p0 = {0.0, -inf}, q0 = {std::log(0.25), -inf};
  EXPECT_NEAR(kl_divergence(p0, q0), std::log(4.0), 1e-15);
}

TEST(Perplexity, StatisticsMatchLlamaCppFormulas) {
  PerplexityStats s;
  for (double v : {1.0, 2.0, 3.0, 4.0}) s.add(v);
  EXPECT_DOUBLE_EQ(s.mean_nll(), 2.5);
  EXPECT_DOUBLE_EQ(s.ppl(), std::exp(2.5));
  // population variance 1.25, uncertainty of the mean sqrt(1.25 / 3), times PPL
  EXPECT_NEAR(s.ppl_error(), std::exp(2.5) * std::sqrt(1.25 / 3.0), 1e-12);
  PerplexityStats one;
  one.add(2.0);
  EXPECT_EQ(one.ppl_error(), 0.0);

  KlStats kl;
  std::vector<double> a = {std::log(0.7), std::log(0.3)}, b = {std::log(0.4), std::log(0.6)};
  kl.add(a, a, 0, 0, 1);
  kl.add(a, b, 0, 1, 0);
  kl.add(a, b, 0, 1, 0);
  EXPECT_EQ(kl.count(), 3);
  EXPECT_EQ(kl.same_top(), 1);
  const double d = kl_divergence(a, b);
  EXPECT_NEAR(kl.kl().mean(), 2 * d / 3, 1e-15);
  EXPECT_NEAR(kl.max_kl(), d, 1e-15);
  EXPECT_NEAR(kl.same_top_error(), std::sqrt((1.0 / 3) * (2.0 / 3) / 2), 1e-15);
  EXPECT_NEAR(kl.ppl().mean_nll(), (-std::log(0.3) - 2 * std::log(0.4)) / 3, 1e-12);
  EXPECT_NEAR(kl.ppl_base().mean_nll(), (-std::log(0.3) - 2 * std::log(0.7)) / 3, 1e-12);
}

uint16_t bits(float f) { return float_to_f16(f); }

TEST(Float16, RoundsToNearestEven) {
  EXPECT_EQ(bits(0.0f), 0x0000);
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(1.0f), 0x3c00);
  EXPECT_EQ(bits(-2.0f), 0xc000);
  EXPECT_EQ(bits(65504.0f), 0x7bff);
  EXPECT_EQ(bits(65519.0f), 0x7bff);
  EXPECT_EQ(bits(65520.0f), 0x7c00);  // halfway to 65536, rounds to even: infinity
  EXPECT_EQ(bits(1e9f), 0x7c00);
  EXPECT_EQ(bits(-INFINITY), 0xfc00);
  EXPECT_EQ(bits(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(bits(std::ldexp(1.0f, -25)), 0x0000);      // half of it: ties to even (0)
  EXPECT_EQ(bits(std::ldexp(3.0f, -25)), 0x0002);      // 1.5 ulp: ties to even (2)
  EXPECT_EQ(bits(std::ldexp(1023.5f, -24)), 0x0400);   // rounds up into the smallest normal
  EXPECT_EQ(bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even stays
  EXPECT_EQ(bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(bits(2.0f - std::ldexp(1.0f, -12)), 0x4000);  // carry into the exponent
  const uint16_t nan = bits(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
}

TEST(Float16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7c00, 0x7c00u);
      continue;
    }
    ASSERT_EQ(float_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
}

std::vector<uint8_t> header(const std::string& dict, int version = 1) {
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(version), 0};
  const size_t n = dict.size();
  b.push_back(n & 0xff);
  b.push_back((n >> 8) & 0xff);
  if (version >= 2) {
    b.push_back((n >> 16) & 0xff);
    b.push_back((n >> 24) & 0xff);
  }
  b.insert(b.end(), dict.begin(), dict.end());
  return b;
}

TEST(Npy, ParsesHeaders) {
  const std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }   \n";
  auto h = parse_npy_header(header(dict), "x");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->descr, "<f2");
  EXPECT_EQ(h->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(h->data_offset, 10 + dict.size());
  auto v = parse_npy_header(header("{\"shape\": (7,), \"fortran_order\": True, \"descr\": \"<i4\"}", 2), "x");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->shape, (std::vector<int64_t>{7}));
  EXPECT_TRUE(v->fortran_order);
  EXPECT_EQ(parse_npy_header(header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"), "x")->shape.size(),
            0u);
  for (const char* bad : {"", "{", "{'descr': '<f2'}", "{'descr': '>f2', 'fortran_order': False, 'shape': (1,)}",
                          "{'descr': '<f2', 'fortran_order': Maybe, 'shape': (1,)}",
                          "{'descr': '<f2', 'fortran_order': False, 'shape': (1, x)}",
                          "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
                          "{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999999,)}"})
    EXPECT_FALSE(parse_npy_header(header(bad), "x").ok()) << bad;
  std::vector<uint8_t> truncated = header("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }");
  truncated.resize(truncated.size() - 5);
  EXPECT_FALSE(parse_npy_header(truncated, "x").ok());
  std::vector<uint8_t> magic = header("{}");
  magic[1] = 'X';
  EXPECT_FALSE(parse_npy_header(magic, "x").ok());
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/eval_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(Npy, WritesAndReadsFloat16RowByRow) {
  const std::string path = temp_path("rows.npy");
  auto w = NpyF16Writer::create(path, 3, 5);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  std::vector<double> row(5);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) row[c] = -0.5 * (r * 5 + c) - 0.001;
    ASSERT_TRUE((*w)->append_row(row).ok());
  }
  EXPECT_FALSE((*w)->append_row(row).ok());  // a fourth row does not fit the header
  ASSERT_TRUE((*w)->finish().ok());

  auto r = NpyRowReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->rows(), 3);
  EXPECT_EQ((*r)->cols(), 5);
  std::vector<float> got(5);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*r)->read_row(got).ok());
    for (int c = 0; c < 5; ++c) EXPECT_EQ(got[c], f16_to_float(float_to_f16(float(-0.5 * (i * 5 + c) - 0.001))));
  }
  EXPECT_FALSE((*r)->read_row(got).ok());
  std::remove(path.c_str());

  auto short_file = NpyF16Writer::create(path, 2, 5);
  ASSERT_TRUE(short_file.ok());
  ASSERT_TRUE((*short_file)->append_row(row).ok());
  EXPECT_FALSE((*short_file)->finish().ok());  // one of two rows
  EXPECT_FALSE(NpyRowReader::open(path).ok());  // and the file is shorter than its header says
  std::remove(path.c_str());
}

TEST(Npy, ReadsTokenIds) {
  const std::string path = temp_path("ids.npy");
  std::vector<uint8_t> bytes = header("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }");
  for (int64_t v : {int64_t{5}, int64_t{0}, int64_t{49151}})
    bytes.insert(bytes.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto ids = read_npy_int_vector(path);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int32_t>{5, 0, 49151}));
  bytes.pop_back();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  EXPECT_FALSE(read_npy_int_vector(path).ok());
  std::remove(path.c_str());
  EXPECT_EQ(read_npy_int_vector(path).status().code(), StatusCode::kNotFound);
}

// Zero-sized arrays (found by fuzz.npy): an empty id vector reads as empty; rows of zero
// log-probabilities are refused at open with the shape named, never read.
TEST(Npy, ZeroSizedArrays) {
  const std::string path = temp_path("empty.npy");
  auto write = [&](const std::string& dict) {
    std::vector<uint8_t> bytes = header(dict);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  write("{'descr': '<i4', 'fortran_order': False, 'shape': (0,), }");
  auto ids = read_npy_int_vector(path);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_TRUE(ids->empty());
  write("{'descr': '=f4', 'fortran_order': False, 'shape': (3, 0), }");
  auto rows = NpyRowReader::open(path);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().to_string().find("[3, 0]"), std::string::npos) << rows.status().to_string();
  write("{'descr': '<f2', 'fortran_order': False, 'shape': (0, 7), }");
  auto none = NpyRowReader::open(path);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  std::vector<float> row(7);
  EXPECT_EQ((*none)->read_row(row).code(), StatusCode::kOutOfRange);
  // No rows and an absurd width (fuzz.npy, CI of 2026-12-04): the width is never allocated.
  write("{'descr': '<f2', 'fortran_order': False, 'shape': (0, 755555555555), }");
  auto wide = NpyRowReader::open(path);
  ASSERT_TRUE(wide.ok()) << wide.status().to_string();
  EXPECT_EQ((*wide)->read_row(row).code(), StatusCode::kOutOfRange);
  std::remove(path.c_str());
}

// ChunkRunner: chunks longer than a step (several steps per chunk, several chunks per step)
// give the reference model's logits at the scored positions.
TEST(ChunkRunner, MatchesTheReferenceModel) {
  testing::TinyPlanConfig cfg;
  cfg.max_tokens = 10;  // < ctx: every chunk spans steps
  cfg.max_model_len = 16;
  testing::TinyPlanSpec spec = testing::make_tiny_plan(cfg);
  auto plan = testing::open_tiny_plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const int ctx = 13, batch = 3, first = ctx / 2, scored = ctx - 1 - first;
  CpuExecutorOptions o;
  o.threads = 2;
  o.num_kv_blocks = ChunkRunner::blocks_needed(ctx, batch, cfg.block_size);
  auto ex = CpuExecutor::create(**plan, o);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto runner = ChunkRunner::create(ex->get(), ctx, batch);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();

  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> chunks(batch, std::vector<int32_t>(ctx));
  for (auto& c : chunks)
    for (auto& t : c) t = static_cast<int32_t>(rng() % cfg.vocab);
  std::vector<float> logits;
  for (int n : {3, 1, 2}) {  // reused runner, fresh KV each call
    ASSERT_TRUE(runner->run(std::span(chunks.data(), n), first, &logits).ok());
    ASSERT_EQ(logits.size(), size_t(n) * scored * cfg.vocab);
    for (int k = 0; k < n; ++k) {
      std::vector<float> ref = testing::reference_logits(spec, chunks[k]);
      for (int j = 0; j < scored; ++j)
        for (int v = 0; v < cfg.vocab; ++v)
          ASSERT_NEAR(logits[(size_t(k) * scored + j) * cfg.vocab + v], ref[size_t(first + j) * cfg.vocab + v], 2e-4)
              << "chunk " << k << " position " << first + j;
    }
  }
  EXPECT_FALSE(ChunkRunner::create(ex->get(), 17, 1).ok());         // beyond max_model_len
  EXPECT_FALSE(ChunkRunner::create(ex->get(), ctx, batch + 1).ok());  // more KV than allocated
  EXPECT_FALSE(runner->run(std::span(chunks.data(), 1), ctx - 1, &logits).ok());
}

}  // namespace
}  // namespace llmrt

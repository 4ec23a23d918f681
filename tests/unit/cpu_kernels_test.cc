// CPU kernels against naive references written here (double accumulation), plus the
// invariances of the numerical contract: scalar == AVX2 bit for bit, results independent of the
// batch rows and the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cpu/vector_ops.h"
#include "runtime/cpu/vexp.h"
#include "runtime/quant/quant_format.h"
#include "tests/unit/isa_guard.h"

namespace llmrt {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // (empty vectors may have null data(), which memcmp must not get)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "at " << i;
}

TEST(CpuFeatures, ReportsIsa) {
  std::printf("detected ISA: %s\n", isa_name(detected_isa()));
  IsaGuard guard;
  set_active_isa(CpuIsa::kScalar);
  EXPECT_EQ(active_isa(), CpuIsa::kScalar);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> max_worker{-1};
      pool.parallel_for(n, [&](int64_t b, int64_t e, int w) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
        int m = max_worker.load();
        while (w > m && !max_worker.compare_exchange_weak(m, w)) {}
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_LT(max_worker.load(), threads);
    }
  }
}

// Back-to-back jobs (workers spinning), jobs after pauses longer than the spin window (workers
// asleep), spin_us = 0 (always sleeping) and pinned threads: every index once per job, and a
// worker index is never used by two chunks at the same time (kernels index scratch with it).
TEST(ThreadPool, ManyJobsAwakeAndAsleep) {
  for (int spin_us : {0, 50, 200}) {
    for (bool pin : {false, true}) {
      ThreadPool::Options o;
      o.threads = 3;
      o.spin_us = spin_us;
      o.pin = pin;
      ThreadPool pool(o);
      std::vector<std::atomic<int>> busy(3);
      std::atomic<int> overlap{0};
      for (int job = 0; job < 400; ++job) {
        const int64_t n = 1 + job % 7;
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int w) {
          if (busy[w].fetch_add(1) != 0) overlap++;
          for (int64_t i = b; i < e; ++i) hits[i]++;
          busy[w].fetch_sub(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " i=" << i;
        if (job % 50 == 49) std::this_thread::sleep_for(std::chrono::microseconds(300 + spin_us));
      }
      EXPECT_EQ(overlap.load(), 0);
    }
  }
}

TEST(ThreadPool, DefaultsToTheAffinityMask) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), available_cpus());
  EXPECT_GE(available_cpus(), 1);
}

TEST(Exp, PolynomialIsAccurateAndScalarEqualsSimd) {
  // Every 97th float bit pattern in [-87.3, 88] plus the clamp edges and beyond.
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, -87.3f, 100.0f, -100.0f, -1e30f, 1e30f};
  for (float x = -87.3f; x < 88.0f; x = std::nextafter(x, 100.0f) + (std::fabs(x) < 1e-3f ? 1e-4f : 0.0f)) {
    xs.push_back(x);
    for (int i = 0; i < 97 && x < 88.0f; ++i) x = std::nextafter(x, 100.0f);
  }
  ASSERT_GT(xs.size(), 100000u);
  double worst = 0;
  for (float x : xs) {
    if (x < cpu::vexp::kLo || x > cpu::vexp::kHi) continue;
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::exp_scalar(x) - want) / want);
  }
  EXPECT_LT(worst, 2.4e-7) << "relative error";  // 2^-22
  EXPECT_EQ(cpu::exp_scalar(-100.0f), cpu::exp_scalar(cpu::vexp::kLo));
  EXPECT_EQ(cpu::exp_scalar(100.0f), cpu::exp_scalar(cpu::vexp::kHi));
  EXPECT_TRUE(std::isnan(cpu::exp_scalar(NAN)));
  EXPECT_EQ(cpu::exp_scalar(0.0f), 1.0f);
  IsaGuard guard;
  for (CpuIsa isa : simd_isas()) {
    set_active_isa(isa);
    std::vector<float> simd = xs;
    cpu::vec::exp_shifted(simd.data(), static_cast<int64_t>(simd.size()), 0.0f);
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(simd[i]), std::bit_cast<uint32_t>(cpu::exp_scalar(xs[i])))
          << xs[i] << " " << isa_name(isa);
  }
}

// Every vector_ops.h kernel on every SIMD level this CPU has gives the scalar twin's bits, over
// lengths that leave tails for 8- and 16-lane vectors.
TEST(VectorOps, EverySimdLevelGivesTheScalarBits) {
  IsaGuard guard;
  using Fn = std::function<std::vector<float>(int64_t)>;
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"silu_mul", [](int64_t n) {
         auto g = random_vec(n, 1, 20.0f), u = random_vec(n, 2);
         std::vector<float> o(n);
         cpu::vec::silu_mul(g.data(), u.data(), n, o.data());
         return o;
       }},
      {"exp_shifted", [](int64_t n) {
         auto x = random_vec(n, 3, 30.0f);
         cpu::vec::exp_shifted(x.data(), n, 4.5f);
         return x;
       }},
      {"axpy", [](int64_t n) {
         auto x = random_vec(n, 4), y = random_vec(n, 5);
         cpu::vec::axpy(0.7f, x.data(), y.data(), n);
         return y;
       }},
      {"axpy_rows", [](int64_t n) {
         const int64_t count = 3, stride = n + 5;
         auto a = random_vec(count, 6), x = random_vec(count * stride, 7), y = random_vec(n, 8);
         cpu::vec::axpy_rows(a.data(), count, x.data(), stride, y.data(), n);
         return y;
       }},
      {"axpy_rows_multi", [](int64_t n) {  // 7 rows (groups of 3, 3, 1), each as axpy_rows (below)
         const int rows = 7;
         const int64_t count = 5, stride = n + 3;
         auto a = random_vec(rows * count, 16), x = random_vec(count * stride, 17), y = random_vec(rows * n, 18);
         const float* ap[rows];
         float* yp[rows];
         for (int r = 0; r < rows; ++r) ap[r] = a.data() + r * count, yp[r] = y.data() + r * n;
         cpu::vec::axpy_rows_multi(ap, rows, count, x.data(), stride, yp, n);
         return y;
       }},
      {"add", [](int64_t n) {
         auto a = random_vec(n, 9), b = random_vec(n, 10);
         std::vector<float> c(n);
         cpu::vec::add(a.data(), b.data(), c.data(), n);
         return c;
       }},
      {"scale_mul", [](int64_t n) {
         auto x = random_vec(n, 11), w = random_vec(n, 12);
         std::vector<float> y(n);
         cpu::vec::scale_mul(x.data(), 1.37f, w.data(), y.data(), n);
         return y;
       }},
      {"rotate", [](int64_t n) {
         auto x = random_vec(2 * n, 13), c = random_vec(n, 14), s = random_vec(n, 15);
         cpu::vec::rotate(x.data(), x.data() + n, c.data(), s.data(), x.data(), x.data() + n, n);
         return x;
       }},
      {"widen_f16, widen_bf16", [](int64_t n) {  // (NaN halves aside: F16C quiets them; below)
         std::vector<uint16_t> h(n);
         for (int64_t i = 0; i < n; ++i) {
           h[i] = static_cast<uint16_t>(i * 40503 + 17);
           if ((h[i] & 0x7C00) == 0x7C00 && (h[i] & 0x3FF)) h[i] = 0x3C00;
         }
         std::vector<float> o(2 * n);
         cpu::vec::widen_f16(h.data(), n, o.data());
         cpu::vec::widen_bf16(h.data(), n, o.data() + n);
         return o;
       }},
  };
  const auto levels = simd_isas();
  if (levels.empty()) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const auto& [name, fn] : ops) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127, 128, 129, 1000}) {
      set_active_isa(CpuIsa::kScalar);
      const auto want = fn(n);
      for (CpuIsa isa : levels) {
        set_active_isa(isa);
        EXPECT_TRUE(bit_equal(fn(n), want)) << name << " n=" << n << " " << isa_name(isa);
      }
    }
  }
  // axpy_rows_multi is axpy_rows per row, bit for bit, at every level.
  for (CpuIsa isa : levels) {
    set_active_isa(isa);
    for (int64_t n : {8, 64, 129}) {
      const int rows = 5;
      const int64_t count = 9;
      auto a = random_vec(rows * count, 19), x = random_vec(count * n, 20), y = random_vec(rows * n, 21);
      std::vector<float> want = y;
      const float* ap[rows];
      float* yp[rows];
      for (int r = 0; r < rows; ++r) {
        ap[r] = a.data() + r * count, yp[r] = y.data() + r * n;
        cpu::vec::axpy_rows(ap[r], count, x.data(), n, want.data() + r * n, n);
      }
      cpu::vec::axpy_rows_multi(ap, rows, count, x.data(), n, yp, n);
      EXPECT_TRUE(bit_equal(y, want)) << "axpy_rows_multi n=" << n << " " << isa_name(isa);
    }
  }
  // The scalar twins state the kernels: spot-check them against their formulas.
  set_active_isa(CpuIsa::kScalar);
  const float x0[1] = {1.5f}, x1[1] = {-2.25f}, c[1] = {0.6f}, s[1] = {0.8f};
  float y0[1], y1[1];
  cpu::vec::rotate(x0, x1, c, s, y0, y1, 1);
  volatile float p0 = x0[0] * c[0], p1 = x1[0] * s[0], p2 = x1[0] * c[0], p3 = x0[0] * s[0];
  EXPECT_EQ(y0[0], p0 - p1);
  EXPECT_EQ(y1[0], p2 + p3);
}

TEST(VectorOps, WidenE4m3IsExactForEveryCodeAtEveryLevel) {
  // Every fp8 E4M3 code (twice, then a tail): quant::e4m3_to_float's value (itself checked against
  // ml_dtypes in quant_kernels_test.cc), subnormals included; the NaN codes give NaN.
  IsaGuard guard;
  std::vector<uint8_t> c(2 * 256 + 5);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i);
  for (CpuIsa isa : isa_levels()) {
    set_active_isa(isa);
    std::vector<float> out(c.size(), -1.0f);
    cpu::vec::widen_e4m3(c.data(), static_cast<int64_t>(c.size()), out.data());
    for (size_t i = 0; i < c.size(); ++i) {
      const float want = quant::e4m3_to_float(c[i]);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(out[i])) << i << " " << isa_name(isa);
      else
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << i << " " << isa_name(isa);
    }
  }
}

TEST(VectorOps, DequantI8IsCodeTimesScaleAtEveryLevel) {
  // Every int8 code at lengths that leave SIMD tails, scales including a subnormal, 0 and one whose
  // products round: each element is float(code) * scale, one rounding, at every level.
  IsaGuard guard;
  std::vector<int8_t> c(256 + 13);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int8_t>(i * 37 + 5);
  const std::vector<CpuIsa> levels = isa_levels();
  for (CpuIsa isa : levels) {
    set_active_isa(isa);
    for (const float scale : {0.0f, 1.0f, 0.0123456789f, 3.1e-40f, -7.75e3f})
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, static_cast<int64_t>(c.size())}) {
        std::vector<float> out(n, -1.0f);
        cpu::vec::dequant_i8(c.data(), scale, n, out.data());
        for (int64_t i = 0; i < n; ++i) {
          volatile float want = static_cast<float>(c[i]) * scale;  // one product, rounded
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(float(want)))
              << i << " scale " << scale << " " << isa_name(isa);
        }
      }
  }
}

TEST(VectorOps, WidenF16IsExactForEveryHalfAtEveryLevel) {
  // Every bf16 pattern: its bits shifted up. Every half pattern: the exact f32 value (quant::half_to_float, itself checked against the
  // compiler's _Float16 in quant_kernels_test.cc), subnormals and infinities included; a NaN
  // stays a NaN.
  IsaGuard guard;
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  const std::vector<CpuIsa> levels = isa_levels();
  for (CpuIsa isa : levels) {
    set_active_isa(isa);
    std::vector<float> out(h.size());
    cpu::vec::widen_f16(h.data(), static_cast<int64_t>(h.size()), out.data());
    std::vector<float> b(h.size());
    cpu::vec::widen_bf16(h.data(), static_cast<int64_t>(h.size()), b.data());
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(b[i]), i << 16) << i << " " << isa_name(isa);
      const float want = quant::half_to_float(h[i]);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(out[i])) << i << " " << isa_name(isa);
      else
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << i << " " << isa_name(isa);
    }
  }
}

TEST(SiluMul, ScalarEqualsSimd) {
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t rows = 3, I = 45;  // 5 registers and a tail
  auto g = random_vec(rows * I, 64, 12.0f), u = random_vec(rows * I, 65, 3.0f);
  g[0] = 95.0f;
  g[1] = -95.0f;
  std::vector<float> o1(rows * I), o2(rows * I);
  set_active_isa(CpuIsa::kScalar);
  cpu::silu_mul(g.data(), I, u.data(), I, rows, I, o1.data(), pool);
  set_active_isa(detected_isa());
  cpu::silu_mul(g.data(), I, u.data(), I, rows, I, o2.data(), pool);
  EXPECT_TRUE(bit_equal(o1, o2));
  EXPECT_EQ(o1[0], 95.0f * u[0]);
}

TEST(Dot, MatchesReferenceAndScalarEqualsSimd) {
  IsaGuard guard;
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 64, 100, 577}) {
    auto a = random_vec(n, 1 + n), b = random_vec(n, 100 + n);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(a[i]) * b[i];
    set_active_isa(CpuIsa::kScalar);
    const float s = cpu::dot(a.data(), b.data(), n);
    set_active_isa(detected_isa());
    const float v = cpu::dot(a.data(), b.data(), n);
    EXPECT_NEAR(s, ref, 1e-5 * (1 + n)) << n;
    EXPECT_EQ(std::memcmp(&s, &v, sizeof(float)), 0) << "n=" << n << " scalar " << s << " simd " << v;
  }
}

TEST(Dot, CanonicalOrderIsTheDocumentedOne) {
  // Elements chosen so that a different summation order gives a different float.
  std::vector<float> a(19), b(19, 1.0f);
  for (int i = 0; i < 19; ++i) a[i] = (i % 3 == 0 ? 1e8f : 1.0f) * (i % 2 ? -1.0f : 1.0f) + i * 0.37f;
  float acc[8] = {};
  for (int k = 0; k < 16; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(a[k + l], b[k + l], acc[l]);
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (int k = 16; k < 19; ++k) s = std::fma(a[k], b[k], s);
  const float got = cpu::dot(a.data(), b.data(), 19);
  EXPECT_EQ(std::memcmp(&got, &s, sizeof(float)), 0) << got << " vs " << s;
  float sequential = 0;
  for (int k = 0; k < 19; ++k) sequential = std::fma(a[k], b[k], sequential);
  EXPECT_NE(sequential, s) << "the data does not discriminate summation orders";
}

TEST(Axpy, ScalarEqualsSimd) {
  IsaGuard guard;
  auto x = random_vec(37, 5), y0 = random_vec(37, 6);
  std::vector<float> y1 = y0, y2 = y0;
  set_active_isa(CpuIsa::kScalar);
  cpu::axpy(0.3f, x.data(), y1.data(), 37);
  set_active_isa(detected_isa());
  cpu::axpy(0.3f, x.data(), y2.data(), 37);
  EXPECT_TRUE(bit_equal(y1, y2));
  for (int i = 0; i < 37; ++i) EXPECT_FLOAT_EQ(y1[i], std::fma(0.3f, x[i], y0[i]));
}

TEST(Axpy, RowsEqualRepeatedAxpyOnEveryIsa) {
  IsaGuard guard;
  for (int64_t n : {37, 64, 136}) {  // a tail, one register block, two blocks and a tail
    const int64_t count = 5, stride = n + 3;
    auto x = random_vec(count * stride, 7), a = random_vec(count, 8), y0 = random_vec(n, 9);
    std::vector<float> want = y0;
    set_active_isa(CpuIsa::kScalar);
    for (int64_t j = 0; j < count; ++j) cpu::axpy(a[j], x.data() + j * stride, want.data(), n);
    for (CpuIsa isa : {CpuIsa::kScalar, detected_isa()}) {
      set_active_isa(isa);
      std::vector<float> y = y0;
      cpu::axpy_rows(a.data(), count, x.data(), stride, y.data(), n);
      EXPECT_TRUE(bit_equal(y, want)) << "n " << n << " " << isa_name(isa);
    }
  }
}

struct LinearCase {
  int64_t t, k, n;
  bool bias;
};

TEST(Linear, MatchesReferenceAndIsBatchAndThreadInvariant) {
  IsaGuard guard;
  ThreadPool one(1), three(3);
  for (LinearCase c : {LinearCase{1, 8, 8, false}, LinearCase{5, 33, 19, true},
                       LinearCase{7, 64, 70, false}, LinearCase{4, 3, 130, true},
                       LinearCase{13, 100, 9, true}}) {
    auto x = random_vec(c.t * c.k, 11), w = random_vec(c.n * c.k, 12), bias = random_vec(c.n, 13);
    const float* bp = c.bias ? bias.data() : nullptr;
    std::vector<double> ref(c.t * c.n);
    for (int64_t t = 0; t < c.t; ++t)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = c.bias ? bias[j] : 0.0;
        for (int64_t i = 0; i < c.k; ++i) s += double(x[t * c.k + i]) * w[j * c.k + i];
        ref[t * c.n + j] = s;
      }
    std::vector<float> y1(c.t * c.n), y3(c.t * c.n), ys(c.t * c.n), rows(c.t * c.n);
    cpu::linear(x.data(), nullptr, c.t, c.k, w.data(), c.n, bp, y1.data(), one);
    expect_near_all(y1, ref, 1e-5);
    cpu::linear(x.data(), nullptr, c.t, c.k, w.data(), c.n, bp, y3.data(), three);
    EXPECT_TRUE(bit_equal(y1, y3)) << "thread count changed results";
    for (int64_t t = 0; t < c.t; ++t)  // each row alone
      cpu::linear(x.data() + t * c.k, nullptr, 1, c.k, w.data(), c.n, bp, rows.data() + t * c.n, three);
    EXPECT_TRUE(bit_equal(y1, rows)) << "batching changed results";
    set_active_isa(CpuIsa::kScalar);
    cpu::linear(x.data(), nullptr, c.t, c.k, w.data(), c.n, bp, ys.data(), three);
    set_active_isa(detected_isa());
    EXPECT_TRUE(bit_equal(y1, ys)) << "scalar and SIMD differ";
  }
}

TEST(HalfLinear, WidenedWeightsGiveTheF32KernelsBits) {
  // linear_h / embedding_h over f16 and bf16 weights must equal linear / the row copy over the
  // same values in f32 (k = 70 and n = 37 leave partial blocks; rows gathered like logits).
  ThreadPool pool(3);
  cpu::QuantScratch scratch;
  const int64_t T = 5, K = 70, N = 37;
  auto x = random_vec(T * K, 31), src = random_vec(N * K, 32, 3.0f), bias = random_vec(N, 33);
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<uint16_t> half(src.size());
    std::vector<float> wide(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      half[i] = bf16 ? quant::float_to_bf16(src[i]) : quant::float_to_half(src[i]);
      wide[i] = bf16 ? quant::bf16_to_float(half[i]) : quant::half_to_float(half[i]);
    }
    const cpu::HalfMatrix hw{half.data(), bf16, N, K};
    std::vector<float> got(T * N), want(T * N);
    cpu::linear_h(x.data(), nullptr, T, hw, bias.data(), got.data(), scratch, pool);
    cpu::linear(x.data(), nullptr, T, K, wide.data(), N, bias.data(), want.data(), pool);
    EXPECT_TRUE(bit_equal(got, want));
    const std::vector<int32_t> rows = {4, 0, 2};
    std::vector<float> g2(rows.size() * N), w2(rows.size() * N);
    cpu::linear_h(x.data(), rows.data(), 3, hw, nullptr, g2.data(), scratch, pool);
    cpu::logits(x.data(), K, rows.data(), 3, wide.data(), N, w2.data(), pool);
    EXPECT_TRUE(bit_equal(g2, w2));
    // The table as embedding: rows K wide.
    const std::vector<int32_t> tokens = {36, 0, 5, 36};
    std::vector<float> e1(tokens.size() * K), e2(tokens.size() * K);
    cpu::embedding_h(tokens.data(), 4, hw, e1.data(), pool);
    cpu::embedding(tokens.data(), 4, wide.data(), K, e2.data(), pool);
    EXPECT_TRUE(bit_equal(e1, e2));
  }
}

TEST(Logits, GathersRows) {
  ThreadPool pool(2);
  const int64_t T = 6, D = 20, V = 45;
  auto x = random_vec(T * D, 21), w = random_vec(V * D, 22);
  std::vector<int32_t> idx = {5, 0, 3};
  std::vector<float> out(idx.size() * V);
  cpu::logits(x.data(), D, idx.data(), idx.size(), w.data(), V, out.data(), pool);
  std::vector<float> full(T * V);
  cpu::linear(x.data(), nullptr, T, D, w.data(), V, nullptr, full.data(), pool);
  for (size_t i = 0; i < idx.size(); ++i)
    EXPECT_EQ(std::memcmp(out.data() + i * V, full.data() + idx[i] * V, V * sizeof(float)), 0);
}

TEST(Embedding, GathersRows) {
  ThreadPool pool(2);
  auto table = random_vec(10 * 6, 31);
  std::vector<int32_t> tok = {3, 9, 0, 3};
  std::vector<float> out(4 * 6);
  cpu::embedding(tok.data(), 4, table.data(), 6, out.data(), pool);
  for (int t = 0; t < 4; ++t)
    for (int d = 0; d < 6; ++d) EXPECT_EQ(out[t * 6 + d], table[tok[t] * 6 + d]);
}

std::vector<double> naive_rms(const std::vector<float>& x, int64_t rows, int64_t dim,
                              const std::vector<float>& w, int64_t group, double eps) {
  std::vector<double> y(rows * dim);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t g = 0; g < dim; g += group) {
      double ss = 0;
      for (int64_t i = 0; i < group; ++i) ss += double(x[t * dim + g + i]) * x[t * dim + g + i];
      const double inv = 1.0 / std::sqrt(ss / group + eps);
      for (int64_t i = 0; i < group; ++i) y[t * dim + g + i] = x[t * dim + g + i] * inv * w[i];
    }
  return y;
}

TEST(RmsNorm, PlainAndGrouped) {
  ThreadPool pool(2);
  const int64_t rows = 5, dim = 24;
  auto x = random_vec(rows * dim, 41, 3.0f);
  for (int64_t group : {24, 8}) {
    auto w = random_vec(group, 42);
    std::vector<float> y(rows * dim);
    cpu::rms_norm(x.data(), rows, dim, w.data(), group, 1e-5f, y.data(), pool);
    expect_near_all(y, naive_rms(x, rows, dim, w, group, 1e-5), 1e-5);
    std::vector<float> inplace = x;  // in place
    cpu::rms_norm(inplace.data(), rows, dim, w.data(), group, 1e-5f, inplace.data(), pool);
    EXPECT_TRUE(bit_equal(inplace, y));
  }
}

TEST(AddRmsNorm, SumAndNormed) {
  ThreadPool pool(2);
  const int64_t rows = 3, dim = 19;
  auto x = random_vec(rows * dim, 51), r = random_vec(rows * dim, 52), w = random_vec(dim, 53);
  std::vector<float> normed(rows * dim), sum(rows * dim);
  cpu::add_rms_norm(x.data(), r.data(), rows, dim, w.data(), 1e-6f, normed.data(), sum.data(), pool);
  std::vector<float> want_sum(rows * dim);
  for (size_t i = 0; i < want_sum.size(); ++i) want_sum[i] = x[i] + r[i];
  EXPECT_TRUE(bit_equal(sum, want_sum));
  expect_near_all(normed, naive_rms(want_sum, rows, dim, w, dim, 1e-6), 1e-5);
}

TEST(Elementwise, AddSiluMulSplit) {
  ThreadPool pool(3);
  const int64_t rows = 4, I = 10;
  auto a = random_vec(rows * I, 61, 4.0f), b = random_vec(rows * I, 62, 4.0f);
  std::vector<float> c(rows * I);
  cpu::add(a.data(), b.data(), rows, I, c.data(), pool);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], a[i] + b[i]);

  std::vector<float> sep(rows * I), fused(rows * I), gu(rows * 2 * I);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < I; ++i) {
      gu[t * 2 * I + i] = a[t * I + i];
      gu[t * 2 * I + I + i] = b[t * I + i];
    }
  cpu::silu_mul(a.data(), I, b.data(), I, rows, I, sep.data(), pool);
  cpu::silu_mul(gu.data(), 2 * I, gu.data() + I, 2 * I, rows, I, fused.data(), pool);
  EXPECT_TRUE(bit_equal(sep, fused));
  std::vector<double> want(rows * I);
  for (size_t i = 0; i < want.size(); ++i) want[i] = a[i] / (1.0 + std::exp(-double(a[i]))) * b[i];
  expect_near_all(sep, want, 1e-6);

  // split [rows, 3 + 5 + 2]
  const std::vector<int64_t> sizes = {3, 5, 2};
  auto x = random_vec(rows * 10, 63);
  std::vector<float> o0(rows * 3), o1(rows * 5), o2(rows * 2);
  float* outs[3] = {o0.data(), o1.data(), o2.data()};
  cpu::split(x.data(), rows, 10, sizes, outs, pool);
  for (int64_t t = 0; t < rows; ++t) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(o0[t * 3 + i], x[t * 10 + i]);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(o1[t * 5 + i], x[t * 10 + 3 + i]);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(o2[t * 2 + i], x[t * 10 + 8 + i]);
  }
}

// ---- RoPE against hand-computed values ----

TEST(Rope, InverseFrequenciesDefaultAndLinear) {
  cpu::RopeConfig c;
  c.head_dim = 4;
  c.theta = 10000.0;
  auto inv = cpu::rope_inv_freq(c);
  ASSERT_TRUE(inv.ok());
  ASSERT_EQ(inv->size(), 2u);
  EXPECT_FLOAT_EQ((*inv)[0], 1.0f);
  EXPECT_FLOAT_EQ((*inv)[1], 0.01f);  // 10000^(-2/4)
  c.type = cpu::RopeConfig::Type::kLinear;
  c.factor = 4.0;
  auto lin = cpu::rope_inv_freq(c);
  ASSERT_TRUE(lin.ok());
  EXPECT_FLOAT_EQ((*lin)[0], 0.25f);
  EXPECT_FLOAT_EQ((*lin)[1], 0.0025f);
}

TEST(Rope, NeoxAndInterleavedRotations) {
  ThreadPool pool(1);
  const float x[4] = {1, 2, 3, 4};
  const float inv[2] = {1.0f, 0.01f};
  const int32_t pos[1] = {3};
  float y[4];
  cpu::rope(x, 1, 1, 4, pos, inv, /*interleaved=*/false, y, pool);
  const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.03), s1 = std::sin(0.03);
  // neox: (x0, x2) rotate with freq 0, (x1, x3) with freq 1.
  EXPECT_NEAR(y[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(y[2], 3 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(y[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(y[3], 4 * c1 + 2 * s1, 1e-6);
  cpu::rope(x, 1, 1, 4, pos, inv, /*interleaved=*/true, y, pool);
  // interleaved: (x0, x1) with freq 0, (x2, x3) with freq 1.
  EXPECT_NEAR(y[0], 1 * c0 - 2 * s0, 1e-6);
  EXPECT_NEAR(y[1], 2 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(y[2], 3 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(y[3], 4 * c1 + 3 * s1, 1e-6);
}

TEST(Rope, MultiHeadInPlaceAndPositionZeroIsIdentity) {
  ThreadPool pool(2);
  const int heads = 3, hd = 8, rows = 4;
  cpu::RopeConfig c;
  c.head_dim = hd;
  auto inv = cpu::rope_inv_freq(c);
  ASSERT_TRUE(inv.ok());
  auto x = random_vec(rows * heads * hd, 71);
  std::vector<int32_t> pos = {0, 1, 5, 100};
  std::vector<float> y(x.size());
  cpu::rope(x.data(), rows, heads, hd, pos.data(), inv->data(), false, y.data(), pool);
  for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(y[i], x[i]);  // position 0
  for (int t = 0; t < rows; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double a = double(pos[t]) * (*inv)[i];
        const float* xi = &x[(t * heads + h) * hd];
        EXPECT_NEAR(y[(t * heads + h) * hd + i], xi[i] * std::cos(a) - xi[i + hd / 2] * std::sin(a), 1e-4);
      }
  std::vector<float> z = x;
  cpu::rope(z.data(), rows, heads, hd, pos.data(), inv->data(), false, z.data(), pool);
  EXPECT_TRUE(bit_equal(z, y));
}

TEST(Rope, Llama3Scaling) {
  cpu::RopeConfig c;
  c.head_dim = 128;
  c.theta = 500000.0;
  c.type = cpu::RopeConfig::Type::kLlama3;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position = 8192;
  auto scaled = cpu::rope_inv_freq(c);
  ASSERT_TRUE(scaled.ok());
  c.type = cpu::RopeConfig::Type::kDefault;
  auto base = cpu::rope_inv_freq(c);
  ASSERT_TRUE(base.ok());
  int high = 0, low = 0, medium = 0;
  for (int i = 0; i < 64; ++i) {
    const double f = (*base)[i];
    const double wavelen = 2 * M_PI / f;
    double want;
    if (wavelen < 8192.0 / 4.0) {  // high frequency: unchanged
      want = f;
      ++high;
    } else if (wavelen > 8192.0 / 1.0) {  // low frequency: divided by factor
      want = f / 8.0;
      ++low;
    } else {  // smooth blend
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f;
      ++medium;
    }
    EXPECT_NEAR((*scaled)[i], want, 1e-6 * want) << "i=" << i;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
  // Hand-checked anchor: i = 0 has wavelen 2*pi (< 2048): unchanged, 1.0.
  EXPECT_EQ((*scaled)[0], 1.0f);
}

TEST(Rope, BadConfigsAreErrors) {
  cpu::RopeConfig c;
  c.head_dim = 7;
  EXPECT_FALSE(cpu::rope_inv_freq(c).ok());
  c.head_dim = 8;
  c.theta = -1;
  EXPECT_FALSE(cpu::rope_inv_freq(c).ok());
  c.theta = 10000;
  c.type = cpu::RopeConfig::Type::kLlama3;
  c.low_freq_factor = c.high_freq_factor = 2.0;
  EXPECT_FALSE(cpu::rope_inv_freq(c).ok());
  EXPECT_FALSE(cpu::parse_rope_type("yarn").ok());
  EXPECT_TRUE(cpu::parse_rope_type("llama3").ok());
}

// ---- KV store + paged attention against a naive contiguous attention ----

struct AttnSetup {
  int H = 4, Hkv = 2, hd = 8, bs = 4;
  int64_t num_blocks = 16;
  std::vector<float> k_cache, v_cache;
  cpu::KvLayer layer() {
    cpu::KvLayer kv;
    kv.k = k_cache.data();
    kv.v = v_cache.data();
    kv.num_blocks = num_blocks;
    kv.num_kv_heads = Hkv;
    kv.block_size = bs;
    kv.head_dim = hd;
    return kv;
  }
  AttnSetup() : k_cache(num_blocks * Hkv * bs * hd), v_cache(k_cache.size()) {}
};

TEST(PagedAttention, GqaAndSlidingWindowMatchNaive) {
  IsaGuard guard;
  for (int window : {0, 3, 6}) {
    AttnSetup s;
    ThreadPool pool(3), one(1);
    // Two sequences: A with 9 tokens (all queried), B with 6 cached + 2 queried, then a pad row.
    const std::vector<int> ctx = {9, 8};
    const std::vector<int> nq = {9, 2};
    const int max_blocks = 3;
    const std::vector<int32_t> tables = {7, 2, 11, /*B*/ 5, 0, -1};
    const int T = 9 + 2 + 1;
    const int kvw = s.Hkv * s.hd, qw = s.H * s.hd;
    // Full K/V for every position of both sequences (contiguous, for the reference).
    std::vector<std::vector<float>> K(2), V(2);
    for (int q = 0; q < 2; ++q) {
      K[q] = random_vec(ctx[q] * kvw, 80 + q);
      V[q] = random_vec(ctx[q] * kvw, 90 + q);
    }
    // Store: B's first 6 positions from a previous step, then this step's rows.
    std::vector<float> kin(T * kvw, 0), vin(T * kvw, 0);
    std::vector<int64_t> slots(T, -1);
    std::vector<int32_t> positions(T, 0), seq_of_row(T, -1);
    auto slot_of = [&](int q, int p) { return int64_t{tables[q * max_blocks + p / s.bs]} * s.bs + p % s.bs; };
    {
      std::vector<int64_t> prev_slots(6);
      for (int p = 0; p < 6; ++p) prev_slots[p] = slot_of(1, p);
      cpu::kv_store(K[1].data(), V[1].data(), 6, prev_slots.data(), s.layer(), pool);
    }
    int row = 0;
    for (int q = 0; q < 2; ++q)
      for (int i = 0; i < nq[q]; ++i, ++row) {
        const int p = ctx[q] - nq[q] + i;
        positions[row] = p;
        seq_of_row[row] = q;
        slots[row] = slot_of(q, p);
        std::copy_n(&K[q][p * kvw], kvw, &kin[row * kvw]);
        std::copy_n(&V[q][p * kvw], kvw, &vin[row * kvw]);
      }
    cpu::kv_store(kin.data(), vin.data(), T, slots.data(), s.layer(), pool);
    auto qv = random_vec(T * qw, 99);
    cpu::AttentionBatch ab;
    ab.positions = positions.data();
    ab.seq_of_row = seq_of_row.data();
    ab.block_tables = tables.data();
    ab.max_blocks_per_seq = max_blocks;
    const float scale = 1.0f / std::sqrt(float(s.hd));
    std::vector<float> scratch(3 * 16), out(T * qw, 7.0f), out1(T * qw), outs(T * qw);
    cpu::paged_attention(qv.data(), T, ab, s.layer(), s.H, scale, window, out.data(), scratch.data(), 16, pool);
    // naive
    std::vector<double> ref(T * qw, 0.0);
    for (int t = 0; t < T; ++t) {
      const int q = seq_of_row[t];
      if (q < 0) continue;
      const int p = positions[t];
      const int lo = window ? std::max(0, p - window + 1) : 0;
      for (int h = 0; h < s.H; ++h) {
        const int kh = h / (s.H / s.Hkv);
        std::vector<double> sc;
        double mx = -1e300;
        for (int j = lo; j <= p; ++j) {
          double d = 0;
          for (int e = 0; e < s.hd; ++e) d += double(qv[t * qw + h * s.hd + e]) * K[q][j * kvw + kh * s.hd + e];
          sc.push_back(d * scale);
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int j = lo; j <= p; ++j)
          for (int e = 0; e < s.hd; ++e)
            ref[t * qw + h * s.hd + e] += sc[j - lo] / sum * V[q][j * kvw + kh * s.hd + e];
      }
    }
    expect_near_all(out, ref, 1e-5);
    for (int e = 0; e < qw; ++e) EXPECT_EQ(out[(T - 1) * qw + e], 0.0f) << "padding row zeroed";
    cpu::paged_attention(qv.data(), T, ab, s.layer(), s.H, scale, window, out1.data(), scratch.data(), 16, one);
    EXPECT_TRUE(bit_equal(out, out1)) << "thread count changed attention";
    set_active_isa(CpuIsa::kScalar);
    cpu::paged_attention(qv.data(), T, ab, s.layer(), s.H, scale, window, outs.data(), scratch.data(), 16, pool);
    set_active_isa(detected_isa());
    EXPECT_TRUE(bit_equal(out, outs)) << "scalar and SIMD attention differ";
    // A scratch with room for units of several (token, head) rows scored together (3 rows, then
    // up to 12: the GQA pair's heads over 1 or 6 tokens of a sequence) gives the bits of one row
    // at a time (stride 16), on 1 and 3 threads.
    for (const int64_t stride : {int64_t{33}, int64_t{12 * (16 + 12)}}) {
      std::vector<float> wide(3 * stride), outw(T * qw, 7.0f);
      for (ThreadPool* p : {&pool, &one}) {
        cpu::paged_attention(qv.data(), T, ab, s.layer(), s.H, scale, window, outw.data(), wide.data(), stride, *p);
        EXPECT_TRUE(bit_equal(out, outw)) << "stride " << stride << ", " << p->num_threads() << " threads";
      }
    }
  }
}

TEST(PagedAttention, NarrowFloatCachesGiveTheBitsOfAnF32CacheOfTheRoundedValues) {
  // bf16 / f16 / fp8 caches: kv_store rounds each element to nearest even, attention widens block
  // runs exactly and runs the f32 kernels: the very bits of an f32 cache holding the rounded
  // values. head_dim 512 with blocks of 16 widens a block in runs of 8 rows (the widening buffer).
  // For fp8 also +-600 (saturated to +-448) and a subnormal. At the scalar level and this CPU's.
  IsaGuard guard;
  for (const std::string kvt : {"bf16", "f16", "fp8"})
    for (const auto& [hd, bs, ctx] : {std::tuple{8, 4, 30}, std::tuple{512, 16, 40}})
      for (CpuIsa isa : {CpuIsa::kScalar, detected_isa()}) {
        SCOPED_TRACE(kvt + " hd " + std::to_string(hd) + " " + isa_name(isa));
        set_active_isa(isa);
        const int H = 4, Hkv = 2, blocks = (ctx + bs - 1) / bs + 1, kvw = Hkv * hd;
        ThreadPool pool(2);
        std::vector<float> k = random_vec(ctx * kvw, 120), v = random_vec(ctx * kvw, 121);
        if (kvt == "fp8") k[3] = 600.0f, v[5] = -600.0f, k[kvw + 1] = 1e-3f;
        std::vector<int32_t> table(blocks - 1);
        std::vector<int64_t> slots(ctx);
        for (int b = 0; b < blocks - 1; ++b) table[b] = blocks - 1 - b;  // distinct, block 0 unused
        for (int p = 0; p < ctx; ++p) slots[p] = int64_t{table[p / bs]} * bs + p % bs;
        const size_t elems = size_t(blocks) * Hkv * bs * hd;
        std::vector<uint16_t> k16(elems, 0), v16(elems, 0);
        std::vector<uint8_t> k8(elems, 0), v8(elems, 0);
        cpu::KvLayer narrow;
        if (kvt == "fp8")
          narrow.kf8 = k8.data(), narrow.vf8 = v8.data();
        else
          narrow.k16 = k16.data(), narrow.v16 = v16.data(), narrow.bf16 = kvt == "bf16";
        narrow.num_blocks = blocks, narrow.num_kv_heads = Hkv, narrow.block_size = bs, narrow.head_dim = hd;
        cpu::kv_store(k.data(), v.data(), ctx, slots.data(), narrow, pool);
        // The f32 cache of the rounded values.
        auto round = [&](float x) {
          return kvt == "bf16"  ? quant::bf16_to_float(quant::float_to_bf16(x))
                 : kvt == "f16" ? quant::half_to_float(quant::float_to_half(x))
                                : quant::e4m3_to_float(quant::float_to_e4m3(x));
        };
        auto stored = [&](size_t i) {
          return kvt == "bf16"  ? quant::bf16_to_float(k16[i])
                 : kvt == "f16" ? quant::half_to_float(k16[i])
                                : quant::e4m3_to_float(k8[i]);
        };
        std::vector<float> kr(k.size()), vr(v.size());
        std::transform(k.begin(), k.end(), kr.begin(), round);
        std::transform(v.begin(), v.end(), vr.begin(), round);
        std::vector<float> kf(elems, 0.0f), vf(elems, 0.0f);
        cpu::KvLayer full;
        full.k = kf.data(), full.v = vf.data();
        full.num_blocks = blocks, full.num_kv_heads = Hkv, full.block_size = bs, full.head_dim = hd;
        cpu::kv_store(kr.data(), vr.data(), ctx, slots.data(), full, pool);
        for (size_t i = 0; i < elems; ++i)  // the stored elements are the rounded values
          ASSERT_EQ(stored(i), kf[i]) << i;
        EXPECT_NE(kr, k);  // (the rounding is there)
        if (kvt == "fp8") EXPECT_EQ(kr[3], 448.0f);  // saturated
        // Every position of the sequence queried, in one step.
        std::vector<int32_t> positions(ctx), seq_of_row(ctx, 0);
        for (int p = 0; p < ctx; ++p) positions[p] = p;
        cpu::AttentionBatch ab;
        ab.positions = positions.data();
        ab.seq_of_row = seq_of_row.data();
        ab.block_tables = table.data();
        ab.max_blocks_per_seq = blocks - 1;
        const auto q = random_vec(ctx * H * hd, 122);
        std::vector<float> scratch(2 * ctx), want(ctx * H * hd), got(want.size());
        const float scale = 1.0f / std::sqrt(float(hd));
        cpu::paged_attention(q.data(), ctx, ab, full, H, scale, 0, want.data(), scratch.data(), ctx, pool);
        cpu::paged_attention(q.data(), ctx, ab, narrow, H, scale, 0, got.data(), scratch.data(), ctx, pool);
        EXPECT_TRUE(bit_equal(got, want));
      }
}

TEST(KvStore, WritesBlockHeadSlotDimLayout) {
  AttnSetup s;
  ThreadPool pool(2);
  const int kvw = s.Hkv * s.hd;
  auto k = random_vec(2 * kvw, 111), v = random_vec(2 * kvw, 112);
  std::vector<int64_t> slots = {13, -1};  // block 3, offset 1; second row skipped
  cpu::kv_store(k.data(), v.data(), 2, slots.data(), s.layer(), pool);
  for (int h = 0; h < s.Hkv; ++h)
    for (int d = 0; d < s.hd; ++d) {
      const size_t at = ((3 * s.Hkv + h) * s.bs + 1) * s.hd + d;
      EXPECT_EQ(s.k_cache[at], k[h * s.hd + d]);
      EXPECT_EQ(s.v_cache[at], v[h * s.hd + d]);
    }
  const size_t written = std::count_if(s.k_cache.begin(), s.k_cache.end(), [](float x) { return x != 0; });
  EXPECT_EQ(written, size_t(kvw));
}

// rope_kv_store is rope (q), rope (k) and kv_store in one pass: the same bits in q and in the
// cache, f32 and int8, both styles; padding rows rotate q and store nothing.
TEST(RopeKvStore, EqualsRopeThenKvStore) {
  const int H = 6, Hkv = 3, hd = 10, bs = 4, T = 5;
  const int64_t blocks = 6;
  const int qw = H * hd, kvw = Hkv * hd, w = qw + 2 * kvw;
  ThreadPool pool(2);
  cpu::RopeConfig rc;
  rc.head_dim = hd;
  rc.theta = 500000.0;
  auto inv = cpu::rope_inv_freq(rc);
  ASSERT_TRUE(inv.ok());
  const auto qkv = random_vec(size_t(T) * w, 121);
  const std::vector<int32_t> pos = {0, 5, 6, 900, 70000};
  const std::vector<int64_t> slots = {0, 5, -1, 23, 7};
  std::vector<float> q(size_t(T) * qw), k(size_t(T) * kvw), v(size_t(T) * kvw);
  for (int t = 0; t < T; ++t) {
    std::copy_n(&qkv[size_t(t) * w], qw, &q[size_t(t) * qw]);
    std::copy_n(&qkv[size_t(t) * w + qw], kvw, &k[size_t(t) * kvw]);
    std::copy_n(&qkv[size_t(t) * w + qw + kvw], kvw, &v[size_t(t) * kvw]);
  }
  const size_t rows = size_t(blocks) * Hkv * bs;
  for (bool interleaved : {false, true})
    for (bool i8 : {false, true}) {
      SCOPED_TRACE(std::string(interleaved ? "interleaved" : "neox") + (i8 ? " int8" : " f32"));
      struct Cache {
        std::vector<float> k, v, ks, vs;
        std::vector<int8_t> k8, v8;
      } want, got;
      auto layer = [&](Cache& c) {
        cpu::KvLayer kv;
        kv.num_blocks = blocks, kv.num_kv_heads = Hkv, kv.block_size = bs, kv.head_dim = hd;
        if (i8) {
          c.k8.assign(rows * hd, 3), c.v8.assign(rows * hd, 3), c.ks.assign(rows, -1), c.vs.assign(rows, -1);
          kv.k8 = c.k8.data(), kv.v8 = c.v8.data(), kv.ks = c.ks.data(), kv.vs = c.vs.data();
        } else {
          c.k.assign(rows * hd, -5), c.v.assign(rows * hd, -5);
          kv.k = c.k.data(), kv.v = c.v.data();
        }
        return kv;
      };
      std::vector<float> want_q(q.size()), k_rot(k.size()), got_q(q.size(), 9.0f);
      cpu::rope(q.data(), T, H, hd, pos.data(), inv->data(), interleaved, want_q.data(), pool);
      cpu::rope(k.data(), T, Hkv, hd, pos.data(), inv->data(), interleaved, k_rot.data(), pool);
      cpu::kv_store(k_rot.data(), v.data(), T, slots.data(), layer(want), pool);
      cpu::rope_kv_store(qkv.data(), T, H, pos.data(), inv->data(), interleaved, slots.data(), layer(got),
                         got_q.data(), pool);
      EXPECT_EQ(std::memcmp(got_q.data(), want_q.data(), q.size() * sizeof(float)), 0);
      EXPECT_EQ(got.k, want.k);
      EXPECT_EQ(got.v, want.v);
      EXPECT_EQ(got.k8, want.k8);
      EXPECT_EQ(got.v8, want.v8);
      EXPECT_EQ(got.ks, want.ks);
      EXPECT_EQ(got.vs, want.vs);
      // Rows 0, 1, 3 and 4 were stored (row 2 is padding); the rotation changed k at position 5.
      if (!i8) {
        const size_t at = ((5 / bs * Hkv + 0) * bs + 5 % bs) * hd;  // token 1, head 0
        EXPECT_NE(got.k[at + 1], k[kvw + 1]);
        EXPECT_EQ(got.v[at + 1], v[kvw + 1]);
        EXPECT_EQ(std::count(got.k.begin(), got.k.end(), -5.0f), std::ptrdiff_t((rows - 4 * Hkv) * hd));
      }
    }
}

}  // namespace
}  // namespace llmrt

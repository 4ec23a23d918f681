// kv_store, rope_kv_store, paged_attention, add, split and permute_columns kernels on the
// CPU through the host emulation, against double-precision references of
// PROGRAM.md's semantics (causal GQA over a paged cache, sliding window).

#include "codegen/KernelFamilies.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/quant/quant_format.h"

#include "HostKernel.h"
#include "Q8Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace {

using llmc::testing::HostKernel;
using llmc::testing::bitEqual;
using llmc::testing::expectNear;
using llmc::testing::gridFor;
using llmc::testing::randomVector;

using KvStoreFn = void (*)(const float *, const float *, const long long *, float *, float *, int, unsigned);
using AttentionFn = void (*)(const float *, const float *, const float *, const int *, const int *, const int *,
                             int, int, float *, unsigned char *, int, unsigned);

/// A batch over a paged cache whose K/V hold random values at every slot.
struct Batch {
  int H, Hkv, hd, bs, blocks, maxBlocks;
  std::vector<int> positions, queryStart, blockTables;
  int S = 0, T = 0; // T includes one padding row
  std::vector<float> q, kc, vc;
};

/// Sequences with the given context lengths, the last `rows[s]` positions of
/// each in the step; physical blocks assigned in a scrambled order.
Batch makeBatch(int H, int Hkv, int hd, int bs, const std::vector<int> &contexts, const std::vector<int> &rows) {
  Batch b{H, Hkv, hd, bs, 0, 0, {}, {0}, {}, int(contexts.size()), 0, {}, {}, {}};
  for (int c : contexts)
    b.maxBlocks = std::max(b.maxBlocks, (c + bs - 1) / bs);
  b.blocks = b.maxBlocks * b.S + 1;
  b.blockTables.assign(size_t(b.S) * b.maxBlocks, -1);
  int next = 0;
  for (int s = 0; s < b.S; ++s) {
    for (int i = 0; i < (contexts[s] + bs - 1) / bs; ++i)
      b.blockTables[size_t(s) * b.maxBlocks + i] = (next++ * 7 + 3) % b.blocks; // 7 coprime to blocks
    for (int p = contexts[s] - rows[s]; p < contexts[s]; ++p)
      b.positions.push_back(p);
    b.queryStart.push_back(int(b.positions.size()));
  }
  b.positions.push_back(0); // padding row
  b.T = int(b.positions.size());
  b.q = randomVector(size_t(b.T) * H * hd, 41);
  b.kc = randomVector(size_t(b.blocks) * Hkv * bs * hd, 42);
  b.vc = randomVector(b.kc.size(), 43);
  return b;
}

std::vector<double> attentionRef(const Batch &b, float scale, int window) {
  std::vector<double> out(size_t(b.T) * b.H * b.hd, 0.0);
  for (int s = 0; s < b.S; ++s)
    for (int row = b.queryStart[s]; row < b.queryStart[s + 1]; ++row) {
      const int p = b.positions[row];
      const int first = window > 0 ? std::max(0, p - window + 1) : 0;
      for (int h = 0; h < b.H; ++h) {
        const int kvh = h / (b.H / b.Hkv);
        auto at = [&](int j) {
          const int block = b.blockTables[size_t(s) * b.maxBlocks + j / b.bs];
          return ((size_t(block) * b.Hkv + kvh) * b.bs + j % b.bs) * b.hd;
        };
        std::vector<double> sc;
        double mx = -1e300;
        for (int j = first; j <= p; ++j) {
          double d = 0;
          for (int e = 0; e < b.hd; ++e)
            d += double(b.q[(size_t(row) * b.H + h) * b.hd + e]) * scale * b.kc[at(j) + e];
          sc.push_back(d);
          mx = std::max(mx, d);
        }
        double sum = 0;
        for (double &v : sc)
          sum += (v = std::exp(v - mx));
        for (int e = 0; e < b.hd; ++e) {
          double acc = 0;
          for (int j = first; j <= p; ++j)
            acc += sc[j - first] * b.vc[at(j) + e];
          out[(size_t(row) * b.H + h) * b.hd + e] = acc / sum;
        }
      }
    }
  return out;
}

/// Bytes per element of a `kv` cache ("f32", "bf16", "f16", "fp8", "int8").
int kvElemBytes(const std::string &kv) { return kv == "int8" || kv == "fp8" ? 1 : kv == "f32" ? 4 : 2; }

/// The bytes of an f32, bf16, f16 or fp8 cache holding `values` (rounded to nearest even, as the
/// CPU backend stores them); `values` becomes what the cache holds (the reference reads those).
std::vector<unsigned char> cacheBytes(std::vector<float> &values, const std::string &kv) {
  std::vector<unsigned char> bytes(values.size() * size_t(kvElemBytes(kv)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (kv == "f32") {
      std::memcpy(&bytes[4 * i], &values[i], 4);
      continue;
    }
    if (kv == "fp8") {
      bytes[i] = llmrt::quant::float_to_e4m3(values[i]);
      values[i] = llmrt::quant::e4m3_to_float(bytes[i]);
      continue;
    }
    const uint16_t h = kv == "bf16" ? llmrt::quant::float_to_bf16(values[i]) : llmrt::quant::float_to_half(values[i]);
    std::memcpy(&bytes[2 * i], &h, 2);
    values[i] = kv == "bf16" ? llmrt::quant::bf16_to_float(h) : llmrt::quant::half_to_float(h);
  }
  return bytes;
}

/// The values of an f32, bf16, f16 or fp8 cache's bytes.
std::vector<float> cacheValues(const std::vector<unsigned char> &bytes, const std::string &kv) {
  std::vector<float> v(bytes.size() / size_t(kvElemBytes(kv)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (kv == "f32") {
      std::memcpy(&v[i], &bytes[4 * i], 4);
      continue;
    }
    if (kv == "fp8") {
      v[i] = llmrt::quant::e4m3_to_float(bytes[i]);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    v[i] = kv == "bf16" ? llmrt::quant::bf16_to_float(h) : llmrt::quant::half_to_float(h);
  }
  return v;
}

/// The C type of a cache element, as the kernels declare it.
std::string kvElemType(const std::string &kv) {
  return kv == "int8" ? "signed char" : kv == "f32" ? "float" : kv == "fp8" ? "unsigned char" : "unsigned short";
}

/// The attention of H query heads over Hkv kv heads of hd dimensions, blocks of bs positions,
/// scaled by 1 / sqrt(hd).
llmc::AttentionParams attentionParams(int H, int Hkv, int hd, int bs, const std::string &kv = "f32",
                                      int window = 0) {
  llmc::AttentionParams p;
  p.cache = {Hkv, hd, bs, kv};
  p.numHeads = H;
  p.scale = 1.0f / std::sqrt(float(hd));
  p.slidingWindow = window;
  return p;
}

/// The per-row kernel's L2 prefetch before its wait (sm_90+; the host emulation logs it): block
/// i's first item (row, head group, chunk) asks for the K and V rows of its first positions, up to
/// a tile of 128, one range per cache block (thread t the item's t-th; pieces of at most 16 KiB),
/// when a row is whole 16-byte units; nothing else. Chunks as the file comment of AttentionKernel.cpp says: steps of
/// up to 32 rows cut a row's positions beyond 256 into up to 32 chunks of whole tiles.
void expectCachePrefetches(const std::vector<HostKernel::Prefetch> &log, const Batch &b, int window, int grid,
                           const void *kc, const void *vc, int elemBytes) {
  using Ask = std::tuple<unsigned, unsigned, unsigned long long, unsigned>;
  std::vector<Ask> want, got;
  for (const HostKernel::Prefetch &f : log)
    got.emplace_back(f.block, f.thread, f.address, f.bytes);
  int sub = std::min(b.H / b.Hkv, 8);
  while ((b.H / b.Hkv) % sub)
    --sub;
  const int itemsPerRow = b.H / sub, chunks = b.T <= 32 ? 32 : 1;
  const size_t rowBytes = size_t(b.hd) * elemBytes;
  for (int id = 0; rowBytes % 16 == 0 && id < std::min(grid, b.T * itemsPerRow * chunks); ++id) {
    const int chunk = id % chunks, rowItem = id / chunks, row = rowItem / itemsPerRow;
    const int kvh = rowItem % itemsPerRow * sub / (b.H / b.Hkv);
    if (row >= b.queryStart[b.S])
      continue;
    const int seq = int(std::upper_bound(b.queryStart.begin(), b.queryStart.end(), row) - b.queryStart.begin()) - 1;
    const int p = b.positions[row], first = window > 0 ? std::max(0, p - window + 1) : 0, len = p - first + 1;
    int span = len;
    if (chunks > 1 && len > 256)
      span = std::max(256, ((len + 31) / 32 + 127) / 128 * 128);
    if (chunk >= (len + span - 1) / span)
      continue;
    const int lo = first + chunk * span, last = std::min({p, lo + span - 1, lo + 127});
    for (int cb = lo / b.bs; cb <= last / b.bs; ++cb) {
      const int j0 = std::max(cb * b.bs, lo), j1 = std::min(cb * b.bs + b.bs - 1, last);
      const size_t r = (size_t(b.blockTables[size_t(seq) * b.maxBlocks + cb]) * b.Hkv + kvh) * b.bs + j0 % b.bs;
      const unsigned t = unsigned(cb - lo / b.bs), bytes = unsigned((j1 - j0 + 1) * rowBytes);
      for (const void *cache : {kc, vc})
        for (unsigned o = 0; o < bytes; o += 16384) // pieces of at most 16 KiB
          want.emplace_back(id, t, reinterpret_cast<unsigned long long>(cache) + r * rowBytes + o,
                            std::min(bytes - o, 16384u));
    }
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want) << "the cache rows asked of the L2 before the wait";
}

/// f32, bf16 or f16 caches (`kv`): the reference reads the values the cache holds.
void checkAttention(int H, int Hkv, int hd, int bs, int window, const std::vector<int> &contexts,
                    const std::vector<int> &rows, const std::string &kv = "f32") {
  SCOPED_TRACE("H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " hd=" + std::to_string(hd) +
               " bs=" + std::to_string(bs) + " window=" + std::to_string(window) + " " + kv);
  llmc::AttentionParams p = attentionParams(H, Hkv, hd, bs, kv, window);
  auto spec = llmc::emitPagedAttentionKernel(p);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  if (kv != "f32")
    EXPECT_NE(spec->entry.find("_" + kv + "_"), std::string::npos) << spec->entry;
  const std::string elem = "const " + kvElemType(kv);
  HostKernel k(*spec,
               "const float *q, " + elem + " *kc, " + elem +
                   " *vc, const int *positions, const int *qs, "
                   "const int *tables, int max_blocks, int S, float *out, unsigned char *work, int T",
               "q, kc, vc, positions, qs, tables, max_blocks, S, out, work, T");
  ASSERT_TRUE(k.ok()) << k.error();
  using Fn = void (*)(const float *, const void *, const void *, const int *, const int *, const int *, int, int,
                      float *, unsigned char *, int, unsigned);
  auto run = [&, fn = k.get<Fn>()](const float *q, const void *kc, const void *vc, const int *pos, const int *qs,
                                   const int *tables, int mb, int S, float *out, int T, unsigned grid) {
    // The workspace zero-filled once, as the runtime allocates it; every launch must leave the
    // counters at zero.
    static std::vector<unsigned char> work;
    if (work.size() != spec->workspaceBytes)
      work.assign(spec->workspaceBytes, 0);
    fn(q, kc, vc, pos, qs, tables, mb, S, out, work.data(), T, grid);
    int sub = std::min(H / Hkv, 8); // query heads per item: the largest divisor of the group up to 8
    while ((H / Hkv) % sub)
      --sub;
    const size_t counters = size_t(32) * (H / sub) * 4; // kSplitRows x items
    for (size_t i = 0; i < std::min(counters, work.size()); ++i)
      ASSERT_EQ(work[i], 0) << "counter byte " << i << " left set";
  };
  Batch b = makeBatch(H, Hkv, hd, bs, contexts, rows);
  const std::vector<unsigned char> kc = cacheBytes(b.kc, kv), vc = cacheBytes(b.vc, kv);
  std::vector<double> want = attentionRef(b, p.scale, window);
  std::vector<float> out(want.size(), 0.0f);
  run(b.q.data(), kc.data(), vc.data(), b.positions.data(), b.queryStart.data(), b.blockTables.data(), b.maxBlocks,
      b.S, out.data(), b.T, gridFor(*spec, b.T));
  expectCachePrefetches(k.prefetches(), b, window, gridFor(*spec, b.T), kc.data(), vc.data(), kvElemBytes(kv));
  // Rows of padding are unspecified: compare the real rows only.
  const size_t real = size_t(b.queryStart[b.S]) * H * hd;
  std::vector<float> got(out.begin(), out.begin() + real);
  expectNear(got, std::vector<double>(want.begin(), want.begin() + real), 2e-5, "attention");
  // Grid of 3 blocks: the same bits.
  std::vector<float> out3(out.size(), 0.0f);
  run(b.q.data(), kc.data(), vc.data(), b.positions.data(), b.queryStart.data(), b.blockTables.data(), b.maxBlocks,
      b.S, out3.data(), b.T, 3);
  EXPECT_TRUE(bitEqual(std::vector<float>(out3.begin(), out3.begin() + real), got));
  // The last sequence alone (a batch of one): its rows' bits do not change.
  const int s = b.S - 1, r0 = b.queryStart[s], n = b.queryStart[s + 1] - r0;
  std::vector<int> qs1 = {0, n};
  std::vector<float> alone(size_t(n) * H * hd, 0.0f);
  run(b.q.data() + size_t(r0) * H * hd, kc.data(), vc.data(), b.positions.data() + r0, qs1.data(),
      b.blockTables.data() + size_t(s) * b.maxBlocks, b.maxBlocks, 1, alone.data(), n, gridFor(*spec, n));
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + size_t(r0) * H * hd, alone.size() * sizeof(float)), 0);
}

TEST(AttentionKernel, CausalGqaOverPagedBlocks) {
  // Decode rows, a prefill chunk, and a context longer than a tile of 128.
  checkAttention(4, 2, 24, 4, 0, {7, 3, 150}, {2, 3, 1});
  // head_dim above the block (two dims per thread), MHA, block size 16.
  checkAttention(2, 2, 160, 16, 0, {40, 9}, {1, 9});
  // Groups above 8 query heads per kv head split into items of a divisor: 12 -> 2 x 6, 9 -> 3 x 3.
  checkAttention(12, 1, 16, 4, 0, {20, 5}, {2, 5});
  checkAttention(18, 2, 8, 4, 0, {9}, {3});
  // A cache row of 24 bytes: no prefetch (whole 16-byte units only).
  checkAttention(2, 1, 6, 4, 0, {9, 2}, {1, 2});
  // Cache blocks of 64 rows of 512 bytes: a block's rows asked in two pieces.
  checkAttention(4, 2, 128, 64, 0, {100}, {1});
}

TEST(AttentionKernel, LongContextsOfSmallStepsSplitOverBlocks) {
  // Decode rows over 1000 and 300 positions: 4 and 2 chunks of 256 positions, combined by the
  // item's last block (flash-decoding); a short one stays whole.
  checkAttention(4, 2, 24, 16, 0, {1000, 300, 9}, {1, 2, 1});
  // GQA groups of 8 with a window wider than a chunk: 700 positions in 3 chunks.
  checkAttention(8, 1, 16, 8, 700, {1200}, {1});
  // A step of more than 32 rows does not split (and still matches).
  checkAttention(2, 1, 16, 16, 0, {600}, {40});
}

TEST(AttentionKernel, SlidingWindow) {
  checkAttention(4, 1, 32, 8, 5, {30, 4}, {3, 4});
  checkAttention(2, 1, 16, 4, 130, {200}, {2}); // window wider than a tile
}

TEST(AttentionKernel, SixteenBitCaches) {
  // bf16 and f16 elements read exactly: decode rows, a chunk, a split long context, a window;
  // a row of 8 elements (16 bytes) is prefetched, one of 6 (12 bytes) is not.
  for (const char *kv : {"bf16", "f16"}) {
    checkAttention(4, 2, 24, 4, 0, {7, 3, 150}, {2, 3, 1}, kv);
    checkAttention(4, 2, 24, 16, 0, {1000, 9}, {1, 1}, kv);
    checkAttention(4, 1, 32, 8, 5, {30, 4}, {3, 4}, kv);
    checkAttention(2, 1, 8, 4, 0, {9, 2}, {1, 2}, kv);
    checkAttention(2, 1, 6, 4, 0, {9, 2}, {1, 2}, kv);
  }
}

TEST(AttentionKernel, Fp8Caches) {
  // fp8 E4M3 elements read exactly, the same shapes: a row of 16 elements (16 bytes) is
  // prefetched, one of 24 or 8 is not.
  checkAttention(4, 2, 24, 4, 0, {7, 3, 150}, {2, 3, 1}, "fp8");
  checkAttention(4, 2, 24, 16, 0, {1000, 9}, {1, 1}, "fp8");
  checkAttention(4, 1, 32, 8, 5, {30, 4}, {3, 4}, "fp8");
  checkAttention(2, 1, 16, 4, 0, {9, 2}, {1, 2}, "fp8");
  checkAttention(2, 1, 8, 4, 0, {9, 2}, {1, 2}, "fp8");
}

/// The tiled prefill kernel (tensor cores) against the double reference: TF32 operands (q k
/// and p v rounded to 10 mantissa bits) keep outputs within 4e-3 of it for these values (|x| <=
/// 2); each item's bits do not depend on the grid or on the other sequences of the step. int8:
/// the cache holds random codes and scales, the reference reads code x scale.
TEST(AttentionKernel, Int8OutputRowsAreTheCpuQuantizationOfTheOutput) {
  // AttentionParams::quantizedOutput (o_proj's int8 input written by the per-row kernel): the
  // same f32 output as without, and each real row's q8 row equals the CPU's quantization of it
  // byte for byte: whole and split (flash-decoding, written by the item's last block) rows, GQA
  // items of several heads, head_dim 32 and 64 (a head one or two sub-blocks); a null q8 pointer
  // writes none.
  using Q8AttentionFn = void (*)(const float *, const float *, const float *, const int *, const int *, const int *,
                                 int, int, float *, unsigned char *, unsigned char *, int, unsigned);
  for (const int hd : {32, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const int H = 4, Hkv = 2;
    llmc::AttentionParams p = attentionParams(H, Hkv, hd, 16);
    auto plain = llmc::emitPagedAttentionKernel(p);
    p.quantizedOutput = true;
    auto q8 = llmc::emitPagedAttentionKernel(p);
    ASSERT_TRUE(plain.ok() && q8.ok()) << q8.status().to_string();
    EXPECT_NE(q8->entry.find("_q8_"), std::string::npos) << q8->entry;
    const std::string params = "const float *q, const float *kc, const float *vc, const int *positions, const int *qs, "
                               "const int *tables, int max_blocks, int S, float *out, ";
    const std::string args = "q, kc, vc, positions, qs, tables, max_blocks, S, out, ";
    HostKernel kp(*plain, params + "unsigned char *work, int T", args + "work, T");
    HostKernel kq(*q8, params + "unsigned char *q8, unsigned char *work, int T", args + "q8, work, T");
    ASSERT_TRUE(kp.ok() && kq.ok()) << kp.error() << kq.error();
    const Batch b = makeBatch(H, Hkv, hd, 16, {600, 7, 20}, {1, 3, 2}); // 600: 3 chunks at decode
    const int real = b.queryStart[b.S], width = H * hd;
    std::vector<unsigned char> work(q8->workspaceBytes, 0);
    std::vector<float> want(size_t(b.T) * width, 0.0f), out(want.size(), 0.0f), none(want.size(), 0.0f);
    kp.get<AttentionFn>()(b.q.data(), b.kc.data(), b.vc.data(), b.positions.data(), b.queryStart.data(),
                          b.blockTables.data(), b.maxBlocks, b.S, want.data(), work.data(), b.T,
                          gridFor(*plain, b.T));
    const size_t rb = size_t(llmc::q8RowBytes(width));
    std::vector<uint8_t> rows(size_t(b.T) * rb, 0xEE);
    auto run = kq.get<Q8AttentionFn>();
    run(b.q.data(), b.kc.data(), b.vc.data(), b.positions.data(), b.queryStart.data(), b.blockTables.data(),
        b.maxBlocks, b.S, out.data(), rows.data(), work.data(), b.T, gridFor(*q8, b.T));
    run(b.q.data(), b.kc.data(), b.vc.data(), b.positions.data(), b.queryStart.data(), b.blockTables.data(),
        b.maxBlocks, b.S, none.data(), nullptr, work.data(), b.T, 3);
    for (int t = 0; t < real; ++t) {
      SCOPED_TRACE("row " + std::to_string(t));
      const float *o = &out[size_t(t) * width];
      EXPECT_EQ(std::memcmp(o, &want[size_t(t) * width], size_t(width) * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(&none[size_t(t) * width], &want[size_t(t) * width], size_t(width) * sizeof(float)), 0);
      EXPECT_EQ(std::vector<uint8_t>(rows.begin() + long(t * rb), rows.begin() + long((t + 1) * rb)),
                llmc::testing::packQ8Row(llmc::testing::cpuQuantize(o, width), width));
    }
  }
  llmc::AttentionParams odd;
  odd.cache = {2, 24, 16, "f32"};
  odd.numHeads = 4;
  odd.quantizedOutput = true;
  EXPECT_FALSE(llmc::emitPagedAttentionKernel(odd).ok()); // head_dim 24: not whole sub-blocks
}

void checkTiled(int H, int Hkv, int hd, int bs, int window, const std::vector<int> &contexts,
                const std::vector<int> &rows, const std::string &kv = "f32") {
  SCOPED_TRACE("tiled H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " hd=" + std::to_string(hd) +
               " bs=" + std::to_string(bs) + " window=" + std::to_string(window) + " " + kv);
  llmc::AttentionParams p = attentionParams(H, Hkv, hd, bs, kv, window);
  p.tensorCores = true;
  ASSERT_TRUE(llmc::tiledAttentionApplies(p));
  auto spec = llmc::emitPagedAttentionKernel(p);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->workspaceBytes, 0u);
  EXPECT_NE(spec->entry.find("_tc_"), std::string::npos) << spec->entry;
  const bool i8 = kv == "int8";
  const std::string elem = "const " + kvElemType(kv);
  HostKernel k(*spec,
               "const float *q, " + elem + " *kc, " + elem + " *vc" +
                   (i8 ? ", const float *ksc, const float *vsc" : "") +
                   ", const int *positions, const int *qs, const int *tables, int max_blocks, int S, float *out, int T",
               std::string("q, kc, vc") + (i8 ? ", ksc, vsc" : "") + ", positions, qs, tables, max_blocks, S, out, T");
  ASSERT_TRUE(k.ok()) << k.error();
  Batch b = makeBatch(H, Hkv, hd, bs, contexts, rows);
  std::vector<signed char> kc8, vc8;
  std::vector<float> ksc, vsc;
  // f32, bf16, f16: the cache's bytes (b's values rounded to what it holds)
  const std::vector<unsigned char> kcb = i8 ? std::vector<unsigned char>() : cacheBytes(b.kc, kv);
  const std::vector<unsigned char> vcb = i8 ? std::vector<unsigned char>() : cacheBytes(b.vc, kv);
  if (i8) { // random codes and scales; the reference's caches are their products
    const size_t n = b.kc.size(), slots = n / hd;
    const std::vector<float> rk = randomVector(n, 44, -127.0f, 127.0f), rv = randomVector(n, 45, -127.0f, 127.0f);
    ksc = randomVector(slots, 46, 0.001f, 0.02f);
    vsc = randomVector(slots, 47, 0.001f, 0.02f);
    for (size_t i = 0; i < n; ++i) {
      kc8.push_back(static_cast<signed char>(std::lrint(rk[i])));
      vc8.push_back(static_cast<signed char>(std::lrint(rv[i])));
      b.kc[i] = float(kc8[i]) * ksc[i / hd];
      b.vc[i] = float(vc8[i]) * vsc[i / hd];
    }
  }
  auto run = [&](const Batch &in, const int *pos, const int *qs, const int *tables, int S, const float *q, float *out,
                 int T, unsigned grid) {
    if (i8) {
      using Fn = void (*)(const float *, const signed char *, const signed char *, const float *, const float *,
                          const int *, const int *, const int *, int, int, float *, int, unsigned);
      k.get<Fn>()(q, kc8.data(), vc8.data(), ksc.data(), vsc.data(), pos, qs, tables, in.maxBlocks, S, out, T, grid);
    } else {
      using Fn = void (*)(const float *, const void *, const void *, const int *, const int *, const int *, int, int,
                          float *, int, unsigned);
      k.get<Fn>()(q, kcb.data(), vcb.data(), pos, qs, tables, in.maxBlocks, S, out, T, grid);
    }
  };
  const std::vector<double> want = attentionRef(b, p.scale, window);
  const size_t real = size_t(b.queryStart[b.S]) * H * hd;
  std::vector<float> out(want.size(), NAN);
  run(b, b.positions.data(), b.queryStart.data(), b.blockTables.data(), b.S, b.q.data(), out.data(), b.T,
      llmc::testing::gridFor(*spec, b.T, b.S));
  std::vector<float> got(out.begin(), out.begin() + real); // every real row written (NaN fails)
  expectNear(got, std::vector<double>(want.begin(), want.begin() + real), 4e-3, "tiled attention");
  // Not the per-row kernel's f32 results: the operands were rounded (a check that the tensor-core
  // path ran, with the emulated mma's TF32 inputs).
  double worst = 0;
  for (size_t i = 0; i < real; ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  EXPECT_GT(worst, 1e-6);
  // Grids of 1 and 3 blocks walk the same items: the same bits.
  for (unsigned grid : {1u, 3u}) {
    std::vector<float> again(out.size(), NAN);
    run(b, b.positions.data(), b.queryStart.data(), b.blockTables.data(), b.S, b.q.data(), again.data(), b.T, grid);
    EXPECT_TRUE(bitEqual(std::vector<float>(again.begin(), again.begin() + real), got)) << "grid " << grid;
  }
  // Each sequence alone: its rows' bits do not change.
  for (int s = 0; s < b.S; ++s) {
    const int r0 = b.queryStart[s], n = b.queryStart[s + 1] - r0;
    std::vector<int> qs1 = {0, n};
    std::vector<float> alone(size_t(n) * H * hd, NAN);
    run(b, b.positions.data() + r0, qs1.data(), b.blockTables.data() + size_t(s) * b.maxBlocks, 1,
        b.q.data() + size_t(r0) * H * hd, alone.data(), n, llmc::testing::gridFor(*spec, n, 1));
    EXPECT_EQ(std::memcmp(alone.data(), got.data() + size_t(r0) * H * hd, alone.size() * sizeof(float)), 0)
        << "sequence " << s;
  }
}

TEST(AttentionKernel, TiledPrefillOnTensorCores) {
  // GQA 4 (4 heads per item, tiles of 16 rows): a chunk after 30 cached positions over 5 tiles,
  // a decode row (its own tile), a whole prompt over 3 tiles.
  checkTiled(8, 2, 32, 16, 0, {100, 7, 40}, {70, 1, 40});
  // MHA (tiles of 64 rows), head_dim 64: 130 rows in tiles of 64, 64 and 2.
  checkTiled(2, 2, 64, 16, 0, {150}, {130});
  // Groups of 6 (items of 2 heads, 3 per kv head, tiles of 32 rows) and of 8 (tiles of 8 rows).
  checkTiled(12, 2, 16, 4, 0, {45, 5}, {40, 5});
  checkTiled(8, 1, 8, 8, 0, {21}, {21});
  // head_dim 128, the largest: K, V and P tiles fill 43.5 KiB of shared memory.
  checkTiled(2, 1, 128, 16, 0, {40}, {40});
}

TEST(AttentionKernel, TiledPrefillSlidingWindowAndInt8Cache) {
  // A window narrower than a key tile and one wider: early key tiles of a query tile are wholly
  // masked for its later rows.
  checkTiled(4, 1, 16, 8, 5, {90}, {90});
  checkTiled(4, 2, 24, 4, 40, {100, 60}, {80, 3});
  checkTiled(4, 1, 32, 16, 0, {60, 3}, {60, 3}, "int8");
  checkTiled(6, 3, 16, 8, 20, {70}, {35}, "int8");
  // bf16 and f16 caches (4 elements in one 8-byte load), read exactly.
  checkTiled(8, 2, 32, 16, 0, {100, 7}, {70, 1}, "bf16");
  checkTiled(4, 2, 24, 4, 40, {100, 60}, {80, 3}, "f16");
  // fp8 (4 elements in one 4-byte load), read exactly.
  checkTiled(8, 2, 32, 16, 0, {100, 7}, {70, 1}, "fp8");
}

TEST(AttentionKernel, KvStoreWritesSlotsAndSkipsPadding) {
  const int Hkv = 3, hd = 10, bs = 4, blocks = 5, T = 4;
  auto spec = llmc::emitKvStoreKernel({Hkv, hd, bs, "f32"});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  HostKernel k(*spec, "const float *k, const float *v, const long long *slots, float *kc, float *vc, int T",
               "k, v, slots, kc, vc, T");
  ASSERT_TRUE(k.ok()) << k.error();
  std::vector<float> kx = randomVector(size_t(T) * Hkv * hd, 51), vx = randomVector(kx.size(), 52);
  std::vector<long long> slots = {9, 0, -1, 19};
  std::vector<float> kc(size_t(blocks) * Hkv * bs * hd, 5.0f), vc(kc.size(), 6.0f);
  k.get<KvStoreFn>()(kx.data(), vx.data(), slots.data(), kc.data(), vc.data(), T, 2);
  std::vector<float> wantK(kc.size(), 5.0f), wantV(vc.size(), 6.0f);
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0)
      continue;
    const long long block = slots[t] / bs, off = slots[t] % bs;
    for (int h = 0; h < Hkv; ++h)
      for (int d = 0; d < hd; ++d) {
        wantK[((block * Hkv + h) * bs + off) * hd + d] = kx[(size_t(t) * Hkv + h) * hd + d];
        wantV[((block * Hkv + h) * bs + off) * hd + d] = vx[(size_t(t) * Hkv + h) * hd + d];
      }
  }
  EXPECT_TRUE(bitEqual(kc, wantK));
  EXPECT_TRUE(bitEqual(vc, wantV));
}

TEST(AttentionKernel, Int8KvStoreHoldsTheCpuCodes) {
  // The same codes and scales as the CPU backend's kv_store (runtime/cpu/attention.cc), bit for
  // bit: an all-zero row (scale 0), a row with a tie at x / s = n + 0.5 and random rows; 5 kv
  // heads over 4 warps (a warp takes a second head).
  const int Hkv = 5, hd = 40, bs = 4, blocks = 3, T = 3;
  auto spec = llmc::emitKvStoreKernel({Hkv, hd, bs, "int8"});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  HostKernel k(*spec,
               "const float *k, const float *v, const long long *slots, signed char *kc, signed char *vc, "
               "float *ks, float *vs, int T",
               "k, v, slots, kc, vc, ks, vs, T");
  ASSERT_TRUE(k.ok()) << k.error();
  std::vector<float> kx = randomVector(size_t(T) * Hkv * hd, 61), vx = randomVector(kx.size(), 62);
  std::fill(kx.begin(), kx.begin() + hd, 0.0f);       // token 0, head 0 of K: all zero
  kx[hd] = 127.0f, kx[hd + 1] = 2.5f, kx[hd + 2] = -3.5f; // head 1: scale 1, ties
  for (int d = 3; d < hd; ++d)
    kx[hd + d] = 0.0f;
  std::vector<long long> slots = {5, -1, 10};
  const size_t rows = size_t(blocks) * Hkv * bs;
  std::vector<signed char> kc(rows * hd, 7), vc(rows * hd, 7);
  std::vector<float> ks(rows, -1.0f), vs(rows, -1.0f);
  using Fn = void (*)(const float *, const float *, const long long *, signed char *, signed char *, float *,
                      float *, int, unsigned);
  k.get<Fn>()(kx.data(), vx.data(), slots.data(), kc.data(), vc.data(), ks.data(), vs.data(), T, 2);
  // The CPU's cache over the same arrays' shapes.
  std::vector<int8_t> ck(rows * hd, 7), cv(rows * hd, 7);
  std::vector<float> cks(rows, -1.0f), cvs(rows, -1.0f);
  llmrt::cpu::KvLayer kv;
  kv.k8 = ck.data(), kv.v8 = cv.data(), kv.ks = cks.data(), kv.vs = cvs.data();
  kv.num_blocks = blocks, kv.num_kv_heads = Hkv, kv.block_size = bs, kv.head_dim = hd;
  llmrt::ThreadPool pool(1);
  const std::vector<int64_t> slots64(slots.begin(), slots.end());
  llmrt::cpu::kv_store(kx.data(), vx.data(), T, slots64.data(), kv, pool);
  EXPECT_EQ(std::memcmp(kc.data(), ck.data(), kc.size()), 0);
  EXPECT_EQ(std::memcmp(vc.data(), cv.data(), vc.size()), 0);
  EXPECT_TRUE(bitEqual(ks, cks));
  EXPECT_TRUE(bitEqual(vs, cvs));
  const size_t r1 = size_t(5 / bs * Hkv + 1) * bs + 5 % bs; // token 0, head 1
  EXPECT_EQ(ks[r1], 1.0f);
  EXPECT_EQ(kc[r1 * hd + 1], 2);  // 2.5 rounds to even
  EXPECT_EQ(kc[r1 * hd + 2], -4); // -3.5 too
}

/// The caches kv_store's kernel and the CPU backend's kv_store write for a `kv` cache of 3 kv
/// heads and blocks of 4 (4 blocks, each element first `fill`) from the same 3 rows at slots 5,
/// -1 (padding) and 14: random in [-range, range], `edges` at the start of row 0's k and of row
/// 0's v's head 2. The GPU's cache k / v, then the CPU's.
template <typename Elem>
std::array<std::vector<Elem>, 4> storeBothWays(const std::string &kv, int hd, const std::vector<float> &edges,
                                               float range, Elem fill) {
  const int Hkv = 3, bs = 4, blocks = 4, T = 3;
  auto spec = llmc::emitKvStoreKernel({Hkv, hd, bs, kv});
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  if (!spec.ok())
    return {};
  EXPECT_NE(spec->entry.find("_" + kv + "_"), std::string::npos) << spec->entry;
  const std::string elem = kvElemType(kv);
  HostKernel k(*spec,
               "const float *k, const float *v, const long long *slots, " + elem + " *kc, " + elem + " *vc, int T",
               "k, v, slots, kc, vc, T");
  EXPECT_TRUE(k.ok()) << k.error();
  if (!k.ok())
    return {};
  std::vector<float> kx = randomVector(size_t(T) * Hkv * hd, 91, -range, range), vx = randomVector(kx.size(), 92);
  std::copy(edges.begin(), edges.end(), kx.begin());
  std::copy(edges.begin(), edges.end(), vx.begin() + 2 * hd);
  const std::vector<long long> slots = {5, -1, 14};
  const size_t n = size_t(blocks) * Hkv * bs * hd;
  std::array<std::vector<Elem>, 4> c = {std::vector<Elem>(n, fill), std::vector<Elem>(n, fill),
                                        std::vector<Elem>(n, fill), std::vector<Elem>(n, fill)};
  using Fn = void (*)(const float *, const float *, const long long *, Elem *, Elem *, int, unsigned);
  k.get<Fn>()(kx.data(), vx.data(), slots.data(), c[0].data(), c[1].data(), T, 2);
  llmrt::cpu::KvLayer layer;
  if constexpr (sizeof(Elem) == 1)
    layer.kf8 = c[2].data(), layer.vf8 = c[3].data();
  else
    layer.k16 = c[2].data(), layer.v16 = c[3].data(), layer.bf16 = kv == "bf16";
  layer.num_blocks = blocks, layer.num_kv_heads = Hkv, layer.block_size = bs, layer.head_dim = hd;
  llmrt::ThreadPool pool(1);
  const std::vector<int64_t> slots64(slots.begin(), slots.end());
  llmrt::cpu::kv_store(kx.data(), vx.data(), T, slots64.data(), layer, pool);
  return c;
}

TEST(AttentionKernel, SixteenBitKvStoreHoldsTheCpuRounding) {
  // bf16 and f16 caches hold the CPU backend's bits (runtime/cpu/attention.cc, round to nearest
  // even): ties both ways, f16's overflow to infinity (65520 is the tie above 65504), its
  // subnormals, signed zeros; padding rows store nothing.
  const std::vector<float> edges = {1.00390625f, 1.01171875f, 2049.0f, 2051.0f, 65519.0f, 65520.0f, -70000.0f,
                                    1e-7f,       -3e-6f,      -0.0f,   0.0f,    1e-30f,   -1e30f,   6.1e-5f};
  for (const std::string kv : {"bf16", "f16"}) {
    SCOPED_TRACE(kv);
    const auto [kc, vc, ck, cv] = storeBothWays<uint16_t>(kv, 12, edges, 100.0f, 0x7777);
    ASSERT_FALSE(kc.empty());
    EXPECT_EQ(kc, ck);
    EXPECT_EQ(vc, cv);
    // Some of the rounding, spelled out: token 0, head 0 at slot 5 (block 1, offset 1).
    const size_t r = (size_t(1) * 3 * 4 + 1) * 12;
    if (kv == "bf16") {
      EXPECT_EQ(kc[r], 0x3F80);     // 1 + 2^-8: the tie goes down to the even 1
      EXPECT_EQ(kc[r + 1], 0x3F82); // 1 + 3 * 2^-8: up to the even 1 + 2^-6
    } else {
      EXPECT_EQ(kc[r + 2], 0x6800); // 2049: 2048
      EXPECT_EQ(kc[r + 3], 0x6802); // 2051: 2052
      EXPECT_EQ(kc[r + 4], 0x7BFF); // 65519: 65504
      EXPECT_EQ(kc[r + 5], 0x7C00); // 65520: infinity
      EXPECT_EQ(kc[r + 6], 0xFC00); // -70000: -infinity
      EXPECT_EQ(kc[r + 7], 0x0002); // 1e-7: 2 x 2^-24
    }
    EXPECT_EQ(kc[r + 9], 0x8000); // -0 keeps its sign
  }
}

TEST(AttentionKernel, Fp8KvStoreHoldsTheCpuRounding) {
  // An fp8 E4M3 cache holds the CPU backend's bits (quant::float_to_e4m3, checked against
  // ml_dtypes): ties both ways, saturation at +-448 (infinities too, and random values up to
  // 500), subnormals, signed zeros, a NaN; padding rows store nothing.
  const std::vector<float> edges = {1.0625f, 1.1875f, 464.0f, -1e9f,  INFINITY, 0.0078125f, 0.0068359375f,
                                    -0.0f,   0.0f,    1e-30f, 432.0f, NAN,      0.001f,     15.5f};
  const auto [kc, vc, ck, cv] = storeBothWays<uint8_t>("fp8", 16, edges, 500.0f, 0x77);
  ASSERT_FALSE(kc.empty());
  EXPECT_EQ(kc, ck);
  EXPECT_EQ(vc, cv);
  // Some of the rounding, spelled out: token 0, head 0 at slot 5 (block 1, offset 1).
  const size_t r = (size_t(1) * 3 * 4 + 1) * 16;
  EXPECT_EQ(kc[r], 0x38);      // 1 + 2^-4: the tie goes down to the even 1
  EXPECT_EQ(kc[r + 1], 0x3A);  // 1 + 3 * 2^-4: up to the even 1 + 2^-2
  EXPECT_EQ(kc[r + 2], 0x7E);  // 464: 448, the largest finite
  EXPECT_EQ(kc[r + 3], 0xFE);  // -1e9: -448
  EXPECT_EQ(kc[r + 4], 0x7E);  // infinity: 448
  EXPECT_EQ(kc[r + 5], 0x04);  // 2^-7: a subnormal, 4 x 2^-9
  EXPECT_EQ(kc[r + 6], 0x04);  // 3.5 x 2^-9: the tie goes up to the even 4 x 2^-9
  EXPECT_EQ(kc[r + 7], 0x80);  // -0 keeps its sign
  EXPECT_EQ(kc[r + 9], 0x00);  // 1e-30: 0
  EXPECT_EQ(kc[r + 10], 0x7E); // 432, the tie between 416 and 448: the even 448
  EXPECT_EQ(kc[r + 11], 0x7F); // NaN: the NaN code
  EXPECT_EQ(kc[r + 13], 0x58); // 15.5, the tie between 15 (mantissa 7) and 16: the even 16
}

/// Llama-3's rotation (theta 500000, llama3 scaling over a short original context) at `style`.
llmc::RopeParams llama3Rope(const std::string &style, int heads, int hd) {
  llmc::RopeParams rope;
  rope.numHeads = heads;
  rope.headDim = hd;
  rope.theta = 500000.0;
  rope.style = style;
  rope.ropeType = "llama3";
  rope.factor = 8.0;
  rope.lowFreqFactor = 1.0;
  rope.highFreqFactor = 4.0;
  rope.originalMaxPosition = 64;
  return rope;
}

/// The fused rope_kv_store kernel against rope (q), rope (k) and kv_store run one after the
/// other: the same q, cache and scales, bit for bit. GQA 6/3, a padding row, a grid smaller than
/// the rows, positions up to 70000 (large angles).
/// Shapes: H = 6, Hkv = 3, hd = 10 rotate pairs one at a time (32 threads, 5 pairs a head); H = 8,
/// Hkv = 2, hd = 16 give each of 64 threads one angle for heads t / 8 and t / 8 + 8.
void checkRopeKvStore(const std::string &style, const std::string &kvDtype, int H = 6, int Hkv = 3, int hd = 10) {
  SCOPED_TRACE(style + "/" + kvDtype + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
               " hd=" + std::to_string(hd));
  const int bs = 4, blocks = 5, T = 4;
  const int qw = H * hd, kvw = Hkv * hd, w = qw + 2 * kvw;
  const bool i8 = kvDtype == "int8";
  const llmc::RopeParams rope = llama3Rope(style, 0, hd);
  llmc::RopeParams ropeQ = rope, ropeK = rope;
  ropeQ.numHeads = H;
  ropeK.numHeads = Hkv;
  const llmc::KvCacheParams cache{Hkv, hd, bs, kvDtype};
  auto fusedSpec = llmc::emitRopeKvStoreKernel({ropeQ, cache});
  auto qSpec = llmc::emitRopeKernel(ropeQ), kSpec = llmc::emitRopeKernel(ropeK);
  auto storeSpec = llmc::emitKvStoreKernel(cache);
  ASSERT_TRUE(fusedSpec.ok()) << fusedSpec.status().to_string();
  ASSERT_TRUE(qSpec.ok() && kSpec.ok() && storeSpec.ok());
  EXPECT_EQ(fusedSpec->family, "rope_kv_store");
  EXPECT_EQ(fusedSpec->gridRule, "rows");
  const std::string elem = kvElemType(kvDtype);
  const std::string scaleParams = i8 ? ", float *ks, float *vs" : "";
  const std::string scaleArgs = i8 ? ", ks, vs" : "";
  HostKernel fused(*fusedSpec,
                   "const float *qkv, const int *pos, const long long *slots, float *q, " + elem + " *kc, " + elem +
                       " *vc" + scaleParams + ", int T",
                   "qkv, pos, slots, q, kc, vc" + scaleArgs + ", T");
  HostKernel rq(*qSpec, "const float *x, const int *pos, float *out, int T", "x, pos, out, T");
  HostKernel rk(*kSpec, "const float *x, const int *pos, float *out, int T", "x, pos, out, T");
  HostKernel store(*storeSpec,
                   "const float *k, const float *v, const long long *slots, " + elem + " *kc, " + elem + " *vc" +
                       scaleParams + ", int T",
                   "k, v, slots, kc, vc" + scaleArgs + ", T");
  ASSERT_TRUE(fused.ok()) << fused.error();
  ASSERT_TRUE(rq.ok() && rk.ok() && store.ok()) << rq.error() << rk.error() << store.error();

  const std::vector<float> qkv = randomVector(size_t(T) * w, 71);
  const std::vector<int> pos = {3, 0, 7, 70000};
  const std::vector<long long> slots = {9, 0, -1, 19};
  // The unfused steps' inputs: the split's columns.
  std::vector<float> q(size_t(T) * qw), k(size_t(T) * kvw), v(size_t(T) * kvw);
  for (int t = 0; t < T; ++t) {
    std::copy_n(&qkv[size_t(t) * w], qw, &q[size_t(t) * qw]);
    std::copy_n(&qkv[size_t(t) * w + qw], kvw, &k[size_t(t) * kvw]);
    std::copy_n(&qkv[size_t(t) * w + qw + kvw], kvw, &v[size_t(t) * kvw]);
  }
  const size_t rows = size_t(blocks) * Hkv * bs, bytes = rows * hd * size_t(kvElemBytes(kvDtype));
  std::vector<unsigned char> kc(bytes, 7), vc(bytes, 7), wantK(bytes, 7), wantV(bytes, 7);
  std::vector<float> ks(rows, -1.0f), vs(rows, -1.0f), wantKs(rows, -1.0f), wantVs(rows, -1.0f);
  std::vector<float> qOut(q.size(), -9.0f), wantQ(q.size(), -9.0f), kRot(k.size());
  using RopeFn = void (*)(const float *, const int *, float *, int, unsigned);
  rq.get<RopeFn>()(q.data(), pos.data(), wantQ.data(), T, 3);
  rk.get<RopeFn>()(k.data(), pos.data(), kRot.data(), T, 3);
  if (i8) {
    using Fused = void (*)(const float *, const int *, const long long *, float *, void *, void *, float *, float *,
                           int, unsigned);
    using Store = void (*)(const float *, const float *, const long long *, void *, void *, float *, float *, int,
                           unsigned);
    store.get<Store>()(kRot.data(), v.data(), slots.data(), wantK.data(), wantV.data(), wantKs.data(),
                       wantVs.data(), T, 3);
    fused.get<Fused>()(qkv.data(), pos.data(), slots.data(), qOut.data(), kc.data(), vc.data(), ks.data(),
                       vs.data(), T, 3);
  } else {
    using Fused = void (*)(const float *, const int *, const long long *, float *, void *, void *, int, unsigned);
    using Store = void (*)(const float *, const float *, const long long *, void *, void *, int, unsigned);
    store.get<Store>()(kRot.data(), v.data(), slots.data(), wantK.data(), wantV.data(), T, 3);
    fused.get<Fused>()(qkv.data(), pos.data(), slots.data(), qOut.data(), kc.data(), vc.data(), T, 3);
  }
  EXPECT_TRUE(bitEqual(qOut, wantQ));
  EXPECT_EQ(std::memcmp(kc.data(), wantK.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(vc.data(), wantV.data(), bytes), 0);
  EXPECT_TRUE(bitEqual(ks, wantKs));
  EXPECT_TRUE(bitEqual(vs, wantVs));
  // The store really happened (and not for the padding row): slot 19 of token 3 holds data.
  EXPECT_NE(std::memcmp(kc.data(), std::vector<unsigned char>(bytes, 7).data(), bytes), 0);
}

TEST(AttentionKernel, RopeKvStoreEqualsRopeThenKvStore) {
  for (const char *style : {"neox", "interleaved"})
    for (const char *kv : {"f32", "bf16", "f16", "fp8", "int8"}) {
      checkRopeKvStore(style, kv);
      checkRopeKvStore(style, kv, 8, 2, 16);
    }
}

/// The decode kernel with rope_kv_store inside (AttentionParams::rope) against rope_kv_store
/// then the plain per-row kernel: every sequence has one row (decode), whose own k and v the
/// fused kernel takes from qkv rather than the cache. The real rows' outputs equal bit for bit
/// and the caches (and int8 scales) byte for byte, at the rule's grid and at 3 blocks. Rows: a
/// long context split into 3 chunks (the row's position in the last), short ones, a padding
/// sequence (slot -1, as a replayed decode graph pads: its output is unspecified and nothing is
/// stored) and a padding row past query_start[S].
void checkRopeAttention(const std::string &style, const std::string &kv, int H, int Hkv, int hd, int window = 0,
                        bool q8 = false, std::vector<int> contexts = {600, 7, 130, 1}) {
  SCOPED_TRACE(style + "/" + kv + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) + " hd=" +
               std::to_string(hd) + " window=" + std::to_string(window) + (q8 ? " q8" : ""));
  const int bs = 16;
  const bool i8 = kv == "int8";
  const llmc::RopeParams rope = llama3Rope(style, H, hd);
  llmc::AttentionParams p = attentionParams(H, Hkv, hd, bs, kv, window);
  p.quantizedOutput = q8;
  auto plain = llmc::emitPagedAttentionKernel(p);
  p.rope = rope;
  auto fused = llmc::emitPagedAttentionKernel(p);
  auto store = llmc::emitRopeKvStoreKernel({rope, p.cache});
  ASSERT_TRUE(plain.ok() && fused.ok() && store.ok()) << fused.status().to_string();
  EXPECT_EQ(fused->family, "paged_attention");
  EXPECT_NE(fused->entry.find("_rope"), std::string::npos) << fused->entry;
  EXPECT_EQ(fused->gridRule, plain->gridRule);
  EXPECT_EQ(fused->workspaceBytes, plain->workspaceBytes);
  const std::string elem = kvElemType(kv);
  const std::string scaleParams = i8 ? ", float *ks, float *vs" : "", scaleArgs = i8 ? ", ks, vs" : "";
  HostKernel kStore(*store,
                    "const float *qkv, const int *pos, const long long *slots, float *q, " + elem + " *kc, " + elem +
                        " *vc" + scaleParams + ", int T",
                    "qkv, pos, slots, q, kc, vc" + scaleArgs + ", T");
  // Both attention kernels take their pointers from an array (a[0] q or qkv; the slots only
  // for the fused one).
  auto attentionArgs = [&](bool withSlots) {
    std::vector<std::string> types = {"const float", elem, elem};
    if (i8)
      types.insert(types.end(), {"float", "float"});
    types.push_back("const int");
    if (withSlots)
      types.push_back("const long long");
    types.insert(types.end(), {"const int", "const int"});
    std::string args;
    for (size_t i = 0; i < types.size(); ++i)
      args += "(" + types[i] + " *)a[" + std::to_string(i) + "], ";
    const size_t n = types.size();
    return args + "mb, S, (float *)a[" + std::to_string(n) + "], " +
           (q8 ? "(unsigned char *)a[" + std::to_string(n + 1) + "], " : std::string()) + "(unsigned char *)a[" +
           std::to_string(n + (q8 ? 2 : 1)) + "], T";
  };
  HostKernel kPlain(*plain, "void *const *a, int mb, int S, int T", attentionArgs(false));
  HostKernel kFused(*fused, "void *const *a, int mb, int S, int T", attentionArgs(true));
  ASSERT_TRUE(kStore.ok() && kPlain.ok() && kFused.ok()) << kStore.error() << kPlain.error() << kFused.error();

  // Sequences of one row each (the last a padding sequence at position 0), then a padding row.
  const Batch b = makeBatch(H, Hkv, hd, bs, contexts, std::vector<int>(contexts.size(), 1));
  const int T = b.T, S = b.S, width = (H + 2 * Hkv) * hd;
  std::vector<long long> slots;
  for (int t = 0; t < T; ++t) {
    const int s = std::min(t, S - 1), pos = b.positions[t];
    const bool real = t < S - 1;
    slots.push_back(real ? (long long)b.blockTables[size_t(s) * b.maxBlocks + pos / bs] * bs + pos % bs : -1);
  }
  const std::vector<float> qkv = randomVector(size_t(T) * width, 81);
  // The caches before the step: random values, or random codes and scales.
  const size_t cacheRows = size_t(b.blocks) * Hkv * bs;
  const size_t bytes = cacheRows * hd * size_t(kvElemBytes(kv));
  std::vector<unsigned char> kc0(bytes), vc0(bytes);
  std::vector<float> ks0, vs0;
  if (i8) {
    const std::vector<float> rk = randomVector(bytes, 82, -127.0f, 127.0f), rv = randomVector(bytes, 83, -127.0f, 127.0f);
    for (size_t i = 0; i < bytes; ++i) {
      kc0[i] = static_cast<unsigned char>(static_cast<signed char>(std::lrint(rk[i])));
      vc0[i] = static_cast<unsigned char>(static_cast<signed char>(std::lrint(rv[i])));
    }
    ks0 = randomVector(cacheRows, 84, 0.001f, 0.02f);
    vs0 = randomVector(cacheRows, 85, 0.001f, 0.02f);
  } else {
    std::vector<float> k = b.kc, v = b.vc;
    kc0 = cacheBytes(k, kv);
    vc0 = cacheBytes(v, kv);
  }
  const size_t rb = q8 ? size_t(llmc::q8RowBytes(H * hd)) : 0;
  struct Result {
    std::vector<unsigned char> kc, vc, q8;
    std::vector<float> ks, vs, out;
  };
  auto fresh = [&] {
    return Result{kc0, vc0, std::vector<unsigned char>(size_t(T) * rb, 0xEE), ks0, vs0,
                  std::vector<float>(size_t(T) * H * hd, NAN)};
  };
  std::vector<unsigned char> work(fused->workspaceBytes, 0);
  // rope_kv_store, then the plain kernel.
  Result want = fresh();
  std::vector<float> q(size_t(T) * H * hd, NAN);
  if (i8) {
    using Store = void (*)(const float *, const int *, const long long *, float *, void *, void *, float *, float *,
                           int, unsigned);
    kStore.get<Store>()(qkv.data(), b.positions.data(), slots.data(), q.data(), want.kc.data(), want.vc.data(),
                        want.ks.data(), want.vs.data(), T, 3);
  } else {
    using Store = void (*)(const float *, const int *, const long long *, float *, void *, void *, int, unsigned);
    kStore.get<Store>()(qkv.data(), b.positions.data(), slots.data(), q.data(), want.kc.data(), want.vc.data(), T, 3);
  }
  auto attend = [&](const HostKernel &k, bool withSlots, const float *in, Result &r, unsigned grid) {
    std::vector<void *> a = {const_cast<float *>(in), r.kc.data(), r.vc.data()};
    if (i8)
      a.insert(a.end(), {r.ks.data(), r.vs.data()});
    a.push_back(const_cast<int *>(b.positions.data()));
    if (withSlots)
      a.push_back(slots.data());
    a.insert(a.end(), {const_cast<int *>(b.queryStart.data()), const_cast<int *>(b.blockTables.data()), r.out.data()});
    if (q8)
      a.push_back(r.q8.data());
    a.push_back(work.data());
    using Fn = void (*)(void *const *, int, int, int, unsigned);
    k.get<Fn>()(a.data(), b.maxBlocks, S, T, grid);
  };
  attend(kPlain, false, q.data(), want, gridFor(*plain, T));
  // The fused kernel on the caches before the step, at the rule's grid and at 3 blocks.
  for (unsigned grid : {unsigned(gridFor(*fused, T)), 3u}) {
    SCOPED_TRACE("grid " + std::to_string(grid));
    Result got = fresh();
    attend(kFused, true, qkv.data(), got, grid);
    // (int8: the codes' rows, 16-byte units from head_dim 16 on)
    expectCachePrefetches(kFused.prefetches(), b, window, grid, got.kc.data(), got.vc.data(), kvElemBytes(kv));
    EXPECT_EQ(got.kc, want.kc);
    EXPECT_EQ(got.vc, want.vc);
    EXPECT_TRUE(bitEqual(got.ks, want.ks));
    EXPECT_TRUE(bitEqual(got.vs, want.vs));
    // The store happened: sequence 0's slot differs from the cache before the step.
    EXPECT_NE(got.kc, kc0);
    for (int t = 0; t < S - 1; ++t) { // real rows (the padding sequence's output is unspecified)
      SCOPED_TRACE("row " + std::to_string(t));
      EXPECT_EQ(std::memcmp(&got.out[size_t(t) * H * hd], &want.out[size_t(t) * H * hd], size_t(H) * hd * 4), 0);
      if (q8)
        EXPECT_EQ(std::memcmp(&got.q8[t * rb], &want.q8[t * rb], rb), 0);
    }
    int sub = std::min(H / Hkv, 8); // query heads per item, as in checkAttention
    while ((H / Hkv) % sub)
      --sub;
    for (size_t i = 0; i < size_t(32) * (H / sub) * 4; ++i) // the counters (kSplitRows x items)
      ASSERT_EQ(work[i], 0) << "counter byte " << i << " left set";
  }
  // Against the double reference over the cache after the step (the new rows included).
  Batch after = b;
  if (!i8) {
    after.kc = cacheValues(want.kc, kv);
    after.vc = cacheValues(want.vc, kv);
    after.q = q;
    const std::vector<double> ref = attentionRef(after, p.scale, window);
    const size_t real = size_t(S - 1) * H * hd;
    expectNear(std::vector<float>(want.out.begin(), want.out.begin() + real),
               std::vector<double>(ref.begin(), ref.begin() + real), 2e-5, "attention after rope_kv_store");
  }
}

TEST(AttentionKernel, DecodeKernelDoesRopeKvStoreInside) {
  // GQA 4 (one item per kv head, every item stores), f32 and int8 caches, both styles.
  checkRopeAttention("neox", "f32", 8, 2, 32);
  checkRopeAttention("interleaved", "int8", 8, 2, 32);
  // Groups of 12 in items of 6 (the kv head's first item stores; the other reads its own copy).
  checkRopeAttention("neox", "int8", 12, 1, 16);
  // A sliding window; head_dim 160 (above the block: two dims per thread, 80 pairs).
  checkRopeAttention("neox", "f32", 4, 2, 24, 5);
  checkRopeAttention("interleaved", "int8", 2, 1, 160);
  // bf16, f16 and fp8 caches: the own k and v rounded as the cache holds them.
  checkRopeAttention("neox", "bf16", 8, 2, 32);
  checkRopeAttention("interleaved", "f16", 12, 1, 16);
  checkRopeAttention("neox", "bf16", 4, 2, 24, 5);
  checkRopeAttention("interleaved", "fp8", 8, 2, 32);
  checkRopeAttention("neox", "fp8", 4, 2, 24, 5);
  // With the int8 rows of the output for o_proj.
  checkRopeAttention("neox", "f32", 4, 2, 32, 0, true);
  checkRopeAttention("neox", "int8", 4, 1, 64, 0, true);
  // 33 sequences (more than kSplitRows rows: no split) at their first positions (34 blocks, which
  // makeBatch's scrambling by 7 keeps distinct).
  checkRopeAttention("neox", "f32", 1, 1, 32, 0, false, std::vector<int>(33, 1));
}

TEST(AttentionKernel, EmissionErrors) {
  llmc::AttentionParams p;
  p.cache = {2, 64, 16, "f32"};
  p.numHeads = 3; // not a multiple of the kv heads
  p.scale = 0.125f;
  EXPECT_FALSE(llmc::emitPagedAttentionKernel(p).ok());
  p.numHeads = 4;
  auto ok = llmc::emitPagedAttentionKernel(p);
  ASSERT_TRUE(ok.ok());
  // One block per (row, group of 2 heads); 32 per row (chunks) in steps of up to 32 rows.
  EXPECT_EQ(ok->gridRule, "rows*2 x32 when rows<=32");
  EXPECT_GT(ok->workspaceBytes, 0u);
  p.cache.kvDtype = "i8";
  auto i8 = llmc::emitPagedAttentionKernel(p);
  ASSERT_FALSE(i8.ok());
  EXPECT_EQ(i8.status().code(), llmrt::StatusCode::kUnimplemented);
  EXPECT_FALSE(llmc::emitKvStoreKernel({2, 2048, 16, "f32"}).ok()); // head_dim > 1024
  // The tiled kernel: items of (query tile, kv head, heads of its group), tiles of 32 rows here
  // (2 heads per item), plus one tile per sequence at most; head_dim a multiple of 8 up to 128.
  p.cache.kvDtype = "f32";
  p.tensorCores = true;
  auto tiled = llmc::emitPagedAttentionKernel(p);
  ASSERT_TRUE(tiled.ok()) << tiled.status().to_string();
  EXPECT_EQ(tiled->gridRule, "rows/32*2 + seqs*2");
  EXPECT_EQ(tiled->workspaceBytes, 0u);
  for (int64_t hd : {60, 136, 256}) {
    p.cache.headDim = hd;
    EXPECT_FALSE(llmc::tiledAttentionApplies(p)) << hd;
    auto none = llmc::emitPagedAttentionKernel(p);
    ASSERT_FALSE(none.ok()) << hd;
    EXPECT_EQ(none.status().code(), llmrt::StatusCode::kUnimplemented);
  }
  llmc::RopeParams rope;
  rope.numHeads = 5; // not a multiple of the kv heads
  rope.headDim = 64;
  EXPECT_FALSE(llmc::emitRopeKvStoreKernel({rope, {2, 64, 16, "f32"}}).ok());
  rope.numHeads = 4;
  EXPECT_TRUE(llmc::emitRopeKvStoreKernel({rope, {2, 64, 16, "f32"}}).ok());
  EXPECT_FALSE(llmc::emitRopeKvStoreKernel({rope, {2, 32, 16, "f32"}}).ok()); // head_dim differs
  auto e5m2 = llmc::emitRopeKvStoreKernel({rope, {2, 64, 16, "e5m2"}});
  ASSERT_FALSE(e5m2.ok());
  EXPECT_EQ(e5m2.status().code(), llmrt::StatusCode::kUnimplemented);
  EXPECT_NE(e5m2.status().message().find("fp8"), std::string::npos) << e5m2.status().message(); // the choices
  EXPECT_EQ(llmc::emitKvStoreKernel({2, 64, 16, "e5m2"}).status().code(), llmrt::StatusCode::kUnimplemented);
  rope.style = "sideways";
  EXPECT_FALSE(llmc::emitRopeKvStoreKernel({rope, {2, 64, 16, "f32"}}).ok());
  // The decode kernel with rope_kv_store inside: the rotation's heads and head_dim are the
  // attention's; never the tiled kernel.
  llmc::AttentionParams withRope;
  withRope.cache = {2, 64, 16, "f32"};
  withRope.numHeads = 4;
  withRope.scale = 0.125f;
  rope.style = "neox";
  withRope.rope = rope;
  EXPECT_TRUE(llmc::emitPagedAttentionKernel(withRope).ok());
  withRope.rope->numHeads = 2;
  EXPECT_FALSE(llmc::emitPagedAttentionKernel(withRope).ok());
  withRope.rope->numHeads = 4;
  withRope.rope->headDim = 32;
  EXPECT_FALSE(llmc::emitPagedAttentionKernel(withRope).ok());
  withRope.rope->headDim = 64;
  withRope.tensorCores = true;
  EXPECT_FALSE(llmc::emitPagedAttentionKernel(withRope).ok());
}

// --- add, split, permute_columns ---------------------------------------------

TEST(ElementwiseKernels, AddSplitPermute) {
  const int D = 50, T = 3;
  std::vector<float> a = randomVector(size_t(T) * D, 61), b = randomVector(a.size(), 62);
  auto add = llmc::emitAddKernel(D);
  ASSERT_TRUE(add.ok());
  HostKernel ka(*add, "const float *a, const float *b, float *out, int T", "a, b, out, T");
  ASSERT_TRUE(ka.ok()) << ka.error();
  std::vector<float> sum(a.size(), NAN);
  ka.get<void (*)(const float *, const float *, float *, int, unsigned)>()(a.data(), b.data(), sum.data(), T, 2);
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(sum[i], a[i] + b[i]) << i;

  // q, k, v of a fused projection: 30 + 12 + 8 columns.
  auto split = llmc::emitSplitKernel(D, {30, 12, 8});
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  HostKernel ks(*split, "const float *x, float *o0, float *o1, float *o2, int T", "x, o0, o1, o2, T");
  ASSERT_TRUE(ks.ok()) << ks.error();
  std::vector<std::vector<float>> parts = {std::vector<float>(size_t(T) * 30, NAN),
                                           std::vector<float>(size_t(T) * 12, NAN),
                                           std::vector<float>(size_t(T) * 8, NAN)};
  ks.get<void (*)(const float *, float *, float *, float *, int, unsigned)>()(
      a.data(), parts[0].data(), parts[1].data(), parts[2].data(), T, 2);
  int first = 0;
  for (const auto &part : parts) {
    const int w = int(part.size()) / T;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < w; ++j)
        ASSERT_EQ(part[size_t(t) * w + j], a[size_t(t) * D + first + j]);
    first += w;
  }
  EXPECT_FALSE(llmc::emitSplitKernel(D, {30, 12}).ok()); // 42 != 50
  EXPECT_FALSE(llmc::emitSplitKernel(D, {50, 0}).ok());

  auto perm = llmc::emitPermuteColumnsKernel(D);
  ASSERT_TRUE(perm.ok());
  HostKernel kp(*perm, "const float *x, const int *perm, float *out, int T", "x, perm, out, T");
  ASSERT_TRUE(kp.ok()) << kp.error();
  std::vector<int> order(D);
  for (int j = 0; j < D; ++j)
    order[j] = (j * 7 + 3) % D;
  std::vector<float> permuted(a.size(), NAN);
  kp.get<void (*)(const float *, const int *, float *, int, unsigned)>()(a.data(), order.data(), permuted.data(),
                                                                          T, 1);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < D; ++j)
      ASSERT_EQ(permuted[size_t(t) * D + j], a[size_t(t) * D + order[j]]);
}

} // namespace

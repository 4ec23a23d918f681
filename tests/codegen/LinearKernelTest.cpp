// The kernels that read weights: llm.linear / llm.logits (codegen/LinearKernel.cpp) and
// llm.embedding (codegen/EmbeddingKernel.cpp), run on the CPU through the host emulation against
// double-precision references over the exactly dequantized weights (runtime/quant:
// quantize_row, pack_tile into the cuda_mma_n8 layout, dequantize_row).

#include "codegen/KernelFamilies.h"
#include "runtime/cpu/kernels.h"
#include "runtime/quant/quant_format.h"

#include "HostKernel.h"
#include "Q8Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using llmc::KernelSpec;
using llmc::testing::HostKernel;
using llmc::testing::Q8Row;
using llmc::testing::bitEqual;
using llmc::testing::cpuQuantize;
using llmc::testing::packQ8Row;
using llmc::testing::gridFor;
using llmc::testing::randomVector;
namespace quant = llmrt::quant;

using LinearFn = void (*)(const float *, const unsigned char *, const float *,
                          const int *, float *, int, unsigned);

constexpr const char *kParams =
    "const float *x, const unsigned char *w, const float *bias, const int *rows, float *y, int T";
constexpr const char *kArgs = "x, w, bias, rows, y, T";

/// A weight [n, k] in the kernel's storage and its exact f32 values.
struct Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> values; // [n, k]
};

Weight quantizedWeight(const std::string &format, int n, int k, uint32_t seed) {
  const quant::Format f = quant::parse_format(format).value();
  const int64_t rb = quant::row_bytes(f, k).value();
  std::vector<float> src = randomVector(size_t(n) * k, seed);
  std::vector<uint8_t> rows(size_t(n) * rb);
  Weight w;
  w.values.resize(size_t(n) * k);
  for (int r = 0; r < n; ++r) {
    quant::quantize_row(f, &src[size_t(r) * k], k, &rows[size_t(r) * rb]);
    quant::dequantize_row(f, &rows[size_t(r) * rb], k, &w.values[size_t(r) * k]);
  }
  const int tiles = (n + 7) / 8;
  w.bytes.assign(size_t(tiles) * 8 * rb, 0xAB);
  for (int t = 0; t < tiles; ++t)
    quant::pack_tile(f, quant::Layout::kCudaMma8, k, &rows[size_t(t) * 8 * rb],
                     std::min(8, n - 8 * t), &w.bytes[size_t(t) * 8 * rb]);
  return w;
}

Weight denseWeight(const std::string &type, int n, int k, uint32_t seed) {
  std::vector<float> src = randomVector(size_t(n) * k, seed);
  Weight w;
  w.values.resize(src.size());
  if (type == "f32") {
    w.values = src;
    w.bytes.resize(src.size() * 4);
    std::memcpy(w.bytes.data(), src.data(), w.bytes.size());
    return w;
  }
  w.bytes.resize(src.size() * 2);
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t h = type == "f16" ? quant::float_to_half(src[i]) : quant::float_to_bf16(src[i]);
    w.values[i] = type == "f16" ? quant::half_to_float(h) : quant::bf16_to_float(h);
    std::memcpy(&w.bytes[2 * i], &h, 2);
  }
  return w;
}

/// The T rows of x ([T, k]) as the int8 rows an int8-activation GEMV reads (the CPU's quantization,
/// packed as quantize_q8 writes it).
std::vector<uint8_t> packedQ8Rows(const std::vector<float> &x, int T, int k) {
  const size_t rb = size_t(llmc::q8RowBytes(k));
  std::vector<uint8_t> xq(size_t(T) * rb);
  for (int t = 0; t < T; ++t) {
    const std::vector<uint8_t> row = packQ8Row(cpuQuantize(&x[size_t(t) * k], k), k);
    std::copy(row.begin(), row.end(), xq.begin() + long(t * rb));
  }
  return xq;
}

/// Runs the kernel of `p` over T rows (gathered through `rows` for logits)
/// and checks every output against the reference; also checks that the grid
/// size and the other rows of the batch do not change a single bit.
/// Returns the outputs (for comparisons between paths).
std::vector<float> checkLinear(const llmc::LinearParams &p, const Weight &w, int T) {
  SCOPED_TRACE(p.weight + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
               " T=" + std::to_string(T) + (p.bias ? " bias" : "") + (p.gatherRows ? " gather" : ""));
  auto spec = llmc::emitLinearKernel(p);
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  if (!spec.ok())
    return {};
  HostKernel kernel(*spec, kParams, kArgs);
  EXPECT_TRUE(kernel.ok()) << kernel.error();
  if (!kernel.ok())
    return {};
  // Tensor cores: TF32 operands, each rounded to 10 mantissa bits (relative error <= 2^-11), so
  // a product is off by at most ~2^-10 of its magnitude.
  const double rel = p.tensorCores ? 1.2e-3 : 2e-6;
  auto run = kernel.get<LinearFn>();
  const int n = int(p.n), k = int(p.k);
  const int xrows = p.gatherRows ? T + 3 : T;
  std::vector<float> x = randomVector(size_t(xrows) * k, 77);
  std::vector<float> bias = randomVector(n, 78);
  std::vector<int> rows(T);
  for (int r = 0; r < T; ++r)
    rows[r] = (r * 5 + 2) % xrows; // out of order, some rows skipped
  std::vector<float> y(size_t(T) * n, NAN);
  run(x.data(), w.bytes.data(), p.bias ? bias.data() : nullptr, p.gatherRows ? rows.data() : nullptr,
      y.data(), T, gridFor(*spec, T));
  size_t bad = 0;
  for (int t = 0; t < T; ++t) {
    const float *xs = &x[size_t(p.gatherRows ? rows[t] : t) * k];
    for (int o = 0; o < n; ++o) {
      double want = p.bias ? bias[o] : 0.0, mag = std::fabs(want);
      for (int e = 0; e < k; ++e) {
        want += double(w.values[size_t(o) * k + e]) * xs[e];
        mag += std::fabs(double(w.values[size_t(o) * k + e]) * xs[e]);
      }
      const double got = y[size_t(t) * n + o];
      if (!(std::fabs(got - want) <= rel * mag + 1e-6) && ++bad <= 5)
        ADD_FAILURE() << "y[" << t << ", " << o << "] = " << got << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0u);
  // One block walks everything (grid-stride): the same bits.
  std::vector<float> y1(y.size(), NAN);
  run(x.data(), w.bytes.data(), p.bias ? bias.data() : nullptr, p.gatherRows ? rows.data() : nullptr,
      y1.data(), T, 1);
  EXPECT_TRUE(bitEqual(y, y1));
  // The last row alone gives the bits it had in the batch (each kernel's rows are independent).
  if (T > 1) {
    std::vector<float> last(n, NAN);
    const int *r = p.gatherRows ? rows.data() + (T - 1) : nullptr;
    const float *xs = p.gatherRows ? x.data() : x.data() + size_t(T - 1) * k;
    run(xs, w.bytes.data(), p.bias ? bias.data() : nullptr, r, last.data(), 1, gridFor(*spec, 1));
    EXPECT_EQ(std::memcmp(last.data(), &y[size_t(T - 1) * n], n * sizeof(float)), 0);
  }
  return y;
}

TEST(LinearKernel, QuantizedFormatsInTheMmaLayout) {
  // GGUF's Q4_0 / Q4_1 / Q8_0, GPTQ/AWQ-style g128 with zero points, and
  // whole-row groups; k = 96 ends in a short span (3 sub-blocks), n = 20 in
  // a partial tile.
  struct Case {
    const char *format;
    int n, k;
  };
  for (const Case &c : {Case{"int4-g32-f16-sym", 20, 96}, Case{"int4-g32-f16-min", 16, 160},
                        Case{"int8-g32-f16-sym", 20, 96}, Case{"int4-g128-bf16-zp", 12, 256},
                        Case{"int8-g64-f32-zp", 9, 192}, Case{"int8-row-bf16-min", 8, 224},
                        Case{"int4-row-f32-sym", 7, 64},
                        // many spans: the CUDA-core kernel's warps split K unevenly (9 spans over
                        // 8 warps, the last span short; 6 over 6) and prefetch the next span
                        Case{"int4-g32-f16-min", 20, 1056}, Case{"int8-g32-f16-sym", 12, 672},
                        // Llama-3's int4-g128 (one group per span, scales loaded with the codes
                        // two spans ahead), g64 (two groups per span) with a short last span,
                        // int8-g128 sym over 4 spans
                        Case{"int4-g128-f16-min", 16, 640}, Case{"int4-g64-f16-zp", 9, 320},
                        Case{"int8-g128-bf16-sym", 8, 512},
                        // a warp's scales past 2 KiB (98 spans over 8 warps, 160 bytes of f32 scales
                        // and zero points a span): staged with each span, not once per item
                        Case{"int8-g32-f32-zp", 8, 12448},
                        // groups of 16 (two scales a sub-block), and the expansions of GGUF's Q6_K,
                        // Q4_K and Q5_K (f32 scales per sub-block; plans held them until sub-scales)
                        Case{"int8-g16-f32-sym", 20, 96}, Case{"int8-g16-f32-sym", 12, 1056},
                        Case{"int4-g32-f32-min", 16, 512}, Case{"int8-g32-f32-min", 9, 256},
                        // GGUF's IQ4_NL and IQ4_XS (nl codes: grid values by byte permutes), nl in bf16
                        Case{"int4-g32-f16-nl", 20, 96}, Case{"int4-g32-f32-nl", 12, 1056},
                        Case{"int4-g128-bf16-nl", 8, 640},
                        // a group of 256 over two spans, zero point 127 (GGUF's Q3_K as held before)
                        Case{"int8-g256-f16-zp", 16, 768},
                        // int4 sub-blocks of 16 (GGUF's Q3_K as held: a code per k-step), bf16
                        Case{"int4-g256s16-f16-sym", 16, 768}, Case{"int4-g64s16-bf16-sym", 9, 320},
                        Case{"int4-g256s16-f16-min", 16, 768}, Case{"int4-g64s16-bf16-min", 9, 320},
                        Case{"int8-g16-f32-min", 12, 1056}, Case{"int8-g64s16-f16-min", 9, 192},
                        // sub-scales as GGUF's Q4_K, Q6_K (a code per 16: two a sub-block), IQ4_XS
                        // hold them: a header of 256 over two spans, d * sc_j per sub-block
                        Case{"int4-g256s32-f16-min", 20, 512}, Case{"int8-g256s16-f16-sym", 12, 768},
                        Case{"int4-g256s32-f16-nl", 16, 1024}, Case{"int8-g256s32-f16-min", 8, 256},
                        // headers of 64 (two a span, the last span short), of 192 (a span over two
                        // headers), bf16
                        Case{"int4-g64s32-bf16-min", 9, 320}, Case{"int4-g192s32-f16-min", 8, 576},
                        Case{"int4-g64s32-bf16-sym", 12, 192},
                        // a warp's scales past 2 KiB (88 spans over 8 warps, 192 bytes a span)
                        Case{"int4-g256s32-f16-min", 8, 11264},
                        // int5 codes as GGUF's Q5_0, Q5_1 and Q5_K hold them (a span's fifth bits after
                        // its nibbles; short last spans of 1 to 3 sub-blocks), zero points, bf16
                        Case{"int5-g32-f16-sym", 20, 96}, Case{"int5-g32-f16-min", 12, 576},
                        Case{"int5-g256s32-f16-min", 16, 512}, Case{"int5-g64-bf16-zp", 9, 320},
                        Case{"int5-g32-f16-sym", 8, 32}, Case{"int5-g32-f16-min", 9, 1056}}) {
    llmc::LinearParams p;
    p.n = c.n;
    p.k = c.k;
    p.weight = c.format;
    Weight w = quantizedWeight(c.format, c.n, c.k, 11);
    checkLinear(p, w, 6);
  }
}


TEST(QuantizeQ8Kernel, QuantizesAsTheCpuFastContractBitForBit) {
  // Codes, scales and sums equal the CPU's (quantize_activations_scalar) in every byte, rows
  // gathered or not; blocks of zeros (scale 0), ties of the rounding (x / d = 2.5, -3.5: to
  // even), widths ending in a short span (96, 160) and many spans (1056); one block and the
  // rule's grid write the same bytes, nothing else of the row.
  using QuantFn = void (*)(const float *, const int *, unsigned char *, int, unsigned);
  for (const int k : {32, 96, 160, 1056}) {
    for (const bool gather : {false, true}) {
      SCOPED_TRACE("k=" + std::to_string(k) + (gather ? " gather" : ""));
      auto spec = llmc::emitQuantizeQ8Kernel(k, gather);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      EXPECT_EQ(spec->family, "quantize_q8");
      HostKernel kernel(*spec, "const float *x, const int *rows, unsigned char *out, int T", "x, rows, out, T");
      ASSERT_TRUE(kernel.ok()) << kernel.error();
      const int T = 3, xrows = gather ? 5 : T;
      std::vector<float> x = randomVector(size_t(xrows) * k, 91, -3.0f, 3.0f);
      for (int i = 0; i < 32; ++i) { // block 0 of row 1: zeros; the last block of row 0: ties
        x[size_t(k) + i] = 0.0f;
        x[size_t(k) - 32 + i] = i == 0 ? 127.0f : i == 1 ? 2.5f : i == 2 ? -3.5f : float(i % 7) - 3.0f;
      }
      std::vector<int> rows = {4, 0, 2};
      const size_t rb = size_t(llmc::q8RowBytes(k));
      std::vector<uint8_t> out(size_t(T) * rb, 0xEE);
      kernel.get<QuantFn>()(x.data(), gather ? rows.data() : nullptr, out.data(), T, gridFor(*spec, T));
      for (int t = 0; t < T; ++t) {
        const Q8Row want = cpuQuantize(&x[size_t(gather ? rows[t] : t) * k], k);
        const std::vector<uint8_t> packed = packQ8Row(want, k);
        EXPECT_EQ(std::vector<uint8_t>(out.begin() + long(t * rb), out.begin() + long((t + 1) * rb)), packed)
            << "row " << t;
      }
      if (!gather) {
        const Q8Row ties = cpuQuantize(&x[0], k);
        EXPECT_EQ(ties.q[size_t(k) - 31], 2); // 2.5 -> 2, -3.5 -> -4: the CPU's lrint
        EXPECT_EQ(ties.q[size_t(k) - 30], -4);
      }
      std::vector<uint8_t> one(out.size(), 0xEE);
      kernel.get<QuantFn>()(x.data(), gather ? rows.data() : nullptr, one.data(), T, 1);
      EXPECT_EQ(one, out);
    }
  }
  EXPECT_FALSE(llmc::emitQuantizeQ8Kernel(100, false).ok());
  EXPECT_FALSE(llmc::emitQuantizeQ8Kernel(0, false).ok());
}

TEST(QuantizeQ8Kernel, ProducersWriteTheRowsOfTheirOutputBitForBit) {
  // rms_norm, add_rms_norm, silu_mul (both forms) and permute_columns with quantizedOutput: the same f32 output
  // as without, and q8 rows equal to the CPU's quantization of that output in every byte (so to
  // quantize_q8's); widths with a short last span (96, 160, 352), rows of several chunks and
  // warps past the row's end (1056: rms_norm's last thread pass holds one warp of it, silu_mul's
  // second chunk 32 values); the rule's grid and one block; a null q8 pointer writes none.
  const int T = 3;
  auto checkRows = [&](const std::vector<float> &out, const std::vector<uint8_t> &q8, int k) {
    const size_t rb = size_t(llmc::q8RowBytes(k));
    for (int t = 0; t < T; ++t)
      EXPECT_EQ(std::vector<uint8_t>(q8.begin() + long(t * rb), q8.begin() + long((t + 1) * rb)),
                packQ8Row(cpuQuantize(&out[size_t(t) * k], k), k))
          << "row " << t;
  };
  for (const int d : {96, 160, 1056}) {
    SCOPED_TRACE("rms_norm width " + std::to_string(d));
    const llmc::RmsNormParams plain{d, d, 1e-5f}, fused{d, d, 1e-5f, true};
    const std::vector<float> x = randomVector(size_t(T) * d, 31), r = randomVector(size_t(T) * d, 32),
                             w = randomVector(size_t(d), 33, 0.5f, 1.5f);
    const size_t rb = size_t(llmc::q8RowBytes(d));
    {
      using Fn = void (*)(const float *, const float *, float *, unsigned char *, int, unsigned);
      using PlainFn = void (*)(const float *, const float *, float *, int, unsigned);
      auto a = llmc::emitRmsNormKernel(plain), b = llmc::emitRmsNormKernel(fused);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_NE(b->entry.find("_q8_"), std::string::npos) << b->entry;
      HostKernel ka(*a, "const float *x, const float *w, float *out, int T", "x, w, out, T");
      HostKernel kb(*b, "const float *x, const float *w, float *out, unsigned char *q8, int T", "x, w, out, q8, T");
      ASSERT_TRUE(ka.ok() && kb.ok()) << ka.error() << kb.error();
      std::vector<float> want(x.size(), NAN), out(x.size(), NAN), out1(x.size(), NAN);
      ka.get<PlainFn>()(x.data(), w.data(), want.data(), T, gridFor(*a, T));
      std::vector<uint8_t> q8(size_t(T) * rb, 0xEE), q81(q8.size(), 0xEE);
      kb.get<Fn>()(x.data(), w.data(), out.data(), q8.data(), T, gridFor(*b, T));
      EXPECT_TRUE(bitEqual(out, want));
      checkRows(out, q8, d);
      kb.get<Fn>()(x.data(), w.data(), out1.data(), q81.data(), T, 1);
      EXPECT_EQ(q81, q8);
      std::vector<float> none(x.size(), NAN);
      kb.get<Fn>()(x.data(), w.data(), none.data(), nullptr, T, gridFor(*b, T));
      EXPECT_TRUE(bitEqual(none, want));
    }
    {
      SCOPED_TRACE("add_rms_norm");
      using Fn = void (*)(const float *, const float *, const float *, float *, float *, unsigned char *, int,
                          unsigned);
      auto b = llmc::emitAddRmsNormKernel(fused);
      ASSERT_TRUE(b.ok());
      HostKernel kb(*b, "const float *x, const float *residual, const float *w, float *normed, float *sum, "
                        "unsigned char *q8, int T",
                    "x, residual, w, normed, sum, q8, T");
      ASSERT_TRUE(kb.ok()) << kb.error();
      std::vector<float> normed(x.size(), NAN), sum(x.size(), NAN), want(x.size(), NAN);
      std::vector<uint8_t> q8(size_t(T) * rb, 0xEE);
      kb.get<Fn>()(x.data(), r.data(), w.data(), normed.data(), sum.data(), q8.data(), T, gridFor(*b, T));
      // The normed rows are rms_norm's of the sum (same operations), the q8 rows theirs.
      auto a = llmc::emitRmsNormKernel(plain);
      HostKernel ka(*a, "const float *x, const float *w, float *out, int T", "x, w, out, T");
      ASSERT_TRUE(ka.ok()) << ka.error();
      ka.get<void (*)(const float *, const float *, float *, int, unsigned)>()(sum.data(), w.data(), want.data(), T,
                                                                              gridFor(*a, T));
      EXPECT_TRUE(bitEqual(normed, want));
      checkRows(normed, q8, d);
    }
  }
  for (const int inter : {96, 352, 1056}) {
    for (const bool gateUp : {false, true}) {
      SCOPED_TRACE("silu_mul inter " + std::to_string(inter) + (gateUp ? " fused gate_up" : ""));
      const std::vector<float> g = randomVector(size_t(T) * inter, 34, -6.0f, 6.0f),
                               u = randomVector(size_t(T) * inter, 35);
      std::vector<float> gu(size_t(T) * 2 * inter);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < inter; ++j) {
          gu[size_t(t) * 2 * inter + size_t(j)] = g[size_t(t) * inter + size_t(j)];
          gu[size_t(t) * 2 * inter + size_t(inter + j)] = u[size_t(t) * inter + size_t(j)];
        }
      auto a = llmc::emitSiluMulKernel({inter, gateUp}), b = llmc::emitSiluMulKernel({inter, gateUp, true});
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->gridRule, b->gridRule);
      const std::string in = gateUp ? "const float *gate_up" : "const float *gate, const float *up";
      const std::string args = gateUp ? "gate_up" : "gate, up";
      HostKernel ka(*a, in + ", float *out, int T", args + ", out, T");
      HostKernel kb(*b, in + ", float *out, unsigned char *q8, int T", args + ", out, q8, T");
      ASSERT_TRUE(ka.ok() && kb.ok()) << ka.error() << kb.error();
      const size_t rb = size_t(llmc::q8RowBytes(inter));
      std::vector<float> want(size_t(T) * inter, NAN), out(want.size(), NAN), none(want.size(), NAN);
      for (const unsigned grid : {unsigned(gridFor(*b, T)), 1u}) {
        std::vector<uint8_t> q8(size_t(T) * rb, 0xEE);
        if (gateUp) {
          ka.get<void (*)(const float *, float *, int, unsigned)>()(gu.data(), want.data(), T, grid);
          kb.get<void (*)(const float *, float *, unsigned char *, int, unsigned)>()(gu.data(), out.data(), q8.data(),
                                                                                      T, grid);
          kb.get<void (*)(const float *, float *, unsigned char *, int, unsigned)>()(gu.data(), none.data(), nullptr,
                                                                                      T, grid);
        } else {
          using Fn = void (*)(const float *, const float *, float *, unsigned char *, int, unsigned);
          ka.get<void (*)(const float *, const float *, float *, int, unsigned)>()(g.data(), u.data(), want.data(), T,
                                                                                  grid);
          kb.get<Fn>()(g.data(), u.data(), out.data(), q8.data(), T, grid);
          kb.get<Fn>()(g.data(), u.data(), none.data(), nullptr, T, grid);
        }
        EXPECT_TRUE(bitEqual(out, want)) << "grid " << grid;
        EXPECT_TRUE(bitEqual(none, want)) << "grid " << grid;
        checkRows(out, q8, inter);
      }
    }
  }
  for (const int d : {96, 1056}) {
    SCOPED_TRACE("permute_columns width " + std::to_string(d));
    auto a = llmc::emitPermuteColumnsKernel(d), b = llmc::emitPermuteColumnsKernel(d, true);
    ASSERT_TRUE(a.ok() && b.ok());
    HostKernel ka(*a, "const float *x, const int *perm, float *out, int T", "x, perm, out, T");
    HostKernel kb(*b, "const float *x, const int *perm, float *out, unsigned char *q8, int T", "x, perm, out, q8, T");
    ASSERT_TRUE(ka.ok() && kb.ok()) << ka.error() << kb.error();
    const std::vector<float> x = randomVector(size_t(T) * d, 36);
    std::vector<int> perm(static_cast<size_t>(d));
    for (int j = 0; j < d; ++j)
      perm[size_t(j)] = (j * 37 + 5) % d; // (37 is prime to 96 and 1056)
    std::vector<float> want(x.size(), NAN), out(x.size(), NAN);
    std::vector<uint8_t> q8(size_t(T) * size_t(llmc::q8RowBytes(d)), 0xEE);
    using Fn = void (*)(const float *, const int *, float *, unsigned char *, int, unsigned);
    ka.get<void (*)(const float *, const int *, float *, int, unsigned)>()(x.data(), perm.data(), want.data(), T, 2);
    kb.get<Fn>()(x.data(), perm.data(), out.data(), q8.data(), T, 2);
    EXPECT_TRUE(bitEqual(out, want));
    checkRows(out, q8, d);
  }
  // Int8 rows need whole blocks of 32 and, for rms_norm, one group over the row.
  EXPECT_FALSE(llmc::emitRmsNormKernel({100, 100, 1e-5f, true}).ok());
  EXPECT_FALSE(llmc::emitRmsNormKernel({96, 32, 1e-5f, true}).ok());
  EXPECT_FALSE(llmc::emitSiluMulKernel({100, false, true}).ok());
  EXPECT_FALSE(llmc::emitPermuteColumnsKernel(100, true).ok());
}

TEST(LinearKernel, Int8ActivationGemvComputesTheFastContract) {
  // The CUDA-core GEMV over quantize_q8's rows: y = sum over k of w_k * d_b * q_k (w_k the exact
  // dequantized weight, d_b q_k the CPU's int8 activation), which is the fast contract's sum of
  // d_w d_x (integer block sums) + offsets. Every format (signed sym int8, unsigned nibbles and
  // bytes with zero points or minimums), groups of 32 to whole rows, short last spans, partial
  // tiles, 1-4 tokens per item and a second chunk (T = 6), bias; the f32-activation kernel of
  // the same step differs by the activations' rounding only.
  struct Case {
    const char *format;
    int n, k, T;
    bool bias;
  };
  for (const Case &c : {Case{"int4-g32-f16-sym", 20, 96, 6, false}, Case{"int4-g32-f16-min", 16, 160, 1, true},
                        Case{"int8-g32-f16-sym", 20, 96, 3, false}, Case{"int4-g128-bf16-zp", 12, 256, 6, false},
                        Case{"int8-g64-f32-zp", 9, 192, 2, true}, Case{"int8-row-bf16-min", 8, 224, 4, false},
                        Case{"int4-row-f32-sym", 7, 64, 5, false}, Case{"int4-g128-f16-min", 16, 640, 1, false},
                        Case{"int4-g64-f16-zp", 9, 320, 6, false}, Case{"int8-g128-bf16-sym", 8, 512, 6, false},
                        Case{"int4-g32-f16-min", 20, 1056, 2, false}, Case{"int4-g32-f16-min", 96, 32, 6, false},
                        Case{"int4-g32-f16-zp", 64, 64, 5, true},
                        // scales staged with each span (see QuantizedFormatsInTheMmaLayout)
                        Case{"int8-g32-f32-zp", 8, 12448, 2, false},
                        // groups of 16: a sub-block's two k-steps summed apart; Q4_K / Q5_K expanded
                        Case{"int8-g16-f32-sym", 20, 96, 6, true}, Case{"int8-g16-f32-sym", 12, 1056, 2, false},
                        Case{"int4-g32-f32-min", 16, 512, 3, false}, Case{"int8-g32-f32-min", 9, 256, 5, true},
                        // nl codes (IQ4_NL, IQ4_XS): signed grid values into dp4a, no offset term
                        Case{"int4-g32-f16-nl", 20, 96, 6, true}, Case{"int4-g32-f32-nl", 12, 1056, 2, false},
                        Case{"int4-g128-bf16-nl", 16, 640, 1, false}, Case{"int8-g256-f16-zp", 16, 768, 3, true},
                        // sub-scales (Q4_K, Q6_K, IQ4_XS as held; headers of 64 and 192; past 2 KiB
                        // of a warp's scales): the offset term takes sub-block q's dmin * mc_q
                        Case{"int4-g256s32-f16-min", 20, 512, 6, true}, Case{"int8-g256s16-f16-sym", 12, 768, 2, false},
                        Case{"int4-g256s32-f16-nl", 16, 1024, 3, false}, Case{"int4-g64s32-bf16-min", 9, 320, 5, false},
                        Case{"int4-g192s32-f16-min", 8, 576, 1, true}, Case{"int8-g256s32-f16-min", 8, 256, 4, false},
                        Case{"int4-g256s32-f16-min", 8, 11264, 2, false},
                        // int4 sub-blocks of 16 (Q3_K as held): codes q - 8 signed, no offset term
                        Case{"int4-g256s16-f16-sym", 16, 768, 3, true}, Case{"int4-g64s16-bf16-sym", 9, 320, 5, false},
                        Case{"int4-g256s16-f16-min", 16, 768, 3, true}, Case{"int4-g64s16-bf16-min", 9, 320, 5, false},
                        Case{"int8-g16-f32-min", 20, 96, 6, true}, Case{"int8-g64s16-f16-min", 12, 192, 2, false},
                        // int5 (Q5_0, Q5_1, Q5_K): codes with their fifth bits into dp4a, the sym
                        // offset -16 d
                        Case{"int5-g32-f16-sym", 20, 96, 6, true}, Case{"int5-g32-f16-min", 12, 576, 3, false},
                        Case{"int5-g256s32-f16-min", 16, 512, 2, false}, Case{"int5-g64-bf16-zp", 9, 320, 5, true},
                        Case{"int5-g32-f16-sym", 8, 1056, 1, false}}) {
    SCOPED_TRACE(std::string(c.format) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                 " T=" + std::to_string(c.T));
    llmc::LinearParams p;
    p.n = c.n;
    p.k = c.k;
    p.weight = c.format;
    p.bias = c.bias;
    p.int8Activations = true;
    auto spec = llmc::emitLinearKernel(p);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_NE(spec->entry.find("_q8a_"), std::string::npos) << spec->entry;
    HostKernel kernel(*spec, kParams, kArgs);
    ASSERT_TRUE(kernel.ok()) << kernel.error();
    const Weight w = quantizedWeight(c.format, c.n, c.k, 17);
    const std::vector<float> x = randomVector(size_t(c.T) * c.k, 93);
    const std::vector<float> bias = randomVector(size_t(c.n), 94);
    const size_t rb = size_t(llmc::q8RowBytes(c.k));
    std::vector<uint8_t> xq(size_t(c.T) * rb);
    std::vector<Q8Row> q8;
    for (int t = 0; t < c.T; ++t) {
      q8.push_back(cpuQuantize(&x[size_t(t) * c.k], c.k));
      const std::vector<uint8_t> row = packQ8Row(q8.back(), c.k);
      std::copy(row.begin(), row.end(), xq.begin() + long(t * rb));
    }
    auto run = kernel.get<LinearFn>();
    std::vector<float> y(size_t(c.T) * c.n, NAN);
    run(reinterpret_cast<const float *>(xq.data()), w.bytes.data(), c.bias ? bias.data() : nullptr, nullptr,
        y.data(), c.T, gridFor(*spec, c.T));
    size_t bad = 0;
    std::vector<double> mags(y.size()); // sum of |w x| and |bias|: the scale of rounding errors
    for (int t = 0; t < c.T; ++t)
      for (int o = 0; o < c.n; ++o) {
        double want = c.bias ? bias[size_t(o)] : 0.0, mag = std::fabs(want);
        for (int e = 0; e < c.k; ++e) {
          const double xe = double(q8[size_t(t)].d[size_t(e / 32)]) * q8[size_t(t)].q[size_t(e)];
          want += double(w.values[size_t(o) * c.k + e]) * xe;
          mag += std::fabs(double(w.values[size_t(o) * c.k + e]) * xe);
        }
        mags[size_t(t) * c.n + o] = mag;
        const double got = y[size_t(t) * c.n + o];
        if (!(std::fabs(got - want) <= 1e-5 * mag + 1e-6) && ++bad <= 5)
          ADD_FAILURE() << "y[" << t << ", " << o << "] = " << got << ", want " << want;
      }
    EXPECT_EQ(bad, 0u);
    // The CPU backend's own fast-contract kernel on the same packed weight: the same sums in
    // another order (whose rounding scales with the sum of magnitudes: 11264 terms cancel).
    {
      llmrt::cpu::QuantMatrix m;
      m.data = w.bytes.data();
      m.format = quant::parse_format(c.format).value();
      m.n = c.n;
      m.k = c.k;
      m.row_bytes = quant::row_bytes(m.format, c.k).value();
      m.layout = quant::Layout::kCudaMma8;
      llmrt::cpu::QuantScratch scratch;
      scratch.ensure(c.T, c.k, 1);
      llmrt::ThreadPool pool(1);
      std::vector<float> cpu(y.size(), NAN);
      llmrt::cpu::linear_q(x.data(), nullptr, c.T, m, c.bias ? bias.data() : nullptr, cpu.data(),
                           llmrt::cpu::CpuContract::kFast, scratch, pool);
      size_t off = 0;
      for (size_t i = 0; i < y.size(); ++i)
        if (!(std::fabs(double(y[i]) - cpu[i]) <= 1e-5 * std::max(1.0, mags[i])) && ++off <= 5)
          ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", the CPU's fast contract " << cpu[i];
      EXPECT_EQ(off, 0u);
    }
    std::vector<float> y1(y.size(), NAN); // one block, grid-stride: the same bits
    run(reinterpret_cast<const float *>(xq.data()), w.bytes.data(), c.bias ? bias.data() : nullptr, nullptr,
        y1.data(), c.T, 1);
    EXPECT_TRUE(bitEqual(y, y1));
  }
  // Dense weights and the tensor-core tiles have no int8-activation kernel.
  llmc::LinearParams p;
  p.n = 8;
  p.k = 64;
  p.int8Activations = true;
  EXPECT_FALSE(llmc::emitLinearKernel(p).ok());
  p.weight = "int4-g32-f16-sym";
  p.tensorCores = true;
  EXPECT_FALSE(llmc::emitLinearKernel(p).ok());
}

TEST(DequantBf16Kernel, WritesEachWeightAsItsExactValueRoundedToBf16) {
  // The GEMM library's operand for quantized weights: every element of the matrix is the exact
  // dequantized value (quant::dequantize_row) rounded to nearest even bf16, in every format;
  // partial tiles (n % 8), short last spans (k % 128) and many spans; the grid the rule gives and
  // a single block (grid-stride) write the same bits, and nothing past the matrix.
  using DequantFn = void (*)(const unsigned char *, unsigned short *, int, unsigned);
  struct Case {
    const char *format;
    int n, k;
  };
  for (const Case &c : {Case{"int4-g32-f16-sym", 20, 96}, Case{"int4-g32-f16-min", 16, 160},
                        Case{"int8-g32-f16-sym", 20, 96}, Case{"int4-g128-bf16-zp", 12, 256},
                        Case{"int8-g64-f32-zp", 9, 192}, Case{"int8-row-bf16-min", 8, 224},
                        Case{"int4-row-f32-sym", 7, 64}, Case{"int4-g128-f16-sym", 24, 1152},
                        Case{"int4-g64-f16-zp", 9, 320}, Case{"int8-g16-f32-sym", 20, 96},
                        Case{"int8-g16-f16-sym", 9, 1056}, Case{"int4-g32-f32-min", 16, 256},
                        Case{"int4-g32-f16-nl", 20, 96}, Case{"int4-g64-f32-nl", 9, 320},
                        Case{"int4-g256s32-f16-min", 12, 512}, Case{"int8-g256s16-f16-sym", 9, 256},
                        Case{"int4-g192s32-f16-nl", 8, 576}, Case{"int4-g64s32-bf16-min", 9, 320},
                        Case{"int4-g256s16-f16-sym", 9, 256}, Case{"int4-g64s16-bf16-sym", 9, 320},
                        Case{"int4-g256s16-f16-min", 9, 256}, Case{"int8-g16-f16-min", 9, 160},
                        Case{"int5-g32-f16-sym", 20, 96}, Case{"int5-g32-f16-min", 9, 320},
                        Case{"int5-g256s32-f16-min", 12, 512}, Case{"int5-g64-bf16-zp", 9, 192}}) {
    SCOPED_TRACE(std::string(c.format) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
    auto spec = llmc::emitDequantBf16Kernel(c.format, c.n, c.k);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->family, "dequant_bf16");
    HostKernel kernel(*spec, "const unsigned char *w, unsigned short *out, int T", "w, out, T");
    ASSERT_TRUE(kernel.ok()) << kernel.error();
    auto run = kernel.get<DequantFn>();
    const Weight w = quantizedWeight(c.format, c.n, c.k, 13);
    const size_t elems = size_t(c.n) * c.k, guard = 64;
    std::vector<uint16_t> out(elems + guard, 0xDEAD);
    run(w.bytes.data(), out.data(), c.n, gridFor(*spec, c.n));
    size_t bad = 0;
    for (size_t i = 0; i < elems; ++i)
      if (out[i] != quant::float_to_bf16(w.values[i]) && ++bad <= 5)
        ADD_FAILURE() << "element (" << i / c.k << ", " << i % c.k << ") = 0x" << std::hex << out[i] << ", want 0x"
                      << quant::float_to_bf16(w.values[i]) << std::dec << " (" << w.values[i] << ")";
    EXPECT_EQ(bad, 0u);
    for (size_t i = elems; i < out.size(); ++i)
      ASSERT_EQ(out[i], 0xDEAD) << "written past the matrix at " << i;
    std::vector<uint16_t> one(elems + guard, 0xDEAD);
    run(w.bytes.data(), one.data(), c.n, 1);
    EXPECT_EQ(one, out);
  }
  // Dense weights have no dequantization; shapes past the limits are refused.
  EXPECT_FALSE(llmc::emitDequantBf16Kernel("bf16", 8, 64).ok());
  EXPECT_FALSE(llmc::emitDequantBf16Kernel("int4-g32-f16-sym", 0, 64).ok());
  EXPECT_FALSE(llmc::emitDequantBf16Kernel("int4-g32-f16-sym", 8, 0).ok());
}

TEST(LinearKernel, DenseWeightsBiasAndGatheredRows) {
  for (const char *type : {"f32", "f16", "bf16"}) {
    llmc::LinearParams p;
    p.n = 13;
    p.k = 70;
    p.weight = type;
    Weight w = denseWeight(type, 13, 70, 21);
    checkLinear(p, w, 5);
    p.bias = true;
    checkLinear(p, w, 1);
  }
  // Widths whose rows split into 16-byte loads (8 half weights per lane and load), the last pass
  // of the warp only partly filled: 136 = 17 x 8; f32 weights (one per load) at 520.
  for (const char *type : {"f16", "bf16"}) {
    llmc::LinearParams p;
    p.n = 9;
    p.k = 136;
    p.weight = type;
    checkLinear(p, denseWeight(type, 9, 136, 23), 6);
  }
  {
    llmc::LinearParams p;
    p.n = 5;
    p.k = 520;
    p.weight = "f32";
    checkLinear(p, denseWeight("f32", 5, 520, 24), 4);
  }
  // Logits: rows gathered, quantized and dense.
  llmc::LinearParams p;
  p.gatherRows = true;
  p.n = 24;
  p.k = 128;
  p.weight = "int4-g32-f16-min";
  checkLinear(p, quantizedWeight(p.weight, 24, 128, 31), 3);
  p.weight = "bf16";
  checkLinear(p, denseWeight("bf16", 24, 128, 32), 5);
}

using EmbeddingFn = void (*)(const int *, const unsigned char *, float *, int, unsigned);

/// Gathers rows of a [V, D] table of `storage` (ids in and out of range, repeated) and checks
/// every value bit for bit against the CPU's dequantization; one block must give the same.
void checkEmbedding(const std::string &storage, int V, int D) {
  SCOPED_TRACE(storage + " V=" + std::to_string(V) + " D=" + std::to_string(D));
  auto spec = llmc::emitEmbeddingKernel({V, D, storage});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  HostKernel k(*spec, "const int *tokens, const unsigned char *table, float *out, int T",
               "tokens, table, out, T");
  ASSERT_TRUE(k.ok()) << k.error();
  const bool dense = storage == "f32" || storage == "f16" || storage == "bf16";
  Weight table = dense ? denseWeight(storage, V, D, 9) : quantizedWeight(storage, V, D, 9);
  std::vector<int> tokens = {3, 0, V - 1, -1, V, 3, V / 2, 7 % V};
  const int T = int(tokens.size());
  std::vector<float> out(size_t(T) * D, NAN);
  k.get<EmbeddingFn>()(tokens.data(), table.bytes.data(), out.data(), T, gridFor(*spec, T));
  size_t bad = 0;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < D; ++j) {
      const int id = tokens[t];
      const float want = (id >= 0 && id < V) ? table.values[size_t(id) * D + j] : 0.0f;
      if (std::memcmp(&out[size_t(t) * D + j], &want, 4) != 0 && ++bad <= 5)
        ADD_FAILURE() << "row " << t << " (id " << id << ") col " << j << ": " << out[size_t(t) * D + j]
                      << ", want " << want;
    }
  EXPECT_EQ(bad, 0u);
  std::vector<float> one(out.size(), NAN);
  k.get<EmbeddingFn>()(tokens.data(), table.bytes.data(), one.data(), T, 1);
  EXPECT_TRUE(bitEqual(out, one));
}

TEST(EmbeddingKernel, EveryStorageReadsAsTheCpuDequantizesIt) {
  for (const char *type : {"f32", "f16", "bf16"})
    checkEmbedding(type, 10, 40);
  // GGUF Q8_0 / Q4_1 / Q4_0 tables and other formats; vocab in a partial tile, rows ending in a
  // short span (D = 160: 128 + 32; 96: 3 sub-blocks).
  struct Case {
    const char *format;
    int V, D;
  };
  for (const Case &c : {Case{"int8-g32-f16-sym", 21, 160}, Case{"int4-g32-f16-min", 13, 96},
                        Case{"int4-g32-f16-sym", 9, 64}, Case{"int4-g128-bf16-zp", 16, 256},
                        Case{"int8-g64-f32-zp", 11, 192}, Case{"int8-row-bf16-min", 8, 224},
                        Case{"int4-row-f32-sym", 7, 96}, Case{"int8-g16-f32-sym", 13, 160},
                        Case{"int4-g32-f32-min", 9, 256}, Case{"int4-g32-f16-nl", 11, 96},
                        Case{"int4-g64-f32-nl", 9, 192}, Case{"int4-g256s32-f16-min", 11, 512},
                        Case{"int8-g256s16-f16-sym", 9, 256}, Case{"int4-g256s32-f16-nl", 7, 256},
                        Case{"int4-g64s32-bf16-min", 9, 192}, Case{"int5-g32-f16-sym", 13, 160},
                        Case{"int5-g32-f16-min", 9, 96}, Case{"int5-g256s32-f16-min", 7, 256},
                        Case{"int5-g64-bf16-zp", 9, 192}, Case{"int4-g256s16-f16-sym", 9, 256},
                        Case{"int4-g256s16-f16-min", 9, 256}, Case{"int8-g16-f32-min", 9, 96}})
    checkEmbedding(c.format, c.V, c.D);
  EXPECT_FALSE(llmc::emitEmbeddingKernel({0, 8}).ok());
  EXPECT_FALSE(llmc::emitEmbeddingKernel({8, 100, "int4-g32-f16-sym"}).ok()); // 100 % 32 != 0
  EXPECT_FALSE(llmc::emitEmbeddingKernel({8, 64, "q4_k"}).ok());
}

TEST(LinearKernel, SiluEpilogueIsTheGemvThenSiluMul) {
  // The quantized GEMV of a fused gate|up projection with the SiLU-mul epilogue (LinearParams::
  // siluInter) writes h = silu(gate) * up and its int8 rows instead of y. Where the plain GEMV has
  // one warp per tile (many tiles, as Llama's gate|up: 3584), it is bit for bit that GEMV followed
  // by the silu_mul kernel (h and the int8 rows); elsewhere y's sums differ by their order only.
  // f32 and int8 activations, groups of 32 and 128, zero points, bias, 1-4 tokens per item and a
  // second chunk (T = 6), one block for everything, a null q8.
  struct Case {
    const char *format;
    int inter, k, T;
    bool bias, int8;
  };
  // The epilogue's kernel: the GEMV's parameters and the int8 rows of h after y (= h).
  constexpr const char *kSiluParams = "const float *x, const unsigned char *w, const float *bias, const int *rows, "
                                      "float *y, unsigned char *q8, int T";
  constexpr const char *kSiluArgs = "x, w, bias, rows, y, q8, T";
  using SiluFn = void (*)(const float *, const unsigned char *, const float *, const int *, float *,
                          unsigned char *, int, unsigned);
  using SiluMulFn = void (*)(const float *, float *, unsigned char *, int, unsigned);
  for (const Case &c : {Case{"int4-g128-f16-min", 8224, 128, 6, false, true}, Case{"int4-g32-f16-zp", 8224, 96, 3, true, false},
                        Case{"int8-g32-f16-sym", 64, 160, 6, false, true}, Case{"int4-g128-bf16-zp", 96, 256, 1, true, true},
                        Case{"int4-g64-f16-min", 32, 320, 5, false, false},
                        Case{"int8-g16-f32-sym", 64, 160, 6, true, true}, Case{"int8-g16-f32-sym", 32, 96, 3, false, false},
                        Case{"int4-g32-f32-nl", 64, 256, 2, true, true},
                        Case{"int4-g256s32-f16-min", 64, 512, 3, false, true},
                        Case{"int8-g256s16-f16-sym", 32, 256, 2, true, false},
                        Case{"int4-g256s16-f16-sym", 32, 256, 2, true, false},
                        Case{"int4-g64s16-bf16-sym", 32, 320, 3, false, true},
                        Case{"int4-g256s16-f16-min", 32, 256, 2, true, true},
                        Case{"int8-g16-f32-min", 32, 96, 3, false, false},
                        Case{"int5-g32-f16-sym", 64, 160, 3, false, true},
                        Case{"int5-g256s32-f16-min", 32, 256, 2, true, false}}) {
    SCOPED_TRACE(std::string(c.format) + " inter=" + std::to_string(c.inter) + " k=" + std::to_string(c.k) +
                 " T=" + std::to_string(c.T) + (c.int8 ? " int8" : " f32"));
    const int n = 2 * c.inter;
    llmc::LinearParams p;
    p.n = n;
    p.k = c.k;
    p.weight = c.format;
    p.bias = c.bias;
    p.int8Activations = c.int8;
    auto plain = llmc::emitLinearKernel(p);
    p.siluInter = c.inter;
    auto fused = llmc::emitLinearKernel(p);
    auto silu = llmc::emitSiluMulKernel({c.inter, true, true});
    ASSERT_TRUE(plain.ok() && fused.ok() && silu.ok()) << fused.status().to_string();
    EXPECT_NE(fused->entry.find("_silu"), std::string::npos) << fused->entry;
    EXPECT_EQ(fused->gridRule, "rows/4*" + std::to_string(c.inter / 32));
    const bool oneWarpPerTile = plain->source.find("constexpr int kWarps = 1;") != std::string::npos;
    HostKernel kp(*plain, kParams, kArgs);
    HostKernel kf(*fused, kSiluParams, kSiluArgs);
    HostKernel ks(*silu, "const float *gate_up, float *out, unsigned char *q8, int T", "gate_up, out, q8, T");
    ASSERT_TRUE(kp.ok() && kf.ok() && ks.ok()) << kp.error() << kf.error() << ks.error();
    const Weight w = quantizedWeight(c.format, n, c.k, 23);
    const std::vector<float> x = randomVector(size_t(c.T) * c.k, 95), bias = randomVector(size_t(n), 96);
    const size_t hb = size_t(llmc::q8RowBytes(c.inter));
    const std::vector<uint8_t> xq = packedQ8Rows(x, c.T, c.k);
    const float *xin = c.int8 ? reinterpret_cast<const float *>(xq.data()) : x.data();
    const float *b = c.bias ? bias.data() : nullptr;
    // The two-kernel sequence: the plain GEMV's y, then silu_mul (h and its int8 rows).
    std::vector<float> y(size_t(c.T) * n, NAN), want(size_t(c.T) * c.inter, NAN);
    std::vector<uint8_t> wantQ8(size_t(c.T) * hb, 0xEE);
    kp.get<LinearFn>()(xin, w.bytes.data(), b, nullptr, y.data(), c.T, gridFor(*plain, c.T));
    ks.get<SiluMulFn>()(y.data(), want.data(), wantQ8.data(), c.T, gridFor(*silu, c.T));
    for (const unsigned grid : {unsigned(gridFor(*fused, c.T)), 1u}) {
      std::vector<float> h(want.size(), NAN), h2(want.size(), NAN);
      std::vector<uint8_t> q8(wantQ8.size(), 0xEE);
      kf.get<SiluFn>()(xin, w.bytes.data(), b, nullptr, h.data(), q8.data(), c.T, grid);
      kf.get<SiluFn>()(xin, w.bytes.data(), b, nullptr, h2.data(), nullptr, c.T, grid);
      EXPECT_TRUE(bitEqual(h, h2)) << "grid " << grid;
      // h's int8 rows are quantize_q8's (the CPU's quantization, bit for bit) of h.
      for (int t = 0; t < c.T; ++t)
        EXPECT_EQ(std::vector<uint8_t>(q8.begin() + long(t * hb), q8.begin() + long((t + 1) * hb)),
                  packQ8Row(cpuQuantize(&h[size_t(t) * c.inter], c.inter), c.inter))
            << "row " << t << " grid " << grid;
      if (oneWarpPerTile) {
        EXPECT_TRUE(bitEqual(h, want)) << "grid " << grid;
        EXPECT_EQ(q8, wantQ8) << "grid " << grid;
        continue;
      }
      // y summed over several warps: h within the sums' rounding (silu's slope is below 1.1).
      size_t bad = 0;
      for (int t = 0; t < c.T; ++t)
        for (int j = 0; j < c.inter; ++j) {
          const double g = y[size_t(t) * n + size_t(j)], u = y[size_t(t) * n + size_t(c.inter + j)];
          const double tol = 1e-5 * (std::fabs(g) + 1.0) * (std::fabs(u) + 1.0);
          const double got = h[size_t(t) * c.inter + size_t(j)], ref = want[size_t(t) * c.inter + size_t(j)];
          if (!(std::fabs(got - ref) <= tol) && ++bad <= 5)
            ADD_FAILURE() << "h[" << t << ", " << j << "] = " << got << ", want " << ref;
        }
      EXPECT_EQ(bad, 0u) << "grid " << grid;
    }
  }
  // Dense weights: a warp per column of h, its gate and up rows summed as the plain GEMV sums
  // them (a warp per row): h bit for bit the GEMV then silu_mul, f32 / bf16 / f16, bias, K not a
  // multiple of 8, 1-4 tokens and a second chunk, one block for everything.
  struct Dense {
    const char *type;
    int inter, k, T;
    bool bias;
  };
  for (const Dense &c : {Dense{"bf16", 96, 160, 6, false}, Dense{"f16", 64, 72, 3, true}, Dense{"f32", 32, 100, 5, true},
                         Dense{"bf16", 32, 64, 1, true}}) {
    SCOPED_TRACE(std::string(c.type) + " inter=" + std::to_string(c.inter) + " k=" + std::to_string(c.k) +
                 " T=" + std::to_string(c.T));
    const int n = 2 * c.inter;
    llmc::LinearParams p;
    p.n = n;
    p.k = c.k;
    p.weight = c.type;
    p.bias = c.bias;
    auto plain = llmc::emitLinearKernel(p);
    p.siluInter = c.inter;
    auto fused = llmc::emitLinearKernel(p);
    auto silu = llmc::emitSiluMulKernel({c.inter, true});
    ASSERT_TRUE(plain.ok() && fused.ok() && silu.ok()) << fused.status().to_string();
    EXPECT_NE(fused->entry.find("_silu"), std::string::npos) << fused->entry;
    HostKernel kp(*plain, kParams, kArgs);
    HostKernel kf(*fused, kSiluParams, kSiluArgs);
    HostKernel ks(*silu, "const float *gate_up, float *out, int T", "gate_up, out, T");
    ASSERT_TRUE(kp.ok() && kf.ok() && ks.ok()) << kp.error() << kf.error() << ks.error();
    const Weight w = denseWeight(c.type, n, c.k, 29);
    const std::vector<float> x = randomVector(size_t(c.T) * c.k, 97), bias = randomVector(size_t(n), 98);
    const float *b = c.bias ? bias.data() : nullptr;
    std::vector<float> y(size_t(c.T) * n, NAN), want(size_t(c.T) * c.inter, NAN);
    kp.get<LinearFn>()(x.data(), w.bytes.data(), b, nullptr, y.data(), c.T, gridFor(*plain, c.T));
    ks.get<void (*)(const float *, float *, int, unsigned)>()(y.data(), want.data(), c.T, gridFor(*silu, c.T));
    for (const unsigned grid : {unsigned(gridFor(*fused, c.T)), 1u}) {
      std::vector<float> h(want.size(), NAN);
      kf.get<SiluFn>()(x.data(), w.bytes.data(), b, nullptr, h.data(), nullptr, c.T, grid);
      EXPECT_TRUE(bitEqual(h, want)) << "grid " << grid;
      // Before its wait, block b asks the L2 for its first columns' gate rows 4 b .. 4 b + 3 and
      // their up rows (whole 16-byte units inside each range; these ranges are one piece each).
      const unsigned long long base = reinterpret_cast<unsigned long long>(w.bytes.data());
      const unsigned long long perBlock = 4ull * c.k * (std::string(c.type) == "f32" ? 4 : 2);
      std::vector<HostKernel::Prefetch> expect;
      for (unsigned blk = 0; blk < std::min<unsigned>(unsigned(c.inter / 4), grid); ++blk)
        for (const unsigned long long from : {blk * perBlock, c.inter / 4 * perBlock + blk * perBlock}) {
          const unsigned long long a = (base + from + 15) & ~15ull, e = (base + from + perBlock) & ~15ull;
          expect.push_back({blk, 0u, a, unsigned(e - a)});
        }
      const std::vector<HostKernel::Prefetch> log = kf.prefetches();
      ASSERT_EQ(log.size(), expect.size()) << "grid " << grid;
      for (size_t i = 0; i < log.size(); ++i)
        EXPECT_TRUE(log[i].block == expect[i].block && log[i].thread == 0 && log[i].address == expect[i].address &&
                    log[i].bytes == expect[i].bytes)
            << i << ": block " << log[i].block << " at " << log[i].address - base << ", " << log[i].bytes;
    }
  }
  // Refused: tensor cores, n not 2 x inter, inter not a multiple of 32.
  llmc::LinearParams bad;
  bad.n = 128;
  bad.k = 64;
  bad.weight = "int4-g32-f16-sym";
  bad.siluInter = 32;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.n = 96;
  bad.siluInter = 48;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.n = 64;
  bad.siluInter = 32;
  bad.tensorCores = true;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.tensorCores = false;
  bad.gatherRows = true;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
}

TEST(LinearKernel, AddRmsNormEpilogueIsTheGemvThenAddRmsNorm) {
  // The GEMV with the add_rms_norm epilogue (LinearParams::addRmsNorm) writes y as the plain GEMV
  // does, then its last block to finish does the add_rms_norm of (y, other): normed, sum and
  // normed's int8 rows, bit for bit those of the add_rms_norm kernel run after the plain GEMV
  // (whose kBlock threads the epilogue's fewer ones stand in for). Quantized weights (f32 and int8
  // activations; 1, 2 and 8 warps) and dense ones (4 warps), widths whose norm kernel has 32 to
  // 1024 threads (a width not a multiple of its block), 1-3 rows, the emitted grid and one block,
  // one workspace for all launches (the counter the last block resets), `sum` in place of `other`
  // or of y.
  struct Case {
    const char *weight;
    int n, k, T;
    bool int8, q8;
  };
  constexpr const char *kNormParams =
      "const float *x, const unsigned char *w, const float *bias, const int *rows, float *y, const float *other, "
      "const float *norm_w, float *normed, float *sum, unsigned char *q8, unsigned char *work, int T";
  constexpr const char *kNormArgs = "x, w, bias, rows, y, other, norm_w, normed, sum, q8, work, T";
  using NormFn = void (*)(const float *, const unsigned char *, const float *, const int *, float *, const float *,
                          const float *, float *, float *, unsigned char *, unsigned char *, int, unsigned);
  using AddRmsNormFn = void (*)(const float *, const float *, const float *, float *, float *, unsigned char *, int,
                                unsigned);
  for (const Case &c : {Case{"int4-g128-f16-min", 512, 256, 3, true, true}, Case{"int4-g32-f16-zp", 96, 64, 2, false, false},
                        Case{"int8-g32-f16-sym", 256, 1024, 1, true, true}, Case{"bf16", 4096, 32, 1, false, true},
                        Case{"f32", 100, 40, 3, false, false}, Case{"f16", 64, 24, 2, false, true},
                        Case{"int8-g16-f32-sym", 256, 512, 2, true, true},
                        Case{"int4-g256s32-f16-min", 256, 512, 2, true, true},
                        Case{"int5-g32-f16-min", 256, 512, 3, false, true}}) {
    SCOPED_TRACE(std::string(c.weight) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                 " T=" + std::to_string(c.T) + (c.int8 ? " int8" : "") + (c.q8 ? " q8" : ""));
    const bool dense = std::string(c.weight) == "bf16" || std::string(c.weight) == "f16" ||
                       std::string(c.weight) == "f32";
    llmc::LinearParams p;
    p.n = c.n;
    p.k = c.k;
    p.weight = c.weight;
    p.int8Activations = c.int8;
    auto plain = llmc::emitLinearKernel(p);
    const llmc::RmsNormParams np{c.n, c.n, 1e-5f, c.q8};
    p.addRmsNorm = np;
    auto fused = llmc::emitLinearKernel(p);
    auto norm = llmc::emitAddRmsNormKernel(np);
    ASSERT_TRUE(plain.ok() && fused.ok() && norm.ok()) << fused.status().to_string();
    EXPECT_NE(fused->entry.find(c.q8 ? "_addnorm_q8" : "_addnorm"), std::string::npos) << fused->entry;
    EXPECT_EQ(fused->gridRule, plain->gridRule);
    EXPECT_EQ(fused->blockDim, plain->blockDim);
    EXPECT_GE(fused->workspaceBytes, 4u);
    HostKernel kp(*plain, kParams, kArgs);
    HostKernel kf(*fused, kNormParams, kNormArgs);
    const std::string q8Param = c.q8 ? "unsigned char *q8, " : "", q8Arg = c.q8 ? "q8, " : "";
    HostKernel kn(*norm, "const float *x, const float *residual, const float *w, float *normed, float *sum, " + q8Param + "int T",
                  "x, residual, w, normed, sum, " + q8Arg + "T");
    ASSERT_TRUE(kp.ok() && kf.ok() && kn.ok()) << kp.error() << kf.error() << kn.error();
    const Weight w = dense ? denseWeight(c.weight, c.n, c.k, 41) : quantizedWeight(c.weight, c.n, c.k, 41);
    const std::vector<float> x = randomVector(size_t(c.T) * c.k, 42), other = randomVector(size_t(c.T) * c.n, 43),
                             normW = randomVector(size_t(c.n), 44);
    const size_t nb = c.n % 32 == 0 ? size_t(llmc::q8RowBytes(c.n)) : 0;
    const std::vector<uint8_t> xq = packedQ8Rows(x, c.int8 ? c.T : 0, c.k);
    const float *xin = c.int8 ? reinterpret_cast<const float *>(xq.data()) : x.data();
    // The two kernels: the plain GEMV's y, then add_rms_norm(y, other) (with the int8 rows the
    // kernel is asked for).
    std::vector<float> y(size_t(c.T) * c.n, NAN), wantNormed(y.size(), NAN), wantSum(y.size(), NAN);
    std::vector<uint8_t> wantQ8(size_t(c.T) * nb, 0xEE);
    kp.get<LinearFn>()(xin, w.bytes.data(), nullptr, nullptr, y.data(), c.T, gridFor(*plain, c.T));
    if (c.q8)
      kn.get<AddRmsNormFn>()(y.data(), other.data(), normW.data(), wantNormed.data(), wantSum.data(), wantQ8.data(), c.T,
                             gridFor(*norm, c.T));
    else
      kn.get<void (*)(const float *, const float *, const float *, float *, float *, int, unsigned)>()(
          y.data(), other.data(), normW.data(), wantNormed.data(), wantSum.data(), c.T, gridFor(*norm, c.T));
    // One workspace for every launch (each must find its counter zero and leave it so): sum in its
    // own buffer, in place of `other` (the residual updated in place) or of y; one block.
    std::vector<uint8_t> work(256, 0);
    const unsigned grid = unsigned(gridFor(*fused, c.T));
    for (const auto &[blocks, place] : {std::pair{grid, "own"}, std::pair{grid, "other"}, std::pair{grid, "y"},
                                        std::pair{1u, "own"}}) {
      SCOPED_TRACE(std::string("grid ") + std::to_string(blocks) + ", sum in " + place);
      std::vector<float> yf(y.size(), NAN), normed(y.size(), NAN), ownSum(y.size(), NAN), otherCopy = other;
      std::vector<uint8_t> q8(wantQ8.size(), 0xEE);
      float *sum = std::string(place) == "own" ? ownSum.data() : std::string(place) == "other" ? otherCopy.data() : yf.data();
      kf.get<NormFn>()(xin, w.bytes.data(), nullptr, nullptr, yf.data(), otherCopy.data(), normW.data(), normed.data(),
                       sum, c.q8 ? q8.data() : nullptr, work.data(), c.T, blocks);
      EXPECT_TRUE(bitEqual(std::vector<float>(sum, sum + y.size()), wantSum));
      EXPECT_TRUE(bitEqual(normed, wantNormed));
      if (std::string(place) != "y")
        EXPECT_TRUE(bitEqual(yf, y));
      if (c.q8)
        EXPECT_EQ(q8, wantQ8);
      EXPECT_EQ(work, std::vector<uint8_t>(256, 0)) << "the counter is left zero";
    }
    // x + residual in the other order: the same sum (the add is commutative).
    if (!c.q8) {
      std::vector<float> normed2(y.size(), NAN), sum2(y.size(), NAN);
      kn.get<void (*)(const float *, const float *, const float *, float *, float *, int, unsigned)>()(
          other.data(), y.data(), normW.data(), normed2.data(), sum2.data(), c.T, gridFor(*norm, c.T));
      EXPECT_TRUE(bitEqual(normed2, wantNormed));
    }
  }
  // Refused: tensor cores, gathered rows, with the SiLU-mul epilogue, a norm over another width.
  llmc::LinearParams bad;
  bad.n = 64;
  bad.k = 64;
  bad.weight = "int4-g32-f16-sym";
  bad.addRmsNorm = llmc::RmsNormParams{64, 64, 1e-5f, false};
  EXPECT_TRUE(llmc::emitLinearKernel(bad).ok());
  bad.tensorCores = true;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.tensorCores = false;
  bad.gatherRows = true;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.gatherRows = false;
  bad.siluInter = 32;
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.siluInter = 0;
  bad.addRmsNorm = llmc::RmsNormParams{128, 128, 1e-5f, false};
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
  bad.addRmsNorm = llmc::RmsNormParams{64, 32, 1e-5f, false};
  EXPECT_FALSE(llmc::emitLinearKernel(bad).ok());
}

TEST(LinearKernel, TensorCoreKernels) {
  // Partial m-tiles (T = 3, 20, 40), a second token chunk (T = 70), partial weight tiles, short
  // spans, K not a multiple of 8 for dense weights, biases and gathered rows. The CUDA-core
  // kernel of the same step must give other bits (the TF32 rounding shows: the tensor cores
  // ran) within the same bound.
  struct Case {
    const char *weight;
    int n, k, T;
    bool bias, gather;
  };
  for (const Case &c : {Case{"int4-g32-f16-min", 20, 96, 40, false, false},
                        Case{"int4-g128-bf16-zp", 12, 256, 70, true, false},
                        Case{"int8-g32-f16-sym", 9, 160, 20, false, true},
                        Case{"int8-row-f32-zp", 16, 64, 16, false, false},
                        Case{"f32", 13, 70, 40, true, false}, Case{"bf16", 16, 64, 70, false, true},
                        Case{"f16", 7, 33, 17, false, false}, Case{"int4-g32-f16-sym", 8, 64, 3, false, false},
                        Case{"int8-g16-f32-sym", 20, 160, 40, true, false},
                        Case{"int4-g32-f16-nl", 16, 96, 40, false, false},
                        Case{"int4-g256s32-f16-min", 12, 512, 40, true, false},
                        Case{"int8-g256s16-f16-sym", 9, 256, 20, false, true},
                        Case{"int4-g256s16-f16-sym", 9, 256, 20, true, false},
                        Case{"int4-g256s16-f16-min", 9, 256, 20, false, true},
                        Case{"int8-g16-f16-min", 12, 160, 40, true, false},
                        Case{"int4-g192s32-f16-nl", 8, 576, 17, false, false},
                        Case{"int5-g32-f16-sym", 12, 96, 40, true, false},
                        Case{"int5-g256s32-f16-min", 9, 256, 20, false, true}}) {
    llmc::LinearParams p;
    p.n = c.n;
    p.k = c.k;
    p.weight = c.weight;
    p.bias = c.bias;
    p.gatherRows = c.gather;
    p.tensorCores = true;
    const std::string w = c.weight;
    Weight weight = w == "f32" || w == "f16" || w == "bf16" ? denseWeight(w, c.n, c.k, 41)
                                                            : quantizedWeight(w, c.n, c.k, 41);
    std::vector<float> tc = checkLinear(p, weight, c.T);
    p.tensorCores = false;
    std::vector<float> cuda = checkLinear(p, weight, c.T);
    EXPECT_FALSE(bitEqual(tc, cuda)) << c.weight << ": the tensor-core path did not run";
  }
  llmc::LinearParams p;
  p.n = 64;
  p.k = 64;
  EXPECT_EQ(llmc::emitLinearKernel(p)->entry.find("_tc_"), std::string::npos);
  EXPECT_NE(llmc::emitLinearKernel(p)->source.find("kTensorCores = false"), std::string::npos);
  p.tensorCores = true;
  EXPECT_NE(llmc::emitLinearKernel(p)->entry.find("_tc_"), std::string::npos);
  EXPECT_NE(llmc::emitLinearKernel(p)->source.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
            std::string::npos);
}

TEST(LinearKernel, DecodeGemvAsksTheL2ForItsFirstWeightBytes) {
  // Before its wait on the kernel before (sm_90+), block b of a CUDA-core GEMV asks the L2 for
  // the weight bytes its first item reads first: quantized, the first l2PrefetchBytes / tiles
  // bytes (whole 16-byte units) of tile b; dense, the first blocks (up to l2PrefetchBytes in all)
  // their 4 rows. One thread asks, in pieces of up to 16 KiB, nothing outside the weight; the
  // tensor-core kernels and l2PrefetchBytes = 0 ask nothing. (The host emulation logs the asks.)
  struct Case {
    const char *weight;
    int n, k;
    int64_t budget;
    bool tensorCores;
    // expected: blocks asking, and each one's byte range [from(b), to(b)) before rounding
    int blocks;
    int64_t perBlock; // quantized: bytes from the tile's start; dense: the block's rows' bytes
  };
  const int64_t tile512 = 8 * (256 + 4 * 4), tile4096 = 8 * (2048 + 32 * 4); // int4-g128-f16-min
  for (const Case &c : {Case{"int4-g128-f16-min", 64, 512, 8000, false, 8, 992},
                        Case{"int4-g128-f16-min", 12, 4096, int64_t(1) << 30, false, 2, tile4096},
                        Case{"int4-g128-f16-min", 64, 512, 100, false, 0, 0},
                        Case{"int4-g128-f16-min", 64, 512, 8000, true, 0, 0},
                        Case{"int4-g128-f16-min", 64, 512, 0, false, 0, 0},
                        Case{"bf16", 37, 64, 2048, false, 4, 4 * 64 * 2},
                        Case{"bf16", 37, 64, int64_t(1) << 30, false, 10, 4 * 64 * 2},
                        Case{"f32", 37, 8192, int64_t(1) << 30, false, 10, 4 * 8192 * 4}}) {
    llmc::LinearParams p{c.n, c.k, c.weight};
    p.tensorCores = c.tensorCores;
    p.l2PrefetchBytes = c.budget;
    const bool dense = std::string(c.weight) == "bf16" || std::string(c.weight) == "f32";
    SCOPED_TRACE(std::string(c.weight) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
                 " budget=" + std::to_string(c.budget) + (c.tensorCores ? " tc" : ""));
    auto spec = llmc::emitLinearKernel(p);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    HostKernel kernel(*spec, kParams, kArgs);
    ASSERT_TRUE(kernel.ok()) << kernel.error();
    const Weight w = dense ? denseWeight(c.weight, c.n, c.k, 5) : quantizedWeight(c.weight, c.n, c.k, 5);
    const int T = 1;
    std::vector<float> x = randomVector(size_t(T) * c.k, 6), y(size_t(T) * c.n);
    for (unsigned grid : {unsigned(gridFor(*spec, T)), 1u}) {
      kernel.get<LinearFn>()(x.data(), w.bytes.data(), nullptr, nullptr, y.data(), T, grid);
      const std::vector<HostKernel::Prefetch> log = kernel.prefetches();
      const unsigned long long base = reinterpret_cast<unsigned long long>(w.bytes.data());
      const unsigned long long size = w.bytes.size();
      // What each block should ask for, piece by piece.
      std::vector<HostKernel::Prefetch> want;
      for (int b = 0; b < std::min<int>(c.blocks, int(grid)); ++b) {
        const int64_t from = b * (dense ? c.perBlock : c.k == 512 ? tile512 : tile4096);
        const unsigned long long to = std::min<unsigned long long>(from + c.perBlock, size);
        const unsigned long long end = (base + to) & ~15ull;
        for (unsigned long long a = (base + from + 15) & ~15ull; a < end; a += 16384)
          want.push_back({unsigned(b), 0u, a, unsigned(std::min<unsigned long long>(end - a, 16384))});
      }
      ASSERT_EQ(log.size(), want.size()) << "grid " << grid;
      for (size_t i = 0; i < log.size(); ++i) {
        EXPECT_EQ(log[i].block, want[i].block) << i;
        EXPECT_EQ(log[i].thread, 0u) << i;
        EXPECT_EQ(log[i].address, want[i].address) << i;
        EXPECT_EQ(log[i].bytes, want[i].bytes) << i;
        EXPECT_GE(log[i].address, base);
        EXPECT_LE(log[i].address + log[i].bytes, base + size);
        EXPECT_EQ(log[i].address % 16, 0u);
        EXPECT_EQ(log[i].bytes % 16, 0u);
      }
      uint64_t asked = 0;
      for (const HostKernel::Prefetch &f : log)
        asked += f.bytes;
      EXPECT_LE(asked, uint64_t(c.budget));
    }
  }
}

TEST(LinearKernel, EmissionErrors) {
  llmc::LinearParams p;
  p.n = 8;
  p.k = 100; // not a whole number of groups of 32
  p.weight = "int4-g32-f16-sym";
  auto bad = llmc::emitLinearKernel(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("linear"), std::string::npos) << bad.status().message();
  p.k = 128;
  p.weight = "int3-g32-f16-sym";
  EXPECT_FALSE(llmc::emitLinearKernel(p).ok());
  p.weight = "f64";
  EXPECT_FALSE(llmc::emitLinearKernel(p).ok());
  p.weight = "f32";
  p.n = 0;
  EXPECT_FALSE(llmc::emitLinearKernel(p).ok());
  // Equal parameters give the same entry; any change another.
  p.n = 8;
  EXPECT_EQ(llmc::emitLinearKernel(p)->entry, llmc::emitLinearKernel(p)->entry);
  llmc::LinearParams q = p;
  q.bias = true;
  EXPECT_NE(llmc::emitLinearKernel(p)->entry, llmc::emitLinearKernel(q)->entry);
}

} // namespace

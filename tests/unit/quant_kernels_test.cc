// Quantized weights: formats (runtime/quant/quant_format.h) and the two numerical contracts of
// the quantized linear kernel (runtime/cpu/kernels.h). Oracles: the scalar implementation of each
// contract (SIMD must match it bit for bit), GCC's own _Float16 conversion for halves, and a
// double-precision dot product over the dequantized weights for the accuracy of the fast contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/quant/quant_format.h"
#include "tests/unit/isa_guard.h"

namespace llmrt {
namespace {

using quant::Format;

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const char* kAllFormats[] = {
    "int4-g32-f16-sym", "int4-g32-f16-min", "int4-g32-f16-zp",  "int8-g32-f16-sym",
    "int8-g32-f16-zp",  "int8-g32-f16-min", "int4-g128-f16-min", "int4-g64-bf16-sym",
    "int4-g128-f32-zp", "int8-row-f32-sym", "int4-row-f32-min",  "int8-g64-bf16-sym",
    // GGUF's Q4_K, Q5_K and Q6_K as the compiler holds them, and a 16-group in f16
    "int4-g32-f32-min", "int8-g32-f32-min", "int8-g16-f32-sym",  "int8-g16-f16-sym",
    // the IQ4 grid's codes: IQ4_NL, IQ4_XS as held, and other groups and scales
    "int4-g32-f16-nl",  "int4-g32-f32-nl",  "int4-g64-bf16-nl",  "int4-row-f32-nl",
    // sub-scales: GGUF's Q4_K, Q5_K, Q6_K and IQ4_XS as the compiler holds them, and others
    "int4-g256s32-f16-min", "int8-g256s32-f16-min", "int8-g256s16-f16-sym", "int4-g256s32-f16-nl",
    "int4-g64s32-bf16-sym", "int8-g64s16-bf16-sym", "int8-g64s32-f16-sym",
    // int4 sub-blocks of 16: GGUF's Q3_K and Q2_K as held, and others; min groups of 16 (Q2_K's
    // expansion) and int8 min sub-blocks of 16
    "int4-g256s16-f16-sym", "int4-g64s16-bf16-sym", "int4-g256s16-f16-min", "int4-g64s16-bf16-min",
    "int8-g16-f32-min", "int8-g16-f16-min", "int8-g64s16-f16-min",
    // int5: GGUF's Q5_0, Q5_1 (bit for bit) and Q5_K as held, and others
    "int5-g32-f16-sym", "int5-g32-f16-min", "int5-g256s32-f16-min", "int5-g64-bf16-zp", "int5-g128-f32-min",
    "int5-row-f32-sym"};

// Layouts that hold format f: every layout holds every format.
bool has_layout(const Format&, quant::Layout) { return true; }

// ---------------- formats ----------------

TEST(QuantFormat, NamesRoundTrip) {
  for (const char* name : kAllFormats) {
    StatusOr<Format> f = quant::parse_format(name);
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().message();
    EXPECT_EQ(quant::format_name(*f), name);
  }
}

TEST(QuantFormat, BadNamesSayWhy) {
  for (const char* bad : {"int3-g32-f16-sym", "int4-g33-f16-sym", "int4-g32-f8-sym",
                          "int4-g32-f16-asym", "int4-g32-f16", "int4-g32-f16-sym-x", "", "q4_1",
                          "int4-g-f16-sym", "int4-g0-f16-sym", "int4-g16-f16-sym", "int8-g16-f16-zp",
                          "int4-g16-f32-min", "int8-g16-f32-nl", "int8-g8-f16-sym", "int8-g48-f16-sym", "int8-g32-f16-nl",
                          "int4-g16-f32-nl", "int4-g32-f16-grid",
                          // sub-scales: s32 or s16 (int4 / int8 sym or min) only, inside a larger
                          // group, no zero points, f16/bf16 scales; row groups take none
                          "int4-g256s16-f16-nl", "int5-g256s16-f16-sym", "int5-g256s16-f16-min",
                          "int4-g256s16-f32-sym", "int4-g256s64-f16-min", "int8-g32s32-f16-sym",
                          "int8-g48s16-f16-sym", "int4-g256s32-f16-zp", "int4-g256s32-f32-min",
                          "int4-rows32-f16-min", "int4-g256s-f16-min", "int4-g256s32x-f16-min",
                          // int5: no nl codes, no groups of 16
                          "int5-g32-f16-nl", "int5-g16-f16-sym", "int6-g32-f16-sym"}) {
    StatusOr<Format> f = quant::parse_format(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("quantization format"), std::string::npos);
  }
}

TEST(QuantFormat, RowBytesMatchGgufBlocks) {
  // GGUF: Q8_0 34 bytes, Q4_0 18, Q4_1 20 per 32 elements (ggml's block_q8_0/q4_0/q4_1).
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int8-g32-f16-sym"), 64), 68);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g32-f16-sym"), 64), 36);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g32-f16-min"), 64), 40);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g128-f16-zp"), 256), 2 * (2 + 1 + 64));
  EXPECT_FALSE(quant::row_bytes(*quant::parse_format("int4-g128-f16-min"), 576).ok());
  EXPECT_FALSE(quant::row_bytes(*quant::parse_format("int8-row-f32-sym"), 48).ok());
  // Groups of 16 (Q6_K's sub-blocks): 4 + 16 bytes each; rows still whole sub-blocks of 32.
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int8-g16-f32-sym"), 256), 16 * 20);
  EXPECT_FALSE(quant::row_bytes(*quant::parse_format("int8-g16-f32-sym"), 48).ok());
  EXPECT_NE(quant::parse_format("int4-g16-f32-sym").status().message().find("int8 sym or min only"), std::string::npos);
  // min groups of 16 (Q2_K's expansion): 4 + 4 + 16 bytes each
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int8-g16-f32-min"), 256), 16 * 24);
  // Sub-scales: a group of 256 as GGUF's super-block: d (and dmin), a code per sub-block (and a
  // min code), then the codes. Q4_K 148 bytes (the file: 144), Q5_K 276 (176), Q6_K 274 (210),
  // IQ4_XS 138 (136).
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g256s32-f16-min"), 512), 2 * (4 + 16 + 128));
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int8-g256s32-f16-min"), 256), 4 + 16 + 256);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int8-g256s16-f16-sym"), 256), 2 + 16 + 256);
  // Q3_K 146 (the file: 110), Q2_K 164 (84): d [, dmin], 16 codes sc [, 16 codes m], 128 bytes of nibbles
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g256s16-f16-sym"), 256), 2 + 16 + 128);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g256s16-f16-min"), 256), 4 + 32 + 128);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int4-g256s32-f16-nl"), 256), 2 + 8 + 128);
  EXPECT_FALSE(quant::row_bytes(*quant::parse_format("int4-g256s32-f16-nl"), 320).ok());
  const Format q4k = *quant::parse_format("int4-g256s32-f16-min");
  EXPECT_EQ(q4k.sub, 32);
  EXPECT_EQ(quant::sub_scales(q4k), 8);
  EXPECT_EQ(quant::base_header_bytes(q4k), 4);
  EXPECT_EQ(quant::header_bytes(q4k), 20);
  EXPECT_EQ(quant::format_name(quant::expanded_format(q4k)), "int4-g32-f32-min");
  EXPECT_EQ(quant::format_name(quant::expanded_format(*quant::parse_format("int8-g256s16-f16-sym"))),
            "int8-g16-f32-sym");
  EXPECT_EQ(quant::format_name(quant::expanded_format(*quant::parse_format("int4-g256s16-f16-sym"))),
            "int8-g16-f32-sym");
  EXPECT_EQ(quant::format_name(quant::expanded_format(*quant::parse_format("int4-g256s16-f16-min"))),
            "int8-g16-f32-min");
  EXPECT_EQ(quant::expanded_format(*quant::parse_format("int4-g32-f16-zp")), *quant::parse_format("int4-g32-f16-zp"));
  // Plans for GPUs hold them as they are.
  EXPECT_EQ(*quant::tensor_bytes(q4k, quant::Layout::kCudaMma8, 8, 512), 8u * 2 * (4 + 16 + 128));
  // int5: 20 bytes per sub-block of 32 (the fifth bits' word, the nibbles): Q5_0 22 bytes per 32,
  // Q5_1 24, as GGUF's; Q5_K 180 per 256 (the file 176). Plans for GPUs hold int8 codes.
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int5-g32-f16-sym"), 64), 44);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int5-g32-f16-min"), 64), 48);
  EXPECT_EQ(*quant::row_bytes(*quant::parse_format("int5-g256s32-f16-min"), 256), 180);
  EXPECT_EQ(quant::format_name(quant::expanded_format(*quant::parse_format("int5-g32-f16-sym"))), "int8-g32-f16-zp");
  EXPECT_EQ(quant::format_name(quant::expanded_format(*quant::parse_format("int5-g256s32-f16-min"))),
            "int8-g32-f32-min");
  // cuda_mma_n8 holds int5 in 5 bits too (a span's low 4 bits, then its fifth bits).
  EXPECT_EQ(*quant::tensor_bytes(*quant::parse_format("int5-g32-f16-min"), quant::Layout::kCudaMma8, 8, 64), 8u * 48);
}

// A sub-scale format's values are its expansion's (groups of `sub`, f32 scales d * sc_j and mins
// dmin * mc_j), bit for bit, on hand-set bytes: the extreme codes -128 and 127, negative codes,
// a subnormal half and bf16.
TEST(QuantFormat, SubScalesAreExactProducts) {
  for (const char* name : {"int4-g256s32-f16-min", "int8-g256s16-f16-sym", "int4-g256s32-f16-nl",
                           "int8-g64s32-bf16-min", "int4-g64s32-bf16-sym", "int4-g256s16-f16-min",
                           "int4-g256s16-f16-sym", "int8-g64s16-bf16-min"}) {
    const Format f = *quant::parse_format(name), w = quant::expanded_format(f);
    const int64_t k = 512, rb = *quant::row_bytes(f, k);
    std::vector<uint8_t> row(rb);
    std::mt19937 rng(5);
    for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
    const int64_t gb = quant::group_bytes(f, f.group), bhb = quant::base_header_bytes(f);
    for (int64_t at = 0; at < rb; at += gb) {  // finite scales: a normal one, then a subnormal half
      quant::store_scale(f.scale, at == 0 ? 0.0123f : 3e-6f, &row[at]);
      if (f.offset == quant::Offset::kMin) quant::store_scale(f.scale, -0.0071f, &row[at + quant::scale_bytes(f.scale)]);
      row[at + bhb] = 0x80;      // sc_0 = -128
      row[at + bhb + 1] = 0x7F;  // sc_1 = 127
    }
    std::vector<uint8_t> wide(*quant::row_bytes(w, k));
    quant::expand_row(f, row.data(), k, wide.data());
    std::vector<float> a(k), b(k);
    quant::dequantize_row(f, row.data(), k, a.data());
    quant::dequantize_row(w, wide.data(), k, b.data());
    EXPECT_TRUE(bit_equal(a, b)) << name;
    // and each sub-block's scale is the f32 product, written out here
    const float d0 = quant::load_scale(f.scale, row.data());
    float d, m;
    quant::sub_block_scale(f, row.data(), 0, &d, &m);
    EXPECT_EQ(d, d0 * -128.0f) << name;
    EXPECT_EQ(static_cast<double>(d), static_cast<double>(d0) * -128.0) << name;  // exact
    float wd;
    std::memcpy(&wd, wide.data(), 4);
    EXPECT_EQ(wd, d) << name;
    EXPECT_EQ(quant::check_row(f, row.data(), k), "") << name;
  }
}

TEST(QuantFormat, HalfConversionMatchesTheCompiler) {
  // Every half converts to float and back unchanged; float -> half rounds like GCC's _Float16.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = quant::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {  // the payload kept (quiet or not), the sign too
      ASSERT_EQ(std::bit_cast<uint32_t>(f), ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13)) << h;
      continue;
    }
    ASSERT_EQ(quant::float_to_half(f), h) << h;
    _Float16 ref;
    std::memcpy(&ref, &h, 2);
    const float rf = static_cast<float>(ref);
    ASSERT_EQ(std::memcmp(&f, &rf, 4), 0) << h;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    float x;
    std::memcpy(&x, &b, 4);
    if (std::isnan(x)) continue;
    const _Float16 ref = static_cast<_Float16>(x);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(quant::float_to_half(x), rb) << x;
  }
}

TEST(QuantFormat, QuantizeRowErrorIsWithinHalfAStep) {
  const int64_t k = 256;
  for (const char* name : kAllFormats) {
    Format f = *quant::parse_format(name);
    std::vector<float> x = random_vec(k, 11, 0.05f);
    x[3] = 0.0f;
    std::vector<uint8_t> q(*quant::row_bytes(f, k));
    quant::quantize_row(f, x.data(), k, q.data());
    std::vector<float> y(k);
    quant::dequantize_row(f, q.data(), k, y.data());
    const int64_t g = quant::group_elems(f, k);
    if (f.sub != 0) {
      // Each sub-block within half a step of its effective scale d * sc_j (and min) of the
      // representable range, and that scale within half of d of the sub-block's own ideal one.
      const int64_t gb = quant::group_bytes(f, f.group);
      for (int64_t e = 0; e < k; e += f.sub) {
        const uint8_t* h = q.data() + e / g * gb;
        float dj, mj;
        quant::sub_block_scale(f, h, e % g / f.sub, &dj, &mj);
        const float d = quant::load_scale(f.scale, h);
        float lo, hi, half;
        if (f.offset == quant::Offset::kNl) {
          lo = std::min(-127 * dj, 113 * dj), hi = std::max(-127 * dj, 113 * dj), half = 14 * std::fabs(dj);
        } else if (f.offset == quant::Offset::kSym) {
          const int top = f.bits == 8 ? 127 : (1 << (f.bits - 1)) - 1;
          lo = (f.bits == 8 ? -127 : -top - 1) * dj, hi = top * dj, half = 0.5f * dj;
        } else {
          lo = mj, hi = mj + ((1 << f.bits) - 1) * dj, half = 0.5f * dj;
        }
        float amax = 0, mn = 0, mx = 0;
        for (int64_t i = e; i < e + f.sub; ++i) {
          const float outside = std::max({lo - x[i], x[i] - hi, 0.0f});
          ASSERT_LE(std::fabs(y[i] - x[i]), (outside + half) * 1.01f + 1e-6f) << name << " at " << i;
          amax = std::max(amax, std::fabs(x[i]));
          mn = std::min(mn, x[i]);
          mx = std::max(mx, x[i]);
        }
        const float ideal = f.offset == quant::Offset::kSym ? amax / (f.bits == 8 ? 127 : (1 << (f.bits - 1)) - 1)
                            : f.offset == quant::Offset::kNl ? amax / 127 : (mx - mn) / ((1 << f.bits) - 1);
        EXPECT_LE(std::fabs(std::fabs(dj) - ideal), 0.5f * d * 1.01f) << name << " at " << e;
      }
      continue;
    }
    for (int64_t base = 0; base < k; base += g) {
      float mn = 0, mx = 0, amax = 0;
      for (int64_t i = base; i < base + g; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
        amax = std::max(amax, std::fabs(x[i]));
      }
      const int levels = (1 << f.bits) - 1;
      // nl: the grid's widest gap is 23 (-127 .. -104), and the values past 113 (where the
      // largest magnitude is negative, up to 127 of the other sign) are 14 from it at most.
      const float step = f.offset == quant::Offset::kSym  ? amax / (f.bits == 8 ? 127 : (1 << (f.bits - 1)) - 1)
                         : f.offset == quant::Offset::kNl ? 28.0f * amax / 127.0f
                                                          : (mx - mn) / levels;
      for (int64_t i = base; i < base + g; ++i)
        ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * step * 1.01f + 1e-6f) << name << " at " << i;
    }
    // zero stays exact (the nl grid has no zero: its nearest value is 1)
    if (f.offset != quant::Offset::kMin && f.offset != quant::Offset::kNl) EXPECT_EQ(y[3], 0.0f) << name;
  }
}

// quantize_row's bytes against its definition spelled out serially here: per group the min and
// max folded from the first element (the first of equal values kept: the sign of a zero), round
// to nearest even with nearbyint, then clamped; on rows that probe the fast path's shortcuts
// (signed zeros, all zeros, ties at half a step, values beyond the codes' range).
// Element i's code c (unsigned: int4 / int5 as stored, int8 as its byte) of a group's codes q, in
// the row layout's order spelled out: int8 byte i; int4 sub-block i / 32 of 16 bytes, element c
// in byte c % 16, the high nibble for c >= 16; int5 sub-blocks of 20 bytes, the fifth bit at bit
// c of the first 4 bytes, the low 4 bits as int4 after them.
void put_code(const Format& f, uint8_t* q, int64_t i, int code) {
  if (f.bits == 8) {
    q[i] = static_cast<uint8_t>(code);
    return;
  }
  const int64_t sub = i / 32, c = i % 32;
  uint8_t* b = q + sub * (f.bits == 5 ? 20 : 16);
  if (f.bits == 5) {
    b[c / 8] |= static_cast<uint8_t>(((code >> 4) & 1) << (c % 8));
    b += 4;
  }
  b[c % 16] |= static_cast<uint8_t>((code & 15) << (c < 16 ? 0 : 4));
}

// Sub-scales: each sub-block's scale (and min) as a group's above, in f32; d = the largest |scale|
// / 127 and dmin = the least min / 127 in the scale type; sc_j = scale_j / d and mc_j = min_j /
// dmin rounded to nearest even within +-127 (0 where d or dmin is 0); then the sub-block's codes
// for d * sc_j and dmin * mc_j as above.
std::vector<uint8_t> serial_quantize_sub(const Format& f, const std::vector<float>& x) {
  const int64_t k = static_cast<int64_t>(x.size()), g = f.group, nsub = g / f.sub;
  const int sb = quant::scale_bytes(f.scale);
  const int64_t bhb = quant::base_header_bytes(f), hb = quant::header_bytes(f);
  const bool sym = f.offset == quant::Offset::kSym, nl = f.offset == quant::Offset::kNl;
  const int half = f.bits == 8 ? 0 : 1 << (f.bits - 1);
  const int lo = f.bits == 8 ? (sym ? -127 : 0) : (sym ? -half : 0);
  const int hi = f.bits == 8 ? (sym ? 127 : 255) : (sym ? half - 1 : 2 * half - 1);
  std::vector<uint8_t> out(*quant::row_bytes(f, k), 0);
  for (int64_t base = 0, at = 0; base < k; base += g, at += quant::group_bytes(f, g)) {
    std::vector<float> scale(nsub), min(nsub);
    float top = 0.0f, least = 0.0f;
    for (int64_t j = 0; j < nsub; ++j) {
      const int64_t e0 = base + j * f.sub;
      float mn = x[e0], mx = x[e0];
      for (int64_t i = e0; i < e0 + f.sub; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
      }
      if (nl) scale[j] = (std::fabs(mn) >= std::fabs(mx) ? mn : mx) / -127.0f;
      else if (sym) scale[j] = std::max(std::fabs(mn), std::fabs(mx)) / static_cast<float>(hi);
      else scale[j] = (std::max(mx, 0.0f) - std::min(mn, 0.0f)) / static_cast<float>(hi), min[j] = std::min(mn, 0.0f);
      top = std::max(top, std::fabs(scale[j]));
      least = std::min(least, min[j]);
    }
    const float d = quant::store_scale(f.scale, top / 127.0f, &out[at]);
    const float dmin = sym || nl ? 0.0f : quant::store_scale(f.scale, least / 127.0f, &out[at + sb]);
    for (int64_t j = 0; j < nsub; ++j) {
      const int sc = d != 0 ? static_cast<int>(std::clamp(std::nearbyint(scale[j] / d), -127.0f, 127.0f)) : 0;
      const int mc = dmin != 0 ? static_cast<int>(std::clamp(std::nearbyint(min[j] / dmin), -127.0f, 127.0f)) : 0;
      out[at + bhb + j] = static_cast<uint8_t>(sc);
      if (!sym && !nl) out[at + bhb + nsub + j] = static_cast<uint8_t>(mc);
      const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(mc);
      for (int64_t i = 0; i < f.sub; ++i) {
        const int64_t e = j * f.sub + i;  // in the group
        int code;
        if (nl) {
          const float t = x[base + e] * (dj != 0 ? 1.0f / dj : 0.0f);
          code = 0;
          for (int c = 1; c < 16; ++c)
            if (std::fabs(t - quant::kNlGrid[c]) < std::fabs(t - quant::kNlGrid[code])) code = c;
        } else {
          const float id = dj > 0 ? 1.0f / dj : 0.0f;
          code = std::clamp(static_cast<int>(std::nearbyint(sym ? x[base + e] * id : (x[base + e] - mj) * id)), lo, hi);
          if (sym) code += half;
        }
        put_code(f, &out[at + hb], e, code);
      }
    }
  }
  return out;
}

std::vector<uint8_t> serial_quantize(const Format& f, const std::vector<float>& x) {
  if (f.sub != 0) return serial_quantize_sub(f, x);
  const int64_t k = static_cast<int64_t>(x.size()), g = quant::group_elems(f, k);
  const int sb = quant::scale_bytes(f.scale);
  const bool sym = f.offset == quant::Offset::kSym;
  const int half = f.bits == 8 ? 0 : 1 << (f.bits - 1);  // int4 / int5 sym: codes q - half
  const int lo = f.bits == 8 ? (sym ? -127 : 0) : (sym ? -half : 0);
  const int hi = f.bits == 8 ? (sym ? 127 : 255) : (sym ? half - 1 : 2 * half - 1);
  std::vector<uint8_t> out(*quant::row_bytes(f, k), 0);
  for (int64_t base = 0, at = 0; base < k; base += g, at += quant::group_bytes(f, g)) {
    float mn = x[base], mx = x[base], amax = 0.0f;
    for (int64_t i = base; i < base + g; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    float d, m = 0.0f;
    if (f.offset == quant::Offset::kNl) {
      // the value of largest magnitude (the min where the magnitudes tie) at the grid's -127;
      // every element to its nearest grid value, the lower one of a tie
      const float peak = std::fabs(mn) >= std::fabs(mx) ? mn : mx;
      d = quant::store_scale(f.scale, peak / -127.0f, &out[at]);
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* q = &out[at + quant::header_bytes(f)];
      for (int64_t i = 0; i < g; ++i) {
        const float t = x[base + i] * id;
        int best = 0;
        for (int c = 1; c < 16; ++c)
          if (std::fabs(t - quant::kNlGrid[c]) < std::fabs(t - quant::kNlGrid[best])) best = c;
        q[i / 32 * 16 + i % 16] |= static_cast<uint8_t>(best << (i % 32 < 16 ? 0 : 4));
      }
      continue;
    }
    if (sym) {
      d = quant::store_scale(f.scale, amax / static_cast<float>(hi), &out[at]);
    } else {
      mn = std::min(mn, 0.0f);
      mx = std::max(mx, 0.0f);
      d = quant::store_scale(f.scale, (mx - mn) / static_cast<float>(hi), &out[at]);
      if (f.offset == quant::Offset::kMin) {
        m = quant::store_scale(f.scale, mn, &out[at + sb]);
      } else {
        const int z = std::clamp(d > 0.0f ? static_cast<int>(std::nearbyint(-mn / d)) : 0, 0, hi);
        out[at + sb] = static_cast<uint8_t>(z);
        m = -d * static_cast<float>(z);
      }
    }
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < g; ++i) {
      const float t = sym ? x[base + i] * id : (x[base + i] - m) * id;
      const int code = std::clamp(static_cast<int>(std::nearbyint(t)), lo, hi);
      put_code(f, &out[at + quant::header_bytes(f)], i, code + (sym ? half : 0));
    }
  }
  return out;
}

TEST(QuantFormat, QuantizeRowIsItsSerialDefinition) {
  const int64_t k = 256;
  std::vector<std::vector<float>> rows;
  rows.push_back(random_vec(k, 41, 0.05f));
  std::vector<float> zeros(k, 0.0f), signed_zeros(k, 0.0f), ties = random_vec(k, 42, 0.05f);
  for (int64_t i = 0; i < k; i += 3) signed_zeros[i] = -0.0f;  // the first zero of a group: -0 or +0
  for (int64_t i = 0; i < k; i += 7) signed_zeros[i] = 0.25f;
  for (int64_t i = 0; i < k; ++i)
    if (i % 64 >= 32) signed_zeros[i] = -signed_zeros[i];       // non-positive groups: max is a zero
  signed_zeros[32] = 0.0f;                                       // a +0 first where -0 follows
  // Groups (of every size here) whose least value is a zero of either sign: the first zero
  // decides, also where a zero of the other sign comes 8 elements later (the next fold lane).
  std::vector<float> first_zero(k, 0.25f);
  for (int64_t b = 0; b < k; b += 32) {
    first_zero[b + 1] = b % 64 == 0 ? 0.0f : -0.0f;
    first_zero[b + 8] = b % 64 == 0 ? -0.0f : 0.0f;
  }
  rows.push_back(first_zero);
  for (int64_t i = 0; i < k; i += 5) ties[i] = 0.0375f * static_cast<float>(i % 9 - 4);  // exact k/2 steps
  rows.push_back(zeros);
  rows.push_back(signed_zeros);
  rows.push_back(ties);
  for (const char* name : kAllFormats) {
    const Format f = *quant::parse_format(name);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<uint8_t> q(*quant::row_bytes(f, k));
      quant::quantize_row(f, rows[r].data(), k, q.data());
      EXPECT_EQ(q, serial_quantize(f, rows[r])) << name << " row " << r;
    }
  }
}

TEST(QuantFormat, CheckRowFindsBadZeroPointsAndScales) {
  Format f = *quant::parse_format("int4-g32-f16-zp");
  std::vector<float> x = random_vec(64, 3);
  std::vector<uint8_t> q(*quant::row_bytes(f, 64));
  quant::quantize_row(f, x.data(), 64, q.data());
  EXPECT_EQ(quant::check_row(f, q.data(), 64), "");
  q[19 + 2] = 16;  // second group's zero point (groups of 2 + 1 + 16 bytes)
  EXPECT_NE(quant::check_row(f, q.data(), 64).find("group 1 has zero point 16"), std::string::npos);
  quant::store_scale(f.scale, INFINITY, q.data());
  EXPECT_NE(quant::check_row(f, q.data(), 64).find("group 0"), std::string::npos);
}

// ---------------- kernels ----------------

struct Case {
  Format f;
  int64_t n, k;
  std::vector<uint8_t> w;      // cpu_row_groups
  std::vector<uint8_t> tiles;  // the same rows in cpu_interleaved8
  std::vector<uint8_t> cuda;   // and in cuda_mma_n8
  std::vector<float> wf;    // dequantized
  std::vector<float> bias;
  cpu::QuantMatrix m(quant::Layout l = quant::Layout::kInterleaved8) const {
    const uint8_t* data = l == quant::Layout::kInterleaved8 ? tiles.data()
                          : l == quant::Layout::kCudaMma8   ? cuda.data()
                                                            : w.data();
    return {data, f, n, k, *quant::row_bytes(f, k), l};
  }
};

const quant::Layout kAllLayouts[] = {quant::Layout::kRowGroups, quant::Layout::kInterleaved8,
                                     quant::Layout::kCudaMma8};

// c.tiles and c.cuda from c.w (after c.w changed).
void retile(Case& c) {
  const int64_t rb = *quant::row_bytes(c.f, c.k);
  c.tiles.resize(*quant::tensor_bytes(c.f, quant::Layout::kInterleaved8, c.n, c.k));
  const bool cuda = has_layout(c.f, quant::Layout::kCudaMma8);
  c.cuda.resize(cuda ? *quant::tensor_bytes(c.f, quant::Layout::kCudaMma8, c.n, c.k) : 0);
  for (int64_t r = 0; r < c.n; r += quant::kTileRows) {
    quant::interleave_tile(c.f, c.k, c.w.data() + r * rb, std::min<int64_t>(8, c.n - r), c.tiles.data() + r * rb);
    if (cuda)
      quant::pack_tile(c.f, quant::Layout::kCudaMma8, c.k, c.w.data() + r * rb, std::min<int64_t>(8, c.n - r),
                       c.cuda.data() + r * rb);
  }
}

Case make_case(const char* name, int64_t n, int64_t k, uint32_t seed) {
  Case c{*quant::parse_format(name), n, k, {}, {}, {}, {}, {}};
  const int64_t rb = *quant::row_bytes(c.f, k);
  c.w.resize(n * rb);
  c.wf.resize(n * k);
  std::vector<float> src = random_vec(n * k, seed, 0.05f);
  for (int64_t r = 0; r < n; ++r) {
    quant::quantize_row(c.f, src.data() + r * k, k, c.w.data() + r * rb);
    quant::dequantize_row(c.f, c.w.data() + r * rb, k, c.wf.data() + r * k);
  }
  c.bias = random_vec(n, seed + 1, 0.1f);
  retile(c);
  return c;
}

std::vector<float> run_q(const Case& c, const std::vector<float>& x, int64_t rows,
                         cpu::CpuContract contract, int threads, bool bias,
                         const int32_t* idx = nullptr,
                         quant::Layout layout = quant::Layout::kInterleaved8) {
  ThreadPool pool(threads);
  cpu::QuantScratch sc;
  std::vector<float> y(rows * c.n, -1.0f);
  cpu::linear_q(x.data(), idx, rows, c.m(layout), bias ? c.bias.data() : nullptr, y.data(), contract,
                sc, pool);
  return y;
}

TEST(QuantLayout, InterleavedTilesHoldTheSameRows) {
  for (const char* name : kAllFormats) {
    Case c = make_case(name, 19, 256, 3);
    const int64_t rb = *quant::row_bytes(c.f, c.k);
    EXPECT_EQ(c.tiles.size(), static_cast<size_t>(24 * rb)) << name;  // 19 rows: 3 tiles
    std::vector<uint8_t> row(rb);
    for (int64_t r = 0; r < 24; ++r) {
      quant::deinterleave_row(c.f, c.k, c.tiles.data() + r / 8 * 8 * rb, static_cast<int>(r % 8), row.data());
      if (r < c.n)
        EXPECT_EQ(std::memcmp(row.data(), c.w.data() + r * rb, rb), 0) << name << " row " << r;
      else  // padding rows are zeros
        EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](uint8_t v) { return v == 0; })) << name;
    }
  }
  // Chunk c of a sub-block is one 32-byte run: 4 bytes of each of the 8 rows.
  Format f = *quant::parse_format("int8-g32-f32-sym");
  std::vector<uint8_t> rows(8 * 36), tile(8 * 36);
  for (int r = 0; r < 8; ++r)
    for (int i = 0; i < 32; ++i) rows[r * 36 + 4 + i] = static_cast<uint8_t>(r * 32 + i);
  quant::interleave_tile(f, 32, rows.data(), 8, tile.data());
  EXPECT_EQ(tile[8 * 4 + 0], 0);        // chunk 0, row 0, byte 0
  EXPECT_EQ(tile[8 * 4 + 4], 32);       // chunk 0, row 1, byte 0
  EXPECT_EQ(tile[8 * 4 + 32 + 5], 37);  // chunk 1, row 1, byte 1 = element 5
  EXPECT_FALSE(quant::parse_layout("cpu_tiles").ok());
  EXPECT_EQ(*quant::parse_layout("cpu_interleaved8"), quant::Layout::kInterleaved8);
}

TEST(QuantLayout, CudaMmaTilesHoldTheSameRows) {
  for (const char* name : kAllFormats) {
    // 2 tiles; spans of 128, 128 and 64 (all 128 for groups of 128)
    const int64_t group = quant::parse_format(name)->group;
    const int64_t k = group == 128 ? 384 : group == 256 ? 512 : 320;
    Case c = make_case(name, 11, k, 4);
    const int64_t rb = *quant::row_bytes(c.f, c.k);
    ASSERT_EQ(c.cuda.size(), static_cast<size_t>(16 * rb)) << name;
    std::vector<uint8_t> row(rb);
    for (int64_t r = 0; r < 16; ++r) {
      quant::unpack_row(c.f, quant::Layout::kCudaMma8, c.k, c.cuda.data() + r / 8 * 8 * rb, static_cast<int>(r % 8),
                        row.data());
      if (r < c.n)
        EXPECT_EQ(std::memcmp(row.data(), c.w.data() + r * rb, rb), 0) << name << " row " << r;
      else
        EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](uint8_t v) { return v == 0; })) << name;
    }
  }
  EXPECT_EQ(*quant::parse_layout("cuda_mma_n8"), quant::Layout::kCudaMma8);
  EXPECT_STREQ(quant::layout_name(quant::Layout::kCudaMma8), "cuda_mma_n8");
}

// The layout's promise to the CUDA kernels, checked against the PTX ISA's fragment layout of the
// B operand of mma.m16n8k16 (.f16/.bf16): lane L holds column n = L / 4 and rows (k)
// 2 (L % 4) + {0, 1} (b0, b1) and + 8 (b2, b3). A lane reads its span bytes at the documented
// address and extracts codes with the documented recipe; each must be row n's code at that k,
// read from the row layout by this test's own decoder, and the lane's scale its row's.
TEST(QuantLayout, CudaMmaLanesFindTheirMmaFragments) {
  for (const char* name : {"int4-g32-f16-min", "int4-g64-bf16-sym", "int4-g128-f32-zp", "int8-g32-f16-sym",
                           "int8-g64-bf16-zp", "int4-row-f32-min", "int8-g16-f32-sym", "int5-g32-f16-sym",
                           "int5-g64-bf16-min"}) {
    const int64_t k = quant::parse_format(name)->group == 128 ? 384 : 320;  // a short last span
    Case c = make_case(name, 16, k, 8);
    const Format& f = c.f;
    const int64_t rb = *quant::row_bytes(f, c.k), g = quant::group_elems(f, c.k), G = c.k / g;
    const int sb = quant::scale_bytes(f.scale);
    const int ob = f.offset == quant::Offset::kMin ? sb : f.offset == quant::Offset::kZeroPoint ? 1 : 0;
    const int64_t W = f.bits == 8 ? 8 : 4;
    auto row_code = [&](int64_t n, int64_t e) {  // row layout: group header, then sub-blocks
      const uint8_t* grp = c.w.data() + n * rb + e / g * quant::group_bytes(f, g) + quant::header_bytes(f);
      const int64_t i = e % g, sub = i / 32, j = i % 32;
      if (f.bits == 8) return static_cast<unsigned>(grp[sub * 32 + j]);
      if (f.bits == 5) {  // a word of fifth bits, then the nibbles
        const uint8_t byte = grp[sub * 20 + 4 + j % 16];
        return static_cast<unsigned>((j < 16 ? byte & 15 : byte >> 4) | ((grp[sub * 20 + j / 8] >> (j % 8)) & 1) << 4);
      }
      const uint8_t byte = grp[sub * 16 + j % 16];
      return static_cast<unsigned>(j < 16 ? byte & 15 : byte >> 4);
    };
    for (int64_t tile = 0; tile < 2; ++tile) {
      const uint8_t* t = c.cuda.data() + tile * 8 * rb;
      const uint8_t* codes = t + 8 * G * (sb + ob);
      for (int64_t ks = 0; ks < c.k / 16; ++ks) {  // k-steps of the mma
        const int64_t span = ks * 16 / 128, m = std::min<int64_t>(4, (c.k - span * 128) / 32);
        const int64_t j = ks * 16 % 128 / 32, s = ks % 2;
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t n = tile * 8 + lane / 4, k0 = ks * 16 + 2 * (lane % 4);
          const uint8_t* mine = codes + span * 8 * 128 * f.bits / 8 + lane * m * W + j * W;
          unsigned b[4];
          if (f.bits != 8) {
            uint32_t word;
            std::memcpy(&word, mine, 4);
            const uint32_t lo = (word >> (4 * (2 * s))) & 0x000F000Fu;      // {b0, b1}
            const uint32_t hi = (word >> (4 * (2 * s + 1))) & 0x000F000Fu;  // {b2, b3}
            b[0] = lo & 15, b[1] = lo >> 16, b[2] = hi & 15, b[3] = hi >> 16;
            if (f.bits == 5) {  // nibble p's fifth bit: bit p of the lane's byte j after the span's nibbles
              const unsigned fifth = codes[span * 8 * 128 * 5 / 8 + m * 128 + lane * m + j];
              const int p[4] = {int(2 * s), int(2 * s + 4), int(2 * s + 1), int(2 * s + 5)};
              for (int i = 0; i < 4; ++i) b[i] |= ((fifth >> p[i]) & 1u) << 4;
            }
          } else {
            for (int i = 0; i < 4; ++i) b[i] = mine[4 * s + i];
          }
          const int64_t ks_k[4] = {k0, k0 + 1, k0 + 8, k0 + 9};
          for (int i = 0; i < 4; ++i)
            ASSERT_EQ(b[i], row_code(n, ks_k[i])) << name << " tile " << tile << " k-step " << ks << " lane " << lane << " b" << i;
          const int64_t gi = ks * 16 / g;
          ASSERT_EQ(std::memcmp(t + (gi * 8 + lane / 4) * sb, c.w.data() + n * rb + gi * quant::group_bytes(f, g), sb), 0)
              << name << " scale of lane " << lane;
        }
      }
    }
  }
}

TEST(QuantLinear, ReferenceContractEqualsF32LinearOverDequantizedWeights) {
  for (const char* name : kAllFormats) {
    Case c = make_case(name, 40, 256, 5);
    for (int64_t rows : {1, 5}) {
      std::vector<float> x = random_vec(rows * c.k, 9);
      ThreadPool pool(2);
      std::vector<float> want(rows * c.n);
      cpu::linear(x.data(), nullptr, rows, c.k, c.wf.data(), c.n, c.bias.data(), want.data(), pool);
      for (quant::Layout l : kAllLayouts)
        if (has_layout(c.f, l))
        EXPECT_TRUE(bit_equal(run_q(c, x, rows, cpu::CpuContract::kReference, 2, true, nullptr, l), want))
            << name << " rows " << rows << " " << quant::layout_name(l);
    }
  }
}

TEST(QuantLinear, FastContractSimdEqualsScalarOracle) {
  IsaGuard guard;
  if (detected_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  // 37 weight rows: two pairs of tiles and one more (AVX-512 takes tiles in pairs); 13: one pair,
  // its second tile short.
  for (const auto& [name, n] : [] {
         std::vector<std::pair<const char*, int64_t>> v;
         for (const char* f : kAllFormats) v.push_back({f, 37});
         v.push_back({"int4-g32-f16-min", 13});
         v.push_back({"int8-g32-f16-sym", 13});
         v.push_back({"int8-g16-f32-sym", 13});
         v.push_back({"int4-g256s16-f16-min", 13});
         return v;
       }()) {
    Case c = make_case(name, n, 512, 21);
    for (int64_t rows : {1, 3, 4, 9, 13}) {  // AVX-512: passes of 8, 4 and 1 tokens
      std::vector<float> x = random_vec(rows * c.k, 31 + rows);
      x[7] = 0.0f;  // a block with a zero element and one all-zero block
      std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
      set_active_isa(CpuIsa::kScalar);
      std::vector<float> scalar = run_q(c, x, rows, cpu::CpuContract::kFast, 1, rows % 2);
      for (quant::Layout l : {quant::Layout::kRowGroups, quant::Layout::kCudaMma8})
        if (has_layout(c.f, l))
        EXPECT_TRUE(bit_equal(scalar, run_q(c, x, rows, cpu::CpuContract::kFast, 2, rows % 2, nullptr, l)))
            << name << ": the scalar oracle reads every layout alike: " << quant::layout_name(l);
      for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512Vnni}) {
        if (isa > detected_isa()) continue;  // AVX-VNNI only where the CPU has it
        set_active_isa(isa);
        std::vector<float> simd = run_q(c, x, rows, cpu::CpuContract::kFast, 1, rows % 2);
        EXPECT_TRUE(bit_equal(scalar, simd)) << name << " rows " << rows << " " << isa_name(isa);
      }
    }
  }
}

TEST(QuantLinear, FastContractSimdHandlesExtremeCodes) {
  // GGUF Q8_0 may hold -128 (RTN never writes it) and zp/min int8 codes span 0..255: the SIMD
  // sign trick must still give the exact products (and nl codes' grid ends, -127 and 113); the
  // scales of 16 (Q6_K-like) read -128 and 127 as 0 and 255 unsigned.
  IsaGuard guard;
  if (detected_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar path exists";
  for (const char* name : {"int8-g32-f16-sym", "int8-g32-f16-zp", "int8-g32-f16-min", "int4-g32-f16-nl",
                           "int5-g32-f16-min", "int5-g32-f16-sym", "int8-g64s16-f16-sym", "int4-g64s16-f16-sym",
                           "int4-g64s16-f16-min", "int8-g64s16-f16-min"}) {
    Case c = make_case(name, 9, 64, 77);
    const int64_t rb = *quant::row_bytes(c.f, c.k), hb = quant::header_bytes(c.f);
    for (int64_t r = 0; r < c.n; ++r)  // (int5: the fifth bits and nibbles all set or alternating: 31, 16, 15)
      for (int i = 0; i < (c.f.bits == 5 ? 20 : 32); ++i)
        c.w[r * rb + hb + i] = (i + r) % 2 ? 0x80 : (c.f.offset == quant::Offset::kSym && c.f.bits == 8 ? 0x7F : 0xFF);
    retile(c);
    std::vector<float> x = random_vec(2 * c.k, 79);
    x[0] = -1.0f;  // this block's amax: a code of -127
    set_active_isa(CpuIsa::kScalar);
    std::vector<float> scalar = run_q(c, x, 2, cpu::CpuContract::kFast, 1, false);
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512Vnni}) {
      if (isa > detected_isa()) continue;
      set_active_isa(isa);
      EXPECT_TRUE(bit_equal(scalar, run_q(c, x, 2, cpu::CpuContract::kFast, 1, false))) << name << " " << isa_name(isa);
    }
  }
}

// The fast contract's int8 activations of x (codes, block scales, scaled and integer sums).
struct QuantizedActs {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> sums;
};
QuantizedActs quantize_acts(const std::vector<float>& x) {
  const size_t blocks = x.size() / 32;
  QuantizedActs a{std::vector<int8_t>(x.size()), std::vector<float>(blocks), std::vector<float>(blocks),
                  std::vector<int32_t>(blocks)};
  cpu::quantize_activations_scalar(x.data(), static_cast<int64_t>(x.size()), a.q.data(), a.d.data(), a.s.data(),
                                   a.sums.data());
  return a;
}

TEST(QuantLinear, FastContractScalarFollowsItsDefinition) {
  // dot_q_fast_scalar against the statement in kernels.h, written out again over the row
  // layout's codes: exact block sums, fma per block, plus the min term.
  Case c = make_case("int4-g64-f16-min", 3, 128, 4);
  std::vector<float> x = random_vec(128, 8);
  auto [q, d, s, sums] = quantize_acts(x);
  for (int b = 0; b < 4; ++b) {
    float amax = 0;
    int sum = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float id = 1.0f / (amax / 127.0f);
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(q[b * 32 + i], static_cast<int>(std::lrint(x[b * 32 + i] * id)));
      sum += q[b * 32 + i];
    }
    ASSERT_EQ(d[b], amax / 127.0f);
    ASSERT_EQ(s[b], d[b] * static_cast<float>(sum));
    ASSERT_EQ(sums[b], sum);
  }
  const int64_t rb = *quant::row_bytes(c.f, 128);
  for (int64_t r = 0; r < 3; ++r) {
    const uint8_t* row = c.w.data() + r * rb;
    float acc = 0, msum = 0;
    for (int b = 0; b < 4; ++b) {
      const uint8_t* grp = row + (b / 2) * quant::group_bytes(c.f, 64);
      const float dw = quant::load_scale(c.f.scale, grp), m = quant::load_scale(c.f.scale, grp + 2);
      const uint8_t* codes = grp + 4 + (b % 2) * 16;
      int p = 0;
      for (int i = 0; i < 32; ++i) p += (i < 16 ? (codes[i] & 15) : (codes[i - 16] >> 4)) * q[b * 32 + i];
      acc = std::fma(dw * d[b], static_cast<float>(p), acc);
      msum = std::fma(m, s[b], msum);
    }
    for (quant::Layout l : {quant::Layout::kRowGroups, quant::Layout::kInterleaved8})
      EXPECT_EQ(cpu::dot_q_fast_scalar(c.m(l), r, q.data(), d.data(), s.data()), acc + msum) << r;
  }
}

TEST(QuantLinear, FastContractScalarReadsNlCodesAsTheirGridValues) {
  // nl: P_b = sum over the block of grid[nibble] * q, one fma per block, no min term.
  Case c = make_case("int4-g64-f32-nl", 3, 128, 6);
  std::vector<float> x = random_vec(128, 9);
  auto [q, d, s, sums] = quantize_acts(x);
  const int64_t rb = *quant::row_bytes(c.f, 128);
  for (int64_t r = 0; r < 3; ++r) {
    const uint8_t* row = c.w.data() + r * rb;
    float acc = 0;
    for (int b = 0; b < 4; ++b) {
      const uint8_t* grp = row + (b / 2) * quant::group_bytes(c.f, 64);
      const float dw = quant::load_scale(c.f.scale, grp);
      const uint8_t* codes = grp + 4 + (b % 2) * 16;
      int p = 0;
      for (int i = 0; i < 32; ++i)
        p += quant::kNlGrid[i < 16 ? (codes[i] & 15) : (codes[i - 16] >> 4)] * q[b * 32 + i];
      acc = std::fma(dw * d[b], static_cast<float>(p), acc);
    }
    for (quant::Layout l : {quant::Layout::kRowGroups, quant::Layout::kInterleaved8})
      EXPECT_EQ(cpu::dot_q_fast_scalar(c.m(l), r, q.data(), d.data(), s.data()), acc + 0.0f) << r;
  }
}

TEST(QuantLinear, FastContractScalarSplitsBlocksAtGroupsOf16) {
  // Groups of 16: each activation block's integer sum taken per half, with that half's scale,
  // halves in element order (kernels.h), written out again over the row layout.
  Case c = make_case("int8-g16-f32-sym", 3, 96, 14);
  auto [q, d, s, sums] = quantize_acts(random_vec(96, 15));
  const int64_t rb = *quant::row_bytes(c.f, 96);
  for (int64_t r = 0; r < 3; ++r) {
    float acc = 0;
    for (int h = 0; h < 6; ++h) {
      const uint8_t* grp = c.w.data() + r * rb + h * 20;
      int p = 0;
      for (int i = 0; i < 16; ++i) p += static_cast<int8_t>(grp[4 + i]) * q[16 * h + i];
      acc = std::fma(quant::load_scale(c.f.scale, grp) * d[h / 2], static_cast<float>(p), acc);
    }
    for (quant::Layout l : {quant::Layout::kRowGroups, quant::Layout::kInterleaved8})
      EXPECT_EQ(cpu::dot_q_fast_scalar(c.m(l), r, q.data(), d.data(), s.data()), acc) << r;
  }
}

TEST(QuantLinear, FastContractScalarTakesHalfMinsWithHalfSums) {
  // Min groups of 16: each half's integer sum with its scale, and its min times the block's
  // activation scale times the half's own sum of activation codes (not the block's s_b), the
  // mins summed apart in element order (kernels.h), written out again over the row layout.
  Case c = make_case("int8-g16-f32-min", 3, 96, 16);
  auto [q, d, s, sums] = quantize_acts(random_vec(96, 17));
  const int64_t rb = *quant::row_bytes(c.f, 96);
  for (int64_t r = 0; r < 3; ++r) {
    float acc = 0, msum = 0;
    for (int h = 0; h < 6; ++h) {
      const uint8_t* grp = c.w.data() + r * rb + h * 24;
      int p = 0, xs = 0;
      for (int i = 0; i < 16; ++i) {
        p += grp[8 + i] * q[16 * h + i];
        xs += q[16 * h + i];
      }
      acc = std::fma(quant::load_scale(c.f.scale, grp) * d[h / 2], static_cast<float>(p), acc);
      msum = std::fma(quant::load_scale(c.f.scale, grp + 4), d[h / 2] * static_cast<float>(xs), msum);
    }
    for (quant::Layout l : {quant::Layout::kRowGroups, quant::Layout::kInterleaved8})
      EXPECT_EQ(cpu::dot_q_fast_scalar(c.m(l), r, q.data(), d.data(), s.data()), acc + msum) << r;
  }
}

TEST(QuantLinear, FormatsComputeAsTheirExpansion) {
  // Both contracts, every ISA level and layout: the outputs of a sub-scale or int5 format are
  // those of its expansion (groups of `sub` with f32 scales d * sc_j; int8 codes), bit for bit;
  // so GGUF k-quant and Q5 plans held natively give what they gave held widened.
  IsaGuard guard;
  for (const char* name : {"int4-g256s32-f16-min", "int8-g256s32-f16-min", "int8-g256s16-f16-sym",
                           "int4-g256s32-f16-nl", "int4-g64s32-bf16-sym", "int4-g256s16-f16-sym",
                           "int4-g64s16-bf16-sym", "int4-g256s16-f16-min", "int4-g64s16-bf16-min",
                           "int8-g64s16-f16-min", "int5-g32-f16-sym", "int5-g32-f16-min",
                           "int5-g256s32-f16-min", "int5-g64-bf16-zp", "int5-row-f32-sym"}) {
    Case c = make_case(name, 21, 512, 93);
    const Format wf = quant::expanded_format(c.f);
    Case w{wf, c.n, c.k, {}, {}, {}, c.wf, c.bias};
    const int64_t rb = *quant::row_bytes(c.f, c.k), wrb = *quant::row_bytes(wf, c.k);
    w.w.resize(c.n * wrb);
    for (int64_t r = 0; r < c.n; ++r) quant::expand_row(c.f, c.w.data() + r * rb, c.k, w.w.data() + r * wrb);
    retile(w);
    const std::vector<float> x = random_vec(9 * c.k, 95);
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512Vnni}) {
      if (isa > detected_isa()) continue;
      set_active_isa(isa);
      for (cpu::CpuContract contract : {cpu::CpuContract::kFast, cpu::CpuContract::kReference})
        for (quant::Layout l : kAllLayouts)
          if (has_layout(c.f, l))
          EXPECT_TRUE(bit_equal(run_q(c, x, 9, contract, 2, true, nullptr, l), run_q(w, x, 9, contract, 2, true, nullptr, l)))
              << name << " " << isa_name(isa) << " " << cpu::contract_name(contract) << " " << quant::layout_name(l);
    }
  }
}

TEST(QuantLinear, FastContractIsCloseToExactDot) {
  // int8 activations add a relative error of about 1/254 per block; the sum stays well within
  // 1% of the output's scale.
  for (const char* name : kAllFormats) {
    Case c = make_case(name, 24, 512, 41);
    const int64_t rows = 3;
    std::vector<float> x = random_vec(rows * c.k, 43);
    std::vector<float> y = run_q(c, x, rows, cpu::CpuContract::kFast, 2, false);
    double scale = 0;
    std::vector<double> want(rows * c.n);
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, a = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          s += static_cast<double>(x[t * c.k + i]) * c.wf[j * c.k + i];
          a += std::fabs(static_cast<double>(x[t * c.k + i]) * c.wf[j * c.k + i]);
        }
        want[t * c.n + j] = s;
        scale = std::max(scale, a);
      }
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 0.01 * scale) << name << " at " << i;
  }
}

TEST(QuantLinear, ResultsDoNotDependOnBatchRowsOrThreads) {
  for (cpu::CpuContract contract : {cpu::CpuContract::kReference, cpu::CpuContract::kFast}) {
    for (const char* name : {"int4-g32-f16-min", "int8-g32-f16-sym", "int4-g128-f16-zp"}) {
      Case c = make_case(name, 50, 256, 61);
      const int64_t rows = 11;  // AVX-512: a pass of 8 tokens, then 1 at a time
      std::vector<float> x = random_vec(rows * c.k, 63);
      std::vector<float> all = run_q(c, x, rows, contract, 3, true);
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<float> one(x.begin() + t * c.k, x.begin() + (t + 1) * c.k);
        std::vector<float> alone = run_q(c, one, 1, contract, 1, true);
        EXPECT_TRUE(bit_equal(alone, std::vector<float>(all.begin() + t * c.n, all.begin() + (t + 1) * c.n)))
            << name << " " << cpu::contract_name(contract) << " row " << t;
      }
      // Row indirection (logits): rows 6, 0 of x.
      const int32_t idx[2] = {6, 0};
      std::vector<float> picked = run_q(c, x, 2, contract, 2, true, idx);
      EXPECT_TRUE(bit_equal(std::vector<float>(picked.begin(), picked.begin() + c.n),
                            std::vector<float>(all.begin() + 6 * c.n, all.begin() + 7 * c.n)));
    }
  }
}

TEST(QuantLinear, EmbeddingDequantizesRows) {
  Case c = make_case("int4-g32-f16-min", 10, 64, 71);
  const int32_t tokens[3] = {9, 0, 4};
  std::vector<float> out(3 * 64);
  ThreadPool pool(2);
  cpu::QuantScratch sc;
  for (quant::Layout l : kAllLayouts) {
    std::fill(out.begin(), out.end(), -1.0f);
    cpu::embedding_q(tokens, 3, c.m(l), out.data(), sc, pool);
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(std::memcmp(out.data() + t * 64, c.wf.data() + tokens[t] * 64, 64 * sizeof(float)), 0)
          << quant::layout_name(l);
  }
}

TEST(QuantLinear, ContractNames) {
  EXPECT_EQ(*cpu::parse_contract("fast"), cpu::CpuContract::kFast);
  EXPECT_EQ(*cpu::parse_contract("reference"), cpu::CpuContract::kReference);
  EXPECT_FALSE(cpu::parse_contract("turbo").ok());
}


// ---------------- fp8 (E4M3) KV cache elements ----------------

TEST(Fp8E4m3, ConversionsAreMlDtypesFloat8E4m3fn) {
  // tests/fixtures/fp8/e4m3_vectors.json, written by tests/reference/make_fp8_vectors.py with
  // ml_dtypes: the value of every code, and 3015 conversions (every value, the ties between
  // neighbours and one f32 step either side, random draws over the range, signed zeros).
  std::ifstream in(std::string(LLMRT_TEST_SOURCE_DIR) + "/tests/fixtures/fp8/e4m3_vectors.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["decode"].size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float got = quant::e4m3_to_float(static_cast<uint8_t>(c));
    if (j["decode"][c].is_null())
      EXPECT_TRUE(std::isnan(got)) << c;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(got), j["decode"][c].get<uint32_t>()) << c;
  }
  ASSERT_GT(j["encode"].size(), 3000u);
  for (const auto& e : j["encode"]) {
    const float x = std::bit_cast<float>(e[0].get<uint32_t>());
    ASSERT_EQ(int{quant::float_to_e4m3(x)}, e[1].get<int>()) << x;
  }
}

TEST(Fp8E4m3, SaturatesAndKeepsNaN) {
  // Past the largest finite value (448) every input becomes +-448, infinities included, as CUDA's
  // cvt.rn.satfinite does (ml_dtypes gives NaN there: not in the vectors); a NaN stays a NaN.
  for (const float x : {448.0f, 463.9f, 464.0f, 480.0f, 1e6f, 3.4e38f, INFINITY}) {
    EXPECT_EQ(quant::float_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(quant::float_to_e4m3(-x), 0xFE) << x;
  }
  EXPECT_TRUE(std::isnan(quant::e4m3_to_float(quant::float_to_e4m3(NAN))));
  EXPECT_TRUE(std::isnan(quant::e4m3_to_float(quant::float_to_e4m3(-NAN))));
  // Every code that is not NaN converts back to itself.
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) EXPECT_EQ(int{quant::float_to_e4m3(quant::e4m3_to_float(static_cast<uint8_t>(c)))}, c);
}

// ---------------- int8 KV cache ----------------

TEST(KvCacheInt8, AttentionEqualsF32CacheOfTheDequantizedRows) {
  // Attention dequantizes a block's run of rows at a time (code * the row's scale) into a buffer
  // and runs the f32 kernels: the bits of an f32 cache of the dequantized rows, at every ISA level.
  // head_dim 512 with blocks of 16 dequantizes a block in runs of 8 rows (the buffer's size).
  IsaGuard guard;
  for (const auto& [hd, bs, rows] : {std::tuple{64, 4, 9}, std::tuple{512, 16, 40}})
    for (CpuIsa isa : isa_levels()) {
      SCOPED_TRACE("hd " + std::to_string(hd) + " " + isa_name(isa));
      set_active_isa(isa);
      const int heads = 4, kv_heads = 2, nb = (rows + bs - 1) / bs, blocks = 2 * nb;
      const int64_t elems = static_cast<int64_t>(blocks) * kv_heads * bs * hd;
      std::vector<int8_t> k8(elems), v8(elems);
      std::vector<float> ks(elems / hd), vs(elems / hd), kf(elems), vf(elems);
      cpu::KvLayer q8;
      q8.k8 = k8.data(), q8.v8 = v8.data(), q8.ks = ks.data(), q8.vs = vs.data();
      q8.num_blocks = blocks, q8.num_kv_heads = kv_heads, q8.block_size = bs, q8.head_dim = hd;
      // One sequence of `rows` tokens in scattered blocks (positions 0 .. rows - 1).
      std::vector<float> k = random_vec(rows * kv_heads * hd, 81), v = random_vec(rows * kv_heads * hd, 82);
      std::fill(k.begin() + 2 * kv_heads * hd, k.begin() + 2 * kv_heads * hd + hd, 0.0f);  // a zero row
      std::vector<int32_t> table(nb);
      for (int b = 0; b < nb; ++b) table[b] = blocks - 1 - 2 * b;
      std::vector<int64_t> slots(rows);
      std::vector<int32_t> positions(rows), seq(rows, 0);
      for (int t = 0; t < rows; ++t) {
        slots[t] = static_cast<int64_t>(table[t / bs]) * bs + t % bs;
        positions[t] = t;
      }
      ThreadPool pool(2);
      cpu::kv_store(k.data(), v.data(), rows, slots.data(), q8, pool);
      // Codes are within 1/2 step of the input; each row's scale is its own amax / 127.
      for (int t = 0; t < rows; ++t)
        for (int h = 0; h < kv_heads; ++h) {
          const int64_t row = (static_cast<int64_t>(table[t / bs]) * kv_heads + h) * bs + t % bs;
          float amax = 0;
          for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(k[(t * kv_heads + h) * hd + d]));
          ASSERT_EQ(ks[row], amax / 127.0f);
          for (int d = 0; d < hd; ++d) {
            const float deq = static_cast<float>(k8[row * hd + d]) * ks[row];
            ASSERT_LE(std::fabs(deq - k[(t * kv_heads + h) * hd + d]), 0.5f * ks[row] * 1.001f);
            kf[row * hd + d] = deq;
            vf[row * hd + d] = static_cast<float>(v8[row * hd + d]) * vs[row];
          }
        }
      cpu::KvLayer f32 = q8;
      f32.k8 = f32.v8 = nullptr;
      f32.ks = f32.vs = nullptr;
      f32.k = kf.data();
      f32.v = vf.data();
      std::vector<float> q = random_vec(rows * heads * hd, 83);
      cpu::AttentionBatch ab;
      ab.positions = positions.data();
      ab.seq_of_row = seq.data();
      ab.block_tables = table.data();
      ab.max_blocks_per_seq = nb;
      std::vector<float> scratch(2 * rows), o8(rows * heads * hd), of(rows * heads * hd);
      const float scale = 1.0f / std::sqrt(float(hd));
      cpu::paged_attention(q.data(), rows, ab, q8, heads, scale, 0, o8.data(), scratch.data(), rows, pool);
      cpu::paged_attention(q.data(), rows, ab, f32, heads, scale, 0, of.data(), scratch.data(), rows, pool);
      EXPECT_TRUE(bit_equal(o8, of));
    }
}

}  // namespace
}  // namespace llmrt

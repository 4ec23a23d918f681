// The to_bf16 kernel (codegen/ConvertKernel.cpp), which writes a GEMM library step's f32 input
// as bf16, through the host emulation against the runtime's f32 -> bf16 conversion
// (runtime/quant/quant_format.h: round to nearest, ties to even). Bit for bit, on every kind of
// value: ties both ways, NaN (quieted, sign kept), infinities, finite values that round past
// bf16's largest, denormals, signed zeros, and random bit patterns over all exponents; rows of
// widths the kernel reads 4 at a time and widths it reads one by one, with grids of fewer blocks
// than rows.

#include "codegen/KernelFamilies.h"
#include "runtime/quant/quant_format.h"

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

using llmc::testing::HostKernel;
using llmc::testing::gridFor;
using ToBf16Fn = void (*)(const float *, unsigned short *, int, unsigned);

/// f32 bit patterns and their bf16 rounding, worked out by hand.
struct Special {
  uint32_t f32;
  uint16_t bf16;
};
constexpr Special kSpecials[] = {
    {0x3F800000u, 0x3F80u}, // 1.0: exact
    {0x3F808000u, 0x3F80u}, // tie, even below: down
    {0x3F818000u, 0x3F82u}, // tie, odd below: up to even
    {0x3F808001u, 0x3F81u}, // just above a tie: up
    {0x3F807FFFu, 0x3F80u}, // just below a tie: down
    {0xBF818000u, 0xBF82u}, // negative tie: magnitude to even
    {0x3FFFFFFFu, 0x4000u}, // carries into the exponent
    {0x00000000u, 0x0000u}, // +0
    {0x80000000u, 0x8000u}, // -0
    {0x00000001u, 0x0000u}, // smallest denormal: to 0
    {0x80000001u, 0x8000u}, // ... keeping its sign
    {0x00008000u, 0x0000u}, // denormal tie, even below
    {0x00018000u, 0x0002u}, // denormal tie, odd below
    {0x007FFFFFu, 0x0080u}, // largest denormal: up to the smallest normal
    {0x00400000u, 0x0040u}, // a denormal bf16 holds exactly
    {0x7F7F7FFFu, 0x7F7Fu}, // below the midpoint past bf16's largest finite
    {0x7F7F8000u, 0x7F80u}, // that midpoint (a tie, odd below): +inf, as IEEE rounds
    {0x7F7FFFFFu, 0x7F80u}, // FLT_MAX: +inf
    {0xFF7FFFFFu, 0xFF80u}, // -FLT_MAX: -inf
    {0x7F800000u, 0x7F80u}, // +inf
    {0xFF800000u, 0xFF80u}, // -inf
    {0x7FC00000u, 0x7FC0u}, // quiet NaN
    {0xFFC00000u, 0xFFC0u}, // negative quiet NaN
    {0x7F800001u, 0x7FC0u}, // signalling NaN, payload only in the low bits: NaN, not inf
    {0xFF800001u, 0xFFC0u}, // ... negative
    {0x7F80FFFFu, 0x7FC0u}, // a payload plain rounding would change (to 0x7F81)
    {0x7FFFFFFFu, 0x7FFFu}, // all-ones NaN: plain rounding would carry into the sign (-0)
    {0xFFFFFFFFu, 0xFFFFu},
    {0x7FBF8000u, 0x7FFFu}, // signalling NaN with a high payload: quieted, payload kept
};

/// The inputs: the specials, then random bit patterns over the whole range.
std::vector<uint32_t> inputBits(size_t n, uint32_t seed) {
  std::vector<uint32_t> bits(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < n; ++i) {
    if (i < std::size(kSpecials)) {
      bits[i] = kSpecials[i].f32;
      continue;
    }
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    bits[i] = uint32_t(s >> 32);
    if (i % 3 == 0) // a third with the low half exactly a tie: rounding decided by the even rule
      bits[i] = (bits[i] & 0xFFFF0000u) | 0x8000u;
  }
  return bits;
}

TEST(ConvertKernel, HandWorkedRoundingsMatchTheRuntime) {
  // The reference itself (the CPU backend's bf16 rounding) against the table above.
  for (const Special &s : kSpecials)
    EXPECT_EQ(llmrt::quant::float_to_bf16(std::bit_cast<float>(s.f32)), s.bf16) << std::hex << s.f32;
}

void checkWidth(int64_t width) {
  SCOPED_TRACE("width " + std::to_string(width));
  auto spec = llmc::emitToBf16Kernel(width);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "to_bf16");
  EXPECT_EQ(spec->gridRule, "rows");
  EXPECT_EQ(spec->entry.rfind("llm_to_bf16_k" + std::to_string(width) + "_", 0), 0u) << spec->entry;
  ASSERT_EQ(spec->blockDim.size(), 3u);
  EXPECT_EQ(spec->blockDim[1], 1);
  EXPECT_EQ(spec->blockDim[2], 1);
  EXPECT_EQ(spec->sharedMemBytes, 0u);
  HostKernel k(*spec, "const float *x, unsigned short *y, int T", "x, y, T");
  ASSERT_TRUE(k.ok()) << k.error();
  auto run = k.get<ToBf16Fn>();

  const int T = 5;
  const size_t n = size_t(T) * size_t(width);
  const std::vector<uint32_t> bits = inputBits(n, uint32_t(width));
  std::vector<float> x(n);
  std::memcpy(x.data(), bits.data(), n * sizeof(float));
  // The kernel's grid (one block per row), then fewer blocks than rows (grid-stride loop).
  for (unsigned grid : {unsigned(gridFor(*spec, T)), 2u, 1u}) {
    SCOPED_TRACE("grid " + std::to_string(grid));
    // One row more than T: it must stay untouched (device memory is not zeroed).
    std::vector<uint16_t> y(n + size_t(width), 0xA5A5);
    run(x.data(), reinterpret_cast<unsigned short *>(y.data()), T, grid);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = llmrt::quant::float_to_bf16(x[i]);
      if (y[i] != want && ++bad <= 5)
        ADD_FAILURE() << "element " << i << " (row " << i / size_t(width) << "): f32 0x" << std::hex << bits[i]
                      << " gave 0x" << y[i] << ", want 0x" << want;
    }
    EXPECT_EQ(bad, 0u);
    for (size_t i = n; i < y.size(); ++i)
      ASSERT_EQ(y[i], 0xA5A5) << "wrote past row T - 1 at element " << i;
  }
  // A row's conversion depends on nothing else: one row alone gives the same bits.
  std::vector<uint16_t> all(n), one(static_cast<size_t>(width));
  run(x.data(), reinterpret_cast<unsigned short *>(all.data()), T, unsigned(T));
  run(x.data() + 3 * size_t(width), reinterpret_cast<unsigned short *>(one.data()), 1, 1);
  EXPECT_EQ(std::memcmp(one.data(), all.data() + 3 * size_t(width), size_t(width) * 2), 0);
  // T = 0 writes nothing.
  std::vector<uint16_t> untouched(size_t(width), 0x1234);
  run(x.data(), reinterpret_cast<unsigned short *>(untouched.data()), 0, 1);
  EXPECT_EQ(untouched[0], 0x1234);
}

TEST(ConvertKernel, ToBf16MatchesTheRuntimeBitForBit) {
  // Widths read 4 at a time (multiples of 4: 16-byte loads) and one by one (the others). The
  // specials lead the row-major input: widths of 6 and more hold them all (over rows 0..4 or in
  // row 0), widths 1 and 3 the first 5 and 15.
  for (int64_t width : {1, 3, 4, 6, 100, 1001, 1024})
    checkWidth(width);
}

TEST(ConvertKernel, RefusesWidthsItCannotIndex) {
  EXPECT_FALSE(llmc::emitToBf16Kernel(0).ok());
  EXPECT_FALSE(llmc::emitToBf16Kernel(-4).ok());
  EXPECT_FALSE(llmc::emitToBf16Kernel((int64_t(1) << 24) + 4).ok());
  EXPECT_TRUE(llmc::emitToBf16Kernel(int64_t(1) << 24).ok());
}

} // namespace

// exp() for the CPU kernels (softmax, SiLU) as a short polynomial, so that vector lanes run it at
// once: exp_scalar below and the Highway form in vector_ops.cc perform the same operations in the
// same order (fused multiply-adds included) and give bit-identical results. Internal to runtime/cpu.
//
// Method (Cody-Waite range reduction and the minimax polynomial of the public-domain Cephes
// library's expf; public constants): x is clamped to [-87.3, 88], n = round(x * log2(e)),
// r = x - n * ln2 (in two parts), exp(r) = 1 + r + r^2 * P(r), times 2^n built in the exponent
// bits. Relative error below 2^-22 over the range (tests/unit/cpu_kernels_test.cc); below -87.3
// the result is exp(-87.3) ~ 1.2e-38 instead of a subnormal or 0, above 88 it is exp(88). A NaN
// input gives NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>


namespace llmrt::cpu {

namespace vexp {
inline constexpr float kLo = -87.3f, kHi = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace vexp

inline float exp_scalar(float x) {
  using namespace vexp;
  x = kLo > x ? kLo : x;  // as max_ps(lo, x): a NaN x stays NaN
  x = kHi < x ? kHi : x;  // as min_ps(hi, x)
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  float y = std::fma(p, r * r, r);
  y = y + 1.0f;
  const int32_t e = n == n ? static_cast<int32_t>(n) : 0;  // NaN: y is NaN already
  return y * std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(e + 127) << 23));
}


}  // namespace llmrt::cpu

// Highway implementations of vector_ops.h. foreach_target.h re-includes this file once per target
// in HWY_TARGETS (here AVX2, AVX-512 "AVX3" and the baseline); the dispatch at the end calls the
// AVX2 or AVX3 namespace by active_isa(), or the scalar twin. SSSE3/SSE4 are left out: the
// dispatch never picks them, so they would only cost build time.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/vector_ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/cpu/vector_ops.h"
#include "runtime/cpu/vexp.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu::vec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp_scalar (vexp.h), lane by lane: same clamps, rounding, fma chain and exponent construction.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp(D d, V x) {
  using namespace vexp;
  const hn::RebindToSigned<D> di;
  x = hn::Max(hn::Set(d, kLo), x);  // a NaN x stays NaN (maxps returns its second operand)
  x = hn::Min(hn::Set(d, kHi), x);
  const V n = hn::Round(hn::Mul(x, hn::Set(d, kLog2e)));
  V r = hn::MulAdd(n, hn::Set(d, -kLn2Hi), x);
  r = hn::MulAdd(n, hn::Set(d, -kLn2Lo), r);
  V p = hn::Set(d, kP0);
  p = hn::MulAdd(p, r, hn::Set(d, kP1));
  p = hn::MulAdd(p, r, hn::Set(d, kP2));
  p = hn::MulAdd(p, r, hn::Set(d, kP3));
  p = hn::MulAdd(p, r, hn::Set(d, kP4));
  p = hn::MulAdd(p, r, hn::Set(d, kP5));
  V y = hn::MulAdd(p, hn::Mul(r, r), r);
  y = hn::Add(y, hn::Set(d, 1.0f));
  // n is integral in [-126, 127] (NaN lanes give some scale; y is NaN there already).
  const auto e = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::Mul(y, hn::BitCast(d, e));
}

// Full vectors here; the caller finishes the tail with the scalar twin. Returns elements done.
int64_t SiluMul(const float* g, const float* u, int64_t n, float* o) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, g + i);
    const auto den = hn::Add(one, Exp(d, hn::Neg(x)));
    hn::StoreU(hn::Mul(hn::Div(x, den), hn::LoadU(d, u + i)), d, o + i);
  }
  return i;
}

int64_t ExpShifted(float* x, int64_t n, float m) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto mv = hn::Set(d, m);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Exp(d, hn::Sub(hn::LoadU(d, x + i), mv)), d, x + i);
  return i;
}

int64_t Axpy(float a, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto av = hn::Set(d, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(av, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  return i;
}

// y is kept in 8 registers across all rows j (one pass over y per 8 vectors).
int64_t AxpyRows(const float* a, int64_t count, const float* x, int64_t x_stride, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nv_all = n / N;
  for (int64_t v0 = 0; v0 < nv_all; v0 += 8) {
    const int nv = static_cast<int>(std::min<int64_t>(8, nv_all - v0));
    float* yb = y + v0 * N;
    V acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = hn::Zero(d);
    for (int i = 0; i < nv; ++i) acc[i] = hn::LoadU(d, yb + i * N);
    for (int64_t j = 0; j < count; ++j) {
      const auto av = hn::Set(d, a[j]);
      const float* xj = x + j * x_stride + v0 * N;
      for (int i = 0; i < nv; ++i) acc[i] = hn::MulAdd(av, hn::LoadU(d, xj + i * N), acc[i]);
    }
    for (int i = 0; i < nv; ++i) hn::StoreU(acc[i], d, yb + i * N);
  }
  return nv_all * N;
}

// Rows r < rows of y, each its own axpy_rows over the same x rows: each x vector loaded once for
// up to 3 of them (3 x 4 accumulators and 4 x vectors stay in registers), every y element's
// fmas in j order as axpy_rows does them.
int64_t AxpyRowsMulti(const float* const* a, int rows, int64_t count, const float* x, int64_t x_stride,
                      float* const* y, int64_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nv_all = n / N;
  for (int64_t v0 = 0; v0 < nv_all; v0 += 4) {
    const int nv = static_cast<int>(std::min<int64_t>(4, nv_all - v0));
    for (int r0 = 0; r0 < rows; r0 += 3) {
      const int rr = std::min(3, rows - r0);
      V acc[3][4];
      for (int r = 0; r < 3; ++r)
        for (int i = 0; i < 4; ++i) acc[r][i] = hn::Zero(d);
      for (int r = 0; r < rr; ++r)
        for (int i = 0; i < nv; ++i) acc[r][i] = hn::LoadU(d, y[r0 + r] + (v0 + i) * N);
      for (int64_t j = 0; j < count; ++j) {
        const float* xj = x + j * x_stride + v0 * N;
        V xv[4];
        for (int i = 0; i < 4; ++i) xv[i] = i < nv ? hn::LoadU(d, xj + i * N) : hn::Zero(d);
        for (int r = 0; r < rr; ++r) {
          const auto av = hn::Set(d, a[r0 + r][j]);
          for (int i = 0; i < nv; ++i) acc[r][i] = hn::MulAdd(av, xv[i], acc[r][i]);
        }
      }
      for (int r = 0; r < rr; ++r)
        for (int i = 0; i < nv; ++i) hn::StoreU(acc[r][i], d, y[r0 + r] + (v0 + i) * N);
    }
  }
  return nv_all * N;
}

int64_t Add(const float* a, const float* b, float* c, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, c + i);
  return i;
}

int64_t ScaleMul(const float* x, float s, const float* w, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto sv = hn::Set(d, s);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), sv), hn::LoadU(d, w + i)), d, y + i);
  return i;
}

int64_t Rotate(const float* x0, const float* x1, const float* c, const float* s, float* y0, float* y1,
               int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto a = hn::LoadU(d, x0 + i), b = hn::LoadU(d, x1 + i);
    const auto cv = hn::LoadU(d, c + i), sv = hn::LoadU(d, s + i);
    hn::StoreU(hn::Sub(hn::Mul(a, cv), hn::Mul(b, sv)), d, y0 + i);
    hn::StoreU(hn::Add(hn::Mul(b, cv), hn::Mul(a, sv)), d, y1 + i);
  }
  return i;
}

int64_t WidenF16(const uint16_t* h, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(h + i))), d, out + i);
  return i;
}

// An fp8 E4M3 code's exponent and mantissa moved into a half's place, widened (F16C) and scaled
// by 2^8 (quant::e4m3_to_float); the NaN codes come out as +-480, never a finite value (448 is the
// largest), and become NaN.
int64_t WidenE4m3(const uint8_t* c, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<uint16_t, decltype(d)> du;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto mag = hn::Set(du, 0x7F), sgn = hn::Set(du, 0x80);
  const auto k256 = hn::Set(d, 256.0f), k480 = hn::Set(d, 480.0f), nan = hn::Set(d, std::numeric_limits<float>::quiet_NaN());
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::PromoteTo(du, hn::LoadU(d8, c + i));
    const auto h = hn::Or(hn::ShiftLeft<7>(hn::And(x, mag)), hn::ShiftLeft<8>(hn::And(x, sgn)));
    const auto f = hn::Mul(hn::PromoteTo(d, hn::BitCast(dh, h)), k256);
    hn::StoreU(hn::IfThenElse(hn::Eq(hn::Abs(f), k480), nan, f), d, out + i);
  }
  return i;
}

int64_t DequantI8(const int8_t* c, float scale, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, c + i))), s), d, out + i);
  return i;
}

int64_t WidenBf16(const uint16_t* h, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint16_t, decltype(d)> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, h + i)))), d, out + i);
  return i;
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu::vec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "runtime/cpu/cpu_features.h"
#include "runtime/quant/quant_format.h"

namespace llmrt::cpu::vec {
namespace {

// ---------------- scalar twins: the statement of each kernel, also the tails ----------------

void silu_mul_scalar(const float* g, const float* u, int64_t n, float* o) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + exp_scalar(-g[i])) * u[i];
}
void exp_shifted_scalar(float* x, int64_t n, float m) {
  for (int64_t i = 0; i < n; ++i) x[i] = exp_scalar(x[i] - m);
}
void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}
void add_scalar(const float* a, const float* b, float* c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
void scale_mul_scalar(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * s) * w[i];
}
void rotate_scalar(const float* x0, const float* x1, const float* c, const float* s, float* y0,
                   float* y1, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = x0[i], b = x1[i];
    y0[i] = a * c[i] - b * s[i];
    y1[i] = b * c[i] + a * s[i];
  }
}

enum class Level { kScalar, kAvx2, kAvx3 };

// Highway's AVX3 target needs AVX-512 F/BW/DQ/VL; kAvx512Vnni guarantees F/BW/VL (+VNNI).
Level level() {
#if HWY_ARCH_X86
  const CpuIsa isa = active_isa();
  if (isa >= CpuIsa::kAvx512Vnni) {
    static const bool dq = (__builtin_cpu_init(), __builtin_cpu_supports("avx512dq") != 0);
    if (dq) return Level::kAvx3;
  }
  if (isa >= CpuIsa::kAvx2) return Level::kAvx2;
#endif
  return Level::kScalar;
}

// Calls the widest compiled target for the level (the SIMD part returns how many elements it did).
#if HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX3) && (HWY_TARGETS & HWY_AVX2)
#define LLMRT_VEC_DISPATCH(fn, ...)                                                 \
  [&](Level l) {                                                                    \
    return l == Level::kAvx3 ? N_AVX3::fn(__VA_ARGS__)                              \
           : l == Level::kAvx2 ? N_AVX2::fn(__VA_ARGS__) : int64_t{0};             \
  }(level())
#elif HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX2)
#define LLMRT_VEC_DISPATCH(fn, ...) (level() != Level::kScalar ? N_AVX2::fn(__VA_ARGS__) : int64_t{0})
#else
#define LLMRT_VEC_DISPATCH(fn, ...) int64_t{0}
#endif

}  // namespace

void silu_mul(const float* g, const float* u, int64_t n, float* o) {
  const int64_t i = LLMRT_VEC_DISPATCH(SiluMul, g, u, n, o);
  silu_mul_scalar(g + i, u + i, n - i, o + i);
}

void exp_shifted(float* x, int64_t n, float m) {
  const int64_t i = LLMRT_VEC_DISPATCH(ExpShifted, x, n, m);
  exp_shifted_scalar(x + i, n - i, m);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(Axpy, a, x, y, n);
  axpy_scalar(a, x + i, y + i, n - i);
}

void axpy_rows(const float* a, int64_t count, const float* x, int64_t x_stride, float* y, int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(AxpyRows, a, count, x, x_stride, y, n);
  for (int64_t j = 0; j < count; ++j) axpy_scalar(a[j], x + j * x_stride + i, y + i, n - i);
}

void axpy_rows_multi(const float* const* a, int rows, int64_t count, const float* x, int64_t x_stride,
                     float* const* y, int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(AxpyRowsMulti, a, rows, count, x, x_stride, y, n);
  for (int r = 0; r < rows; ++r)
    for (int64_t j = 0; j < count; ++j) axpy_scalar(a[r][j], x + j * x_stride + i, y[r] + i, n - i);
}

void add(const float* a, const float* b, float* c, int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(Add, a, b, c, n);
  add_scalar(a + i, b + i, c + i, n - i);
}

void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(ScaleMul, x, s, w, y, n);
  scale_mul_scalar(x + i, s, w + i, y + i, n - i);
}

void rotate(const float* x0, const float* x1, const float* c, const float* s, float* y0, float* y1,
            int64_t n) {
  const int64_t i = LLMRT_VEC_DISPATCH(Rotate, x0, x1, c, s, y0, y1, n);
  rotate_scalar(x0 + i, x1 + i, c + i, s + i, y0 + i, y1 + i, n - i);
}

void widen_bf16(const uint16_t* h, int64_t n, float* out) {
  const int64_t i = LLMRT_VEC_DISPATCH(WidenBf16, h, n, out);
  for (int64_t j = i; j < n; ++j) out[j] = quant::bf16_to_float(h[j]);
}

void widen_f16(const uint16_t* h, int64_t n, float* out) {
  const int64_t i = LLMRT_VEC_DISPATCH(WidenF16, h, n, out);  // AVX2, AVX-512: the F16C instruction
  for (int64_t j = i; j < n; ++j) out[j] = quant::half_to_float(h[j]);
}

void widen_e4m3(const uint8_t* c, int64_t n, float* out) {
  const int64_t i = LLMRT_VEC_DISPATCH(WidenE4m3, c, n, out);  // AVX2, AVX-512: F16C's conversion
  for (int64_t j = i; j < n; ++j) out[j] = quant::e4m3_to_float(c[j]);
}

void dequant_i8(const int8_t* c, float scale, int64_t n, float* out) {
  const int64_t i = LLMRT_VEC_DISPATCH(DequantI8, c, scale, n, out);
  for (int64_t j = i; j < n; ++j) out[j] = static_cast<float>(c[j]) * scale;
}

}  // namespace llmrt::cpu::vec

#endif  // HWY_ONCE

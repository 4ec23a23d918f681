// Linear over quantized weights: the reference and fast numerical contracts of kernels.h.
// Scalar code states each contract; the AVX2 code performs the same floating-point operations in
// the same order (integer sums are exact, so how they are formed is free).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/reduce.h"

namespace llmrt::cpu {

using quant::Format;
using quant::Offset;

const char* contract_name(CpuContract c) { return c == CpuContract::kFast ? "fast" : "reference"; }

StatusOr<CpuContract> parse_contract(std::string_view name) {
  if (name == "reference") return CpuContract::kReference;
  if (name == "fast") return CpuContract::kFast;
  return invalid_argument("unknown CPU kernel contract '" + std::string(name) +
                          "' (expected reference or fast)");
}

void QuantScratch::ensure(int64_t rows, int64_t k_max, int threads) {
  rows = std::max<int64_t>(rows, 1);
  k_max = std::max<int64_t>(k_max, quant::kSubBlock);
  threads = std::max(threads, 1);
  if (rows <= rows_cap && k_max <= k_cap && threads <= threads_cap) return;
  rows_cap = std::max(rows, rows_cap);
  k_cap = std::max(k_max, k_cap);
  threads_cap = std::max(threads, threads_cap);
  qx_.assign(static_cast<size_t>(rows_cap * k_cap), 0);
  dx_.assign(static_cast<size_t>(rows_cap * (k_cap / quant::kSubBlock + 1)), 0.0f);
  sx_.assign(dx_.size(), 0.0f);
  deq_.assign(static_cast<size_t>(threads_cap * kDeqRows * k_cap), 0.0f);
  qx = qx_.data();
  dx = dx_.data();
  sx = sx_.data();
  deq = deq_.data();
}

namespace {

// ---------------- fast contract: scalar oracle ----------------

// Signed code of element i (0..31) of a 32-element sub-block at q (min formats: the raw code).
inline int code_at(const Format& f, const uint8_t* q, int i, int z) {
  if (f.bits == 8) {
    if (f.offset == Offset::kSym) return static_cast<int8_t>(q[i]);
    return static_cast<int>(q[i]) - z;  // z = 0 for min
  }
  const int nib = i < 16 ? (q[i] & 0x0F) : (q[i - 16] >> 4);
  return nib - z;
}

}  // namespace

void quantize_activations_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < k / quant::kSubBlock; ++b) {
    const float* v = x + b * quant::kSubBlock;
    float amax = 0.0f;
    for (int i = 0; i < quant::kSubBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    int sum = 0;
    for (int i = 0; i < quant::kSubBlock; ++i) {
      const int qi = static_cast<int>(std::lrint(v[i] * id));
      q[b * quant::kSubBlock + i] = static_cast<int8_t>(qi);
      sum += qi;
    }
    d[b] = db;
    s[b] = db * static_cast<float>(sum);
  }
}

float dot_q_fast_scalar(const QuantMatrix& w, int64_t row, const int8_t* qx, const float* dx,
                        const float* sx) {
  const Format& f = w.format;
  const int64_t g = quant::group_elems(f, w.k);
  const int64_t gb = quant::group_bytes(f, g), hb = quant::header_bytes(f);
  const int sb = quant::scale_bytes(f.scale);
  const uint8_t* grp = w.data + row * w.row_bytes;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float msum = 0.0f;
  int64_t b = 0;
  for (int64_t base = 0; base < w.k; base += g, grp += gb) {
    const float dw = quant::load_scale(f.scale, grp);
    const float m = f.offset == Offset::kMin ? quant::load_scale(f.scale, grp + sb) : 0.0f;
    int z = 0;
    if (f.offset == Offset::kZeroPoint) z = grp[sb];
    else if (f.offset == Offset::kSym && f.bits == 4) z = 8;
    const uint8_t* q = grp + hb;
    for (int64_t s = 0; s < g; s += quant::kSubBlock, ++b, q += quant::kSubBlock * f.bits / 8) {
      const int8_t* xq = qx + b * quant::kSubBlock;
      const float d = dw * dx[b];
      for (int l = 0; l < 8; ++l) {
        int p = 0;
        for (int i = 4 * l; i < 4 * l + 4; ++i) p += code_at(f, q, i, z) * xq[i];
        acc[l] = std::fma(d, static_cast<float>(p), acc[l]);
      }
      if (f.offset == Offset::kMin) msum = std::fma(m, sx[b], msum);
    }
  }
  return reduce8(acc) + msum;
}

namespace {

// ---------------- fast contract: AVX2 ----------------
#ifdef LLMRT_HAVE_X86

LLMRT_AVX2 void quantize_activations_avx2(const float* x, int64_t k, int8_t* q, float* d,
                                          float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / quant::kSubBlock; ++b) {
    const float* v = x + b * quant::kSubBlock;
    __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8), v2 = _mm256_loadu_ps(v + 16),
           v3 = _mm256_loadu_ps(v + 24);
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                              _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, idv));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, idv));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, idv));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, idv));
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    const int isum = _mm_cvtsi128_si32(s4);
    __m256i p01 = _mm256_packs_epi32(i0, i1);
    __m256i p23 = _mm256_packs_epi32(i2, i3);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * quant::kSubBlock), p);
    d[b] = db;
    s[b] = db * static_cast<float>(isum);
  }
}

// Scale of the weight format, decoded inline (F16C for halves: exact, like half_to_float).
template <quant::ScaleType S>
LLMRT_AVX2_F16C inline float load_scale_inline(const uint8_t* p) {
  if constexpr (S == quant::ScaleType::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if constexpr (S == quant::ScaleType::kF16) return _cvtsh_ss(h);
    else return quant::bf16_to_float(h);
  }
}

// One 32-element sub-block of weight codes as 32 bytes in element order (int4: nibbles - z
// unless min).
template <int BITS, Offset OFF>
LLMRT_AVX2_F16C inline __m256i load_codes(const uint8_t* q, __m256i zv) {
  if constexpr (BITS == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    __m256i c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                                 _mm256_set1_epi8(0x0F));
    if constexpr (OFF != Offset::kMin) c = _mm256_sub_epi8(c, zv);
    return c;
  }
}

// Eight exact lane sums over 4 consecutive elements of codes c and activations x (VNNI: one
// vpdpbusd; else maddubs + madd, whose 16-bit pair sums cannot saturate: |c| <= 128, |x| <= 127,
// and unsigned codes are int4).
template <Offset OFF, bool VNNI>
LLMRT_AVX2_F16C inline __m256i lane_sums(__m256i c, __m256i x) {
  __m256i u = c, s = x;
  if constexpr (OFF != Offset::kMin) {  // signed codes: sign moved onto x
    u = _mm256_sign_epi8(c, c);
    s = _mm256_sign_epi8(x, c);
  }
  if constexpr (VNNI) {
    __m256i acc = _mm256_setzero_si256();
    // vpdpbusd (VEX); inline asm keeps the target attribute of the surrounding code.
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
}

// TB token rows against weight rows j0 .. j1, NR weight rows at a time (each output its own
// dot product in the contract's order). Formats: int4 sym/zp/min, int8 sym; any group
// (multiple of 32) and scale type, decoded inline.
template <int BITS, Offset OFF, quant::ScaleType S, int TB, int NR, bool VNNI>
LLMRT_AVX2_F16C void fast_rows_avx2(const QuantMatrix& w, int64_t j0, int64_t j1,
                                    const int8_t* const* qx, const float* const* dx,
                                    const float* const* sx, const float* bias, float* y,
                                    int64_t ys) {
  constexpr int SB = S == quant::ScaleType::kF32 ? 4 : 2;
  constexpr int HB = SB + (OFF == Offset::kZeroPoint ? 1 : OFF == Offset::kMin ? SB : 0);
  constexpr int CB = quant::kSubBlock * BITS / 8;  // code bytes per 32 elements
  const int64_t g = quant::group_elems(w.format, w.k);
  const int64_t gb = HB + g * BITS / 8;
  const int64_t groups = w.k / g, subs = g / quant::kSubBlock;
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) {
    const uint8_t* grp[NR];
    __m256 acc[NR][TB];
    float msum[NR][TB];
    for (int r = 0; r < NR; ++r) {
      grp[r] = w.data + (j + r) * w.row_bytes;
      for (int t = 0; t < TB; ++t) {
        acc[r][t] = _mm256_setzero_ps();
        msum[r][t] = 0.0f;
      }
    }
    int64_t b = 0;
    for (int64_t gi = 0; gi < groups; ++gi) {
      float dw[NR];
      [[maybe_unused]] float m[NR];
      [[maybe_unused]] __m256i zv[NR];
      const uint8_t* q[NR];
      for (int r = 0; r < NR; ++r) {
        dw[r] = load_scale_inline<S>(grp[r]);
        if constexpr (OFF == Offset::kMin) m[r] = load_scale_inline<S>(grp[r] + SB);
        if constexpr (OFF == Offset::kZeroPoint) zv[r] = _mm256_set1_epi8(static_cast<char>(grp[r][SB]));
        if constexpr (OFF == Offset::kSym && BITS == 4) zv[r] = _mm256_set1_epi8(8);
        q[r] = grp[r] + HB;
        grp[r] += gb;
      }
      for (int64_t sbk = 0; sbk < subs; ++sbk, ++b) {
        __m256i c[NR];
        for (int r = 0; r < NR; ++r) {
          c[r] = load_codes<BITS, OFF>(q[r], zv[r]);
          q[r] += CB;
        }
#pragma GCC unroll 4
        for (int t = 0; t < TB; ++t) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx[t] + b * 32));
          const float dxb = dx[t][b];
          for (int r = 0; r < NR; ++r) {
            const __m256i p = lane_sums<OFF, VNNI>(c[r], xv);
            acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dxb), _mm256_cvtepi32_ps(p), acc[r][t]);
            if constexpr (OFF == Offset::kMin) msum[r][t] = __builtin_fmaf(m[r], sx[t][b], msum[r][t]);
          }
        }
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int t = 0; t < TB; ++t) {
        const float v = hsum_canonical(acc[r][t]) + msum[r][t];
        y[t * ys + j + r] = bias ? v + bias[j + r] : v;
      }
  }
  if constexpr (NR > 1)
    if (j < j1) fast_rows_avx2<BITS, OFF, S, TB, 1, VNNI>(w, j, j1, qx, dx, sx, bias, y, ys);
}

using RowsFn = void (*)(const QuantMatrix&, int64_t, int64_t, const int8_t* const*,
                        const float* const*, const float* const*, const float*, float*, int64_t);

template <int BITS, Offset OFF, int TB, bool VNNI>
RowsFn pick_scale(quant::ScaleType s) {
  // Two weight rows at a time share the activation loads.
  switch (s) {
    case quant::ScaleType::kF16: return fast_rows_avx2<BITS, OFF, quant::ScaleType::kF16, TB, 2, VNNI>;
    case quant::ScaleType::kBF16: return fast_rows_avx2<BITS, OFF, quant::ScaleType::kBF16, TB, 2, VNNI>;
    case quant::ScaleType::kF32: return fast_rows_avx2<BITS, OFF, quant::ScaleType::kF32, TB, 2, VNNI>;
  }
  return nullptr;
}

template <int TB, bool VNNI>
RowsFn pick_rows_isa(const Format& f) {
  if (f.bits == 4 && f.offset == Offset::kSym) return pick_scale<4, Offset::kSym, TB, VNNI>(f.scale);
  if (f.bits == 4 && f.offset == Offset::kZeroPoint) return pick_scale<4, Offset::kZeroPoint, TB, VNNI>(f.scale);
  if (f.bits == 4 && f.offset == Offset::kMin) return pick_scale<4, Offset::kMin, TB, VNNI>(f.scale);
  if (f.bits == 8 && f.offset == Offset::kSym) return pick_scale<8, Offset::kSym, TB, VNNI>(f.scale);
  return nullptr;  // int8 zp/min codes reach 255: their pair sums would saturate maddubs
}

template <int TB>
RowsFn pick_rows(const Format& f) {
  return active_isa() >= CpuIsa::kAvx2Vnni ? pick_rows_isa<TB, true>(f) : pick_rows_isa<TB, false>(f);
}

#endif  // LLMRT_HAVE_X86

bool avx2_active() {
#ifdef LLMRT_HAVE_X86
  return active_isa() >= CpuIsa::kAvx2;
#else
  return false;
#endif
}

void quantize_activations(const float* x, int64_t k, int8_t* q, float* d, float* s) {
#ifdef LLMRT_HAVE_X86
  if (avx2_active()) return quantize_activations_avx2(x, k, q, d, s);
#endif
  quantize_activations_scalar(x, k, q, d, s);
}

void linear_fast(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
                 const float* bias, float* y, QuantScratch& sc, ThreadPool& pool) {
  const int64_t k = w.k, nb = k / quant::kSubBlock, n = w.n;
  pool.parallel_for(num_rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t)
      quantize_activations(x + (rows ? rows[t] : t) * k, k, sc.qx + t * k, sc.dx + t * nb,
                           sc.sx + t * nb);
  });
#ifdef LLMRT_HAVE_X86
  RowsFn rows4 = nullptr, rows1 = nullptr;
  if (avx2_active()) {
    rows4 = pick_rows<4>(w.format);
    rows1 = pick_rows<1>(w.format);
  }
  if (rows1) {
    split_linear_work(num_rows, n, pool, [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int) {
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) {
        const int8_t* qx[4];
        const float *dx[4], *sx[4];
        for (int i = 0; i < 4; ++i) {
          qx[i] = sc.qx + (t + i) * k;
          dx[i] = sc.dx + (t + i) * nb;
          sx[i] = sc.sx + (t + i) * nb;
        }
        rows4(w, n0, n1, qx, dx, sx, bias, y + t * n, n);
      }
      for (; t < t1; ++t) {
        const int8_t* qx[1] = {sc.qx + t * k};
        const float* dx[1] = {sc.dx + t * nb};
        const float* sx[1] = {sc.sx + t * nb};
        rows1(w, n0, n1, qx, dx, sx, bias, y + t * n, n);
      }
    });
    return;
  }
#endif
  split_linear_work(num_rows, n, pool, [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = n0; j < n1; ++j) {
        const float v = dot_q_fast_scalar(w, j, sc.qx + t * k, sc.dx + t * nb, sc.sx + t * nb);
        y[t * n + j] = bias ? v + bias[j] : v;
      }
  });
}

void linear_reference(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
                      const float* bias, float* y, QuantScratch& sc, ThreadPool& pool) {
  const int64_t k = w.k, n = w.n;
  split_linear_work(num_rows, n, pool,
                    [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int worker) {
    float* deq = sc.deq + static_cast<int64_t>(worker) * QuantScratch::kDeqRows * k;
    for (int64_t j = n0; j < n1; j += QuantScratch::kDeqRows) {
      const int64_t cnt = std::min<int64_t>(QuantScratch::kDeqRows, n1 - j);
      for (int64_t r = 0; r < cnt; ++r)
        quant::dequantize_row(w.format, w.data + (j + r) * w.row_bytes, k, deq + r * k);
      linear_range(x, rows, t0, t1, k, deq, cnt, bias ? bias + j : nullptr, y + j, n);
    }
  });
}

}  // namespace

void linear_q(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
              const float* bias, float* y, CpuContract contract, QuantScratch& scratch,
              ThreadPool& pool) {
  if (num_rows <= 0 || w.n <= 0) return;
  scratch.ensure(num_rows, w.k, pool.num_threads());
  if (contract == CpuContract::kFast) return linear_fast(x, rows, num_rows, w, bias, y, scratch, pool);
  linear_reference(x, rows, num_rows, w, bias, y, scratch, pool);
}

void embedding_q(const int32_t* tokens, int64_t num_tokens, const QuantMatrix& table, float* out,
                 ThreadPool& pool) {
  pool.parallel_for(num_tokens, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t)
      quant::dequantize_row(table.format, table.data + static_cast<int64_t>(tokens[t]) * table.row_bytes,
                            table.k, out + t * table.k);
  });
}

}  // namespace llmrt::cpu

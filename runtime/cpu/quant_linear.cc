// Linear over quantized weights: the reference and fast numerical contracts of kernels.h.
// Scalar code states each contract; the AVX2 code performs the same floating-point operations in
// the same order (integer sums are exact, so how they are formed is free).
#include <algorithm>
#include <cmath>
#include <cstring>

// GCC 12 warns "'__Y' may be used uninitialized" inside its own avx512fintrin.h for intrinsics
// built on _mm512_undefined_*(), inlined here (a known false positive of the header; as
// "'__Y' is used uninitialized" for _mm512_broadcast_i32x4).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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
  ix_.assign(dx_.size(), 0);
  ih_.assign(static_cast<size_t>(rows_cap * (k_cap / quant::kHalfGroup + 1)), 0);
  sh_.assign(ih_.size(), 0.0f);
  deq_.assign(static_cast<size_t>(threads_cap * kDeqRows * k_cap), 0.0f);
  // A row is at most 1.5 bytes per element (int8 codes, f32 scale and min per 16) plus slack.
  rowbuf_stride = (2 * k_cap + 64 + 63) / 64 * 64;
  rowbuf_.assign(static_cast<size_t>(threads_cap * rowbuf_stride), 0);
  qx = qx_.data();
  dx = dx_.data();
  sx = sx_.data();
  ix = ix_.data();
  ih = ih_.data();
  sh = sh_.data();
  deq = deq_.data();
  rowbuf = rowbuf_.data();
}

size_t QuantScratch::bytes() const {
  return qx_.size() + (dx_.size() + sx_.size() + sh_.size() + deq_.size()) * sizeof(float) +
         (ix_.size() + ih_.size()) * sizeof(int32_t) + rowbuf_.size();
}

namespace {

// One row's groups in either layout (quant_format.h), for the scalar code.
struct RowView {
  const Format& f;
  const uint8_t* base;  // the row (row layout) or its tile (interleaved)
  int64_t gb, hb;       // group and header bytes
  int sb, r;            // scale bytes; row within the tile (-1: row layout)

  RowView(const QuantMatrix& w, int64_t row)
      : f(w.format),
        gb(quant::group_bytes(w.format, quant::group_elems(w.format, w.k))),
        hb(quant::header_bytes(w.format)),
        sb(quant::scale_bytes(w.format.scale)) {
    if (w.layout == quant::Layout::kInterleaved8) {
      base = w.data + row / quant::kTileRows * quant::kTileRows * w.row_bytes;
      r = static_cast<int>(row % quant::kTileRows);
    } else {  // kRowGroups (callers unpack other layouts to rows first)
      base = w.data + row * w.row_bytes;
      r = -1;
    }
  }
  const uint8_t* group(int64_t gi) const { return base + gi * gb * (r < 0 ? 1 : quant::kTileRows); }
  float scale(const uint8_t* g) const { return quant::load_scale(f.scale, g + (r < 0 ? 0 : r * sb)); }
  float min(const uint8_t* g) const {
    return quant::load_scale(f.scale, g + (r < 0 ? sb : quant::kTileRows * sb + r * sb));
  }
  int zero_point(const uint8_t* g) const { return r < 0 ? g[sb] : g[quant::kTileRows * sb + r]; }
  // Sub-scales: sub-block j's scale d * sc_j and (min) min dmin * mc_j (quant_format.h).
  void sub_scale(const uint8_t* g, int64_t j, float* d, float* m) const {
    if (r < 0) return quant::sub_block_scale(f, g, j, d, m);
    const int64_t bhb = quant::base_header_bytes(f), at = quant::kTileRows * (bhb + j) + r;
    *d = scale(g) * static_cast<float>(static_cast<int8_t>(g[at]));
    *m = f.offset == Offset::kMin
             ? min(g) * static_cast<float>(static_cast<int8_t>(g[at + quant::kTileRows * quant::sub_scales(f)]))
             : 0.0f;
  }
  // Code byte `off` of group g in the row layout's order (from the first code byte).
  uint8_t code_byte(const uint8_t* g, int64_t off) const {
    if (r < 0) return g[hb + off];
    return g[quant::kTileRows * hb + 32 * (off / 4) + 4 * r + off % 4];
  }
};

}  // namespace

void quantize_activations_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s,
                                 int32_t* sums) {
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
    if (sums) sums[b] = sum;
  }
}

float dot_q_fast_scalar(const QuantMatrix& w, int64_t row, const int8_t* qx, const float* dx,
                        const float* sx) {
  const Format& f = w.format;
  const RowView v(w, row);
  const int64_t g = quant::group_elems(f, w.k), pe = quant::scale_elems(f, w.k);
  // A scale's pieces: its 32-element sub-blocks, or the 16 elements it scales when that is half
  // of one: each piece's integer sum is scaled by its scale and its block's (a half's min by its
  // block's scale times the half's sum of activation codes).
  const int64_t piece = std::min(pe, quant::kSubBlock);
  float acc = 0.0f, msum = 0.0f;
  for (int64_t gi = 0; gi < w.k / g; ++gi) {
    const uint8_t* grp = v.group(gi);
    int z = 0;
    if (f.offset == Offset::kZeroPoint) z = v.zero_point(grp);
    else if (f.offset == Offset::kSym && f.bits < 8) z = 1 << (f.bits - 1);  // int4 8, int5 16
    for (int64_t u = 0; u < g / pe; ++u) {
      float dw, m = 0.0f;
      if (f.sub != 0) {
        v.sub_scale(grp, u, &dw, &m);
      } else {
        dw = v.scale(grp);
        if (f.offset == Offset::kMin) m = v.min(grp);
      }
      for (int64_t s = 0; s < pe / piece; ++s) {
        const int64_t off = u * pe + s * piece;  // element offset in the group
        const int64_t e0 = gi * g + off, b = e0 / quant::kSubBlock;
        const int8_t* xq = qx + e0;
        int32_t p = 0, xsum = 0;
        for (int i = 0; i < piece; ++i) {
          int c;
          if (f.bits == 8) {
            const uint8_t byte = v.code_byte(grp, off + i);
            c = f.offset == Offset::kSym ? static_cast<int8_t>(byte) : byte - z;
          } else {  // sub-block off / 32: its element e in byte e % 16, the high nibble from 16
            const int64_t at = off / quant::kSubBlock * (quant::kSubBlock * f.bits / 8);
            const int64_t nib = at + (f.bits == 5 ? 4 : 0);  // int5: the fifth bits first
            const int64_t e = off % quant::kSubBlock + i;     // (int4 s16: a half starts at 16)
            const uint8_t byte = v.code_byte(grp, nib + e % 16);
            c = e < 16 ? byte & 0x0F : byte >> 4;
            if (f.bits == 5) c |= (v.code_byte(grp, at + e / 8) >> (e % 8) & 1) << 4;
            c = f.offset == Offset::kNl ? quant::kNlGrid[c] : c - z;
          }
          p += c * xq[i];
          xsum += xq[i];
        }
        acc = std::fma(dw * dx[b], static_cast<float>(p), acc);
        if (f.offset == Offset::kMin)
          msum = std::fma(m, piece == quant::kSubBlock ? sx[b] : dx[b] * static_cast<float>(xsum), msum);
      }
    }
  }
  return acc + msum;
}

namespace {

// ---------------- fast contract: AVX2 over cpu_interleaved8 ----------------
#ifdef LLMRT_HAVE_X86

LLMRT_AVX2 void quantize_activations_avx2(const float* x, int64_t k, int8_t* q, float* d,
                                          float* s, int32_t* sums) {
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
    sums[b] = isum;
  }
}

// The 8 rows' scales (or mins) of a tile group, as f32 (F16C for halves: exact).
template <quant::ScaleType S>
LLMRT_AVX2_F16C inline __m256 load_scales8(const uint8_t* p) {
  if constexpr (S == quant::ScaleType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (S == quant::ScaleType::kF16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// The 8 rows' int8 sub-scale codes of a tile group (quant_format.h) as f32.
LLMRT_AVX2_F16C inline __m256 load_codes8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// acc + per 32-bit lane the sum of the four products u_i * s_i (u unsigned, s signed bytes);
// without VNNI maddubs + madd, whose 16-bit pair sums cannot saturate here (u <= 128, |s| <= 127
// or u <= 15; nl codes go in as |grid value| <= 127).
template <bool VNNI>
LLMRT_AVX2_F16C inline __m256i dot4(__m256i acc, __m256i u, __m256i s) {
  if constexpr (VNNI) {
    // vpdpbusd (VEX); inline asm keeps the target attribute of the surrounding code.
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
}

inline const int32_t* as_i32(const int8_t* p) { return reinterpret_cast<const int32_t*>(p); }

namespace avx2 {
#define LLMRT_TILES_TARGET LLMRT_AVX2_F16C
#define LLMRT_TILES_512 0
#include "runtime/cpu/quant_tiles.inc"
#undef LLMRT_TILES_TARGET
#undef LLMRT_TILES_512
}  // namespace avx2

namespace avx512 {
#define LLMRT_TILES_TARGET LLMRT_AVX512_VNNI
#define LLMRT_TILES_512 1
#include "runtime/cpu/quant_tiles.inc"
#undef LLMRT_TILES_TARGET
#undef LLMRT_TILES_512
}  // namespace avx512

using TilesFn = void (*)(const QuantMatrix&, int64_t, int64_t, const int8_t* const*,
                         const float* const*, const float* const*, const int32_t* const*,
                         const float*, float*, int64_t);

// ISA: 0 AVX2, 1 AVX2 + AVX-VNNI, 2 AVX-512 VNNI.
template <int ISA, int BITS, Offset OFF, quant::ScaleType S, int TB>
TilesFn tiles_for() {
  if constexpr (ISA == 2) return avx512::fast_tiles_x2<BITS, OFF, S, TB>;
  else return avx2::fast_tiles<BITS, OFF, S, TB, ISA == 1>;
}

template <int ISA, int BITS, Offset OFF, int TB>
TilesFn pick_scale(quant::ScaleType s) {
  switch (s) {
    case quant::ScaleType::kF16: return tiles_for<ISA, BITS, OFF, quant::ScaleType::kF16, TB>();
    case quant::ScaleType::kBF16: return tiles_for<ISA, BITS, OFF, quant::ScaleType::kBF16, TB>();
    case quant::ScaleType::kF32: return tiles_for<ISA, BITS, OFF, quant::ScaleType::kF32, TB>();
  }
  return nullptr;
}

template <int ISA, int BITS, int TB>
TilesFn pick_offset(const Format& f) {
  switch (f.offset) {
    case Offset::kSym: return pick_scale<ISA, BITS, Offset::kSym, TB>(f.scale);
    case Offset::kZeroPoint: return pick_scale<ISA, BITS, Offset::kZeroPoint, TB>(f.scale);
    case Offset::kMin: return pick_scale<ISA, BITS, Offset::kMin, TB>(f.scale);
    case Offset::kNl:
      if constexpr (BITS == 4) return pick_scale<ISA, 4, Offset::kNl, TB>(f.scale);
      return nullptr;
  }
  return nullptr;
}

template <int ISA, Offset OFF, quant::ScaleType S, int TB>
TilesFn tiles16_for() {
  if constexpr (ISA == 2) return avx512::fast_tiles16_x2<OFF, S, TB>;
  else return avx2::fast_tiles16<OFF, S, TB, ISA == 1>;
}

template <int ISA, Offset OFF, quant::ScaleType S, int TB>
TilesFn tiles4h_for() {
  if constexpr (ISA == 2) return avx512::fast_tiles4h_x2<OFF, S, TB>;
  else return avx2::fast_tiles4h<OFF, S, TB, ISA == 1>;
}

// Scales of 16 (parse_format allows sym and min only; int4 only as sub-scales, f16 / bf16).
template <int ISA, Offset OFF, int TB>
TilesFn pick_halves(const Format& f) {
  switch (f.scale) {
    case quant::ScaleType::kF16:
      return f.bits == 4 ? tiles4h_for<ISA, OFF, quant::ScaleType::kF16, TB>() : tiles16_for<ISA, OFF, quant::ScaleType::kF16, TB>();
    case quant::ScaleType::kBF16:
      return f.bits == 4 ? tiles4h_for<ISA, OFF, quant::ScaleType::kBF16, TB>() : tiles16_for<ISA, OFF, quant::ScaleType::kBF16, TB>();
    case quant::ScaleType::kF32:
      return f.bits == 4 ? nullptr : tiles16_for<ISA, OFF, quant::ScaleType::kF32, TB>();
  }
  return nullptr;
}

template <int ISA, int TB>
TilesFn pick_bits(const Format& f) {
  if (quant::scale_elems(f, f.group) == quant::kHalfGroup)
    return f.offset == Offset::kMin ? pick_halves<ISA, Offset::kMin, TB>(f) : pick_halves<ISA, Offset::kSym, TB>(f);
  return f.bits == 4 ? pick_offset<ISA, 4, TB>(f) : f.bits == 5 ? pick_offset<ISA, 5, TB>(f) : pick_offset<ISA, 8, TB>(f);
}

template <int TB>
TilesFn pick_tiles(const Format& f) {
  const CpuIsa isa = active_isa();
  if (isa >= CpuIsa::kAvx512Vnni) return pick_bits<2, TB>(f);
  if (isa >= CpuIsa::kAvx2Vnni && cpu_has_avx_vnni()) return pick_bits<1, TB>(f);
  return pick_bits<0, TB>(f);
}

// Eight tokens a pass, AVX-512 only (its 32 registers hold them; SmolLM2 prefill 6-9% faster than
// four, side by side; on AVX2 no faster): null elsewhere.
TilesFn pick_tiles8(const Format& f) {
  return active_isa() >= CpuIsa::kAvx512Vnni ? pick_bits<2, 8>(f) : nullptr;
}

#endif  // LLMRT_HAVE_X86

bool avx2_active() {
#ifdef LLMRT_HAVE_X86
  return active_isa() >= CpuIsa::kAvx2;
#else
  return false;
#endif
}

void quantize_activations(const float* x, int64_t k, int8_t* q, float* d, float* s, int32_t* sums) {
#ifdef LLMRT_HAVE_X86
  if (avx2_active()) return quantize_activations_avx2(x, k, q, d, s, sums);
#endif
  quantize_activations_scalar(x, k, q, d, s, sums);
}

// Row j of w in the row layout: in place, or copied out of its tile into buf.
const uint8_t* row_bytes_of(const QuantMatrix& w, int64_t j, uint8_t* buf) {
  if (w.layout == quant::Layout::kRowGroups) return w.data + j * w.row_bytes;
  quant::unpack_row(w.format, w.layout, w.k, w.data + j / quant::kTileRows * quant::kTileRows * w.row_bytes,
                    static_cast<int>(j % quant::kTileRows), buf);
  return buf;
}

void linear_fast(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
                 const float* bias, float* y, QuantScratch& sc, ThreadPool& pool) {
  const int64_t k = w.k, nb = k / quant::kSubBlock, nh = k / quant::kHalfGroup, n = w.n;
  // Scales of 16 elements: the SIMD tiles take the activations' sums per half block (ih) where
  // the others take them per block (fast_tiles16, fast_tiles4h), and with mins those sums scaled
  // by their block's d (sh, the oracle's d_b * float(sum)) where the others take sx: once per row,
  // not per tile.
  const bool halves = quant::scale_elems(w.format, w.format.group) == quant::kHalfGroup;
  pool.parallel_for(num_rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const int8_t* q = sc.qx + t * k;
      quantize_activations(x + (rows ? rows[t] : t) * k, k, sc.qx + t * k, sc.dx + t * nb,
                           sc.sx + t * nb, sc.ix + t * nb);
      for (int64_t h = 0; halves && h < nh; ++h, q += quant::kHalfGroup) {
        int32_t sum = 0;
        for (int i = 0; i < quant::kHalfGroup; ++i) sum += q[i];
        sc.ih[t * nh + h] = sum;
        sc.sh[t * nh + h] = sc.dx[t * nb + h / 2] * static_cast<float>(sum);
      }
    }
  });
#ifdef LLMRT_HAVE_X86
  if (avx2_active() && w.layout == quant::Layout::kInterleaved8) {
    TilesFn tiles8 = pick_tiles8(w.format), tiles4 = pick_tiles<4>(w.format), tiles1 = pick_tiles<1>(w.format);
    constexpr int64_t R = quant::kTileRows;
    // split_linear_work hands out column ranges in units of 16: whole tiles.
    split_linear_work(num_rows, n, pool, [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int) {
      const int64_t tile0 = n0 / R, tile1 = (n1 + R - 1) / R;
      int64_t t = t0;
      const auto run = [&](TilesFn fn, int tb) {
        const int8_t* qx[8];
        const float *dx[8], *sx[8];
        const int32_t* ix[8];
        for (int i = 0; i < tb; ++i) {
          qx[i] = sc.qx + (t + i) * k;
          dx[i] = sc.dx + (t + i) * nb;
          sx[i] = halves ? sc.sh + (t + i) * nh : sc.sx + (t + i) * nb;
          ix[i] = halves ? sc.ih + (t + i) * nh : sc.ix + (t + i) * nb;
        }
        fn(w, tile0, tile1, qx, dx, sx, ix, bias, y + t * n, n);
      };
      if (tiles8)
        for (; t + 8 <= t1; t += 8) run(tiles8, 8);
      for (; t + 4 <= t1; t += 4) run(tiles4, 4);
      for (; t < t1; ++t) run(tiles1, 1);
    });
    return;
  }
#endif
  // Scalar: rows of cpu_row_groups and cpu_interleaved8 read in place, others (cuda_mma_n8, a
  // plan packed for the GPU) unpacked to one row at a time.
  split_linear_work(num_rows, n, pool, [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int worker) {
    uint8_t* buf = sc.rowbuf + worker * sc.rowbuf_stride;
    for (int64_t j = n0; j < n1; ++j) {
      QuantMatrix one;
      const QuantMatrix* m = &w;
      int64_t row = j;
      if (w.layout == quant::Layout::kCudaMma8) {
        one = {row_bytes_of(w, j, buf), w.format, 1, k, w.row_bytes, quant::Layout::kRowGroups};
        m = &one;
        row = 0;
      }
      for (int64_t t = t0; t < t1; ++t) {
        const float v = dot_q_fast_scalar(*m, row, sc.qx + t * k, sc.dx + t * nb, sc.sx + t * nb);
        y[t * n + j] = bias ? v + bias[j] : v;
      }
    }
  });
}

void linear_reference(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
                      const float* bias, float* y, QuantScratch& sc, ThreadPool& pool) {
  const int64_t k = w.k, n = w.n;
  split_linear_work(num_rows, n, pool,
                    [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int worker) {
    float* deq = sc.deq + static_cast<int64_t>(worker) * QuantScratch::kDeqRows * k;
    uint8_t* buf = sc.rowbuf + worker * sc.rowbuf_stride;
    for (int64_t j = n0; j < n1; j += QuantScratch::kDeqRows) {
      const int64_t cnt = std::min<int64_t>(QuantScratch::kDeqRows, n1 - j);
      for (int64_t r = 0; r < cnt; ++r)
        quant::dequantize_row(w.format, row_bytes_of(w, j + r, buf), k, deq + r * k);
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
                 QuantScratch& scratch, ThreadPool& pool) {
  scratch.ensure(1, table.k, pool.num_threads());
  pool.parallel_for(num_tokens, [&](int64_t b, int64_t e, int worker) {
    uint8_t* buf = scratch.rowbuf + worker * scratch.rowbuf_stride;
    for (int64_t t = b; t < e; ++t)
      quant::dequantize_row(table.format, row_bytes_of(table, tokens[t], buf), table.k, out + t * table.k);
  });
}

}  // namespace llmrt::cpu

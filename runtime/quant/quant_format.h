// Quantized weight formats of the plan: what the bytes of a quantized tensor mean.
//
// A quantized 2-D tensor [n, k] is stored row after row; a row is k / group groups back to back
// (the "cpu_row_groups" layout, written by the compiler's pack-weights pass). One group is:
//
//   scale   f16 | bf16 | f32            (the format's scale type)
//   offset  min: one value of the scale type;  zero point: one byte;  sym: nothing
//   codes   int8: group bytes, element order
//           int4: group / 2 bytes in sub-blocks of 32 elements = 16 bytes each; byte i of a
//                 sub-block holds element i in its low nibble and element i + 16 in its high one
//           int5: sub-blocks of 32 elements = 20 bytes each: a little-endian 32-bit word whose
//                 bit i is element i's fifth bit, then 16 bytes of the low 4 bits as int4
//
// Value of code q (scale d, min m, zero point z):
//   sym  int8: d * q (q signed int8)        sym  int4: d * (q - 8)   (q the nibble 0..15)
//   zp   int8: d * (q - z) (q, z uint8)      zp   int4: d * (q - z)   (z 0..15)
//   min  int8: d * q + m (q uint8)           min  int4: d * q + m
//   int5 as int4 with q 0..31: sym d * (q - 16), zp d * (q - z) (z 0..31), min d * q + m
//                                            nl   int4: d * kNlGrid[q] (header: the scale only)
//
// nl (int4 only, groups of 32 n) is GGUF's IQ4_NL (int4-g32-f16-nl, bit for bit) and IQ4_XS
// (int4-g32-f32-nl, its sub-block scale d * (ls - 32) exact in f32): a code indexes a grid of 16
// int8 values (the CPU kernels look them up with a byte shuffle, the CUDA ones with byte
// permutes).
//
// A group is a multiple of 32 elements, or 16 for int8 sym or min (GGUF's 16-element sub-blocks); rows
// are whole sub-blocks of 32 either way (the fast contract quantizes activations per 32).
//
// With a group of 32 and f16 scales these are GGUF's blocks bit for bit: int8-g32-f16-sym is
// Q8_0, int4-g32-f16-sym is Q4_0, int4-g32-f16-min is Q4_1, int5-g32-f16-sym is Q5_0 and
// int5-g32-f16-min is Q5_1 (block_q8_0/q4_0/q4_1/q5_0/q5_1 of ggml).
// Every product d * q above is exact in f32 (a 24-bit significand holds 11 + 9 bits), so
// dequantization does not depend on how it is evaluated. GGUF's other blocks are held exactly
// in a format of ours (compiler/frontend/Dequant.h): the k-quants, whose sub-block scale is a product d * sc of an f16 and a
// 6- or 8-bit integer (exact in f32), with sub-scales (below): Q4_K int4-g256s32-f16-min, Q5_K
// int5-g256s32-f16-min (the min negated), Q6_K int8-g256s16-f16-sym (codes q - 32; d * sc *
// (q - 32) is one f32 rounding there as in ggml's (d * sc) * q).
//
// Sub-scales (k-quant style, two-level): "g<group>s<sub>" (e.g. int4-g256s32-f16-min) gives every
// sub-block of `sub` elements (32, or 16 for int4 / int8 sym or min) of a group its own int8 scale code sc_j, and
// for min its own int8 min code mc_j; the group's header is then
//
//   scale d, [min: dmin] (f16 or bf16), then group / sub codes sc_j, [min: group / sub codes mc_j]
//
// and sub-block j has the scale d * sc_j and the min dmin * mc_j (f32 products of an f16/bf16 and
// an int8: exact, at most 11 + 8 significant bits), its codes then read as above. So a sub-scale
// format's values, and every kernel's results, are those of the format with groups of `sub` and
// those products as f32 scales (expanded_format; expand_row writes it): GGUF's Q4_K is int4-g256s32-f16-min
// (4.625 bits per weight, against 6 as int4-g32-f32-min), Q5_K int5-g256s32-f16-min, Q6_K
// int8-g256s16-f16-sym, IQ4_XS int4-g256s32-f16-nl, Q3_K int4-g256s16-f16-sym (codes q + 8 for
// ggml's -4..3), Q2_K int4-g256s16-f16-min (codes 0..3, the min negated). Zero points take no
// sub-scales. int4 with sub-blocks of 16 (sym or min): sub-block 2i's codes are the low nibbles of
// the 16 bytes of 32-element sub-block i, 2i + 1's the high ones (the int4 byte order below), so
// its expansion is int8-g16-f32-sym (codes q - 8) or int8-g16-f32-min (codes q).
//
// Names: "int<4|5|8>-g<group>[s<sub>]|row-<f16|bf16|f32>-<sym|zp|min|nl>", e.g. "int4-g128-f16-zp".
//
// The "cpu_interleaved8" layout (the CPU default of the pack-weights pass) holds the same bytes
// regrouped so that one 32-byte SIMD load covers 8 rows: rows go in tiles of 8 (the last tile
// padded with all-zero rows, whose values are 0), a tile is its groups in order, and the group
// of a tile is
//
//   8 scales (row 0..7), then 8 offsets (min: 8 values of the scale type; zp: 8 bytes), [sub-scales:
//   per sub-block j the 8 rows' codes sc_j, then (min) per sub-block the 8 rows' mc_j], then
//   the 8 rows' code bytes in 4-byte chunks: code byte 32 * c + 4 * r + e is byte 4 * c + e of
//   row r's group codes in the row layout above (so per 32-element sub-block c < 8 for int8,
//   c < 4 for int4: the low nibbles are elements 4c..4c+3, the high ones 16+4c..16+4c+3; int5:
//   c < 5, chunk 0 the 8 rows' words of fifth bits, then the int4 chunks; a group of 16 has 4
//   chunks).
//
// So a tile is 8 row_bytes and a load of chunk c gives, per 32-bit lane r, four codes of row r:
// a dot product against 4 activations broadcast to every lane needs no horizontal sums.
//
// The "cuda_mma_n8" layout (pack-weights target=cuda) serves the CUDA weight-only GEMV/GEMM
// kernels, which dequantize weights in registers and feed tensor cores with mma.sync.m16n8k16
// (f16/bf16 operands, the weights as the B operand: 16 k by 8 n). Rows again go in tiles of 8
// (= n of one mma, padded like cpu_interleaved8); a tile of G groups and k elements is
//
//   scales   [G][8] of the scale type (group-major: one group's 8 rows are adjacent)
//   offsets  [G][8]: min: scale type; zero point: bytes; sym: absent
//   [sub-scales: per group, [S][8] codes sc_j, then (min) [S][8] codes mc_j; S sub-blocks a
//    group. The CUDA kernels multiply them out as they stage a span's scales]
//   codes    k in spans of up to 128 elements (4 sub-blocks of 32; the last span may be shorter:
//            m = its sub-blocks). In a span, lane L (0..31) of a warp owns m * W consecutive
//            bytes at span_base + L * m * W (W = 4 for int4, 8 for int8 per sub-block), so one
//            16-byte (int4) or two (int8) loads per lane fetch a span; sub-block j's W bytes are
//            at j * W in them.
//
// A sub-block is two k-steps of 16 (s = 0, 1). As in the PTX ISA's fragment layout of the B
// operand of mma.m16n8k16 (.f16/.bf16), lane L holds column n = L / 4 (the row of the weight
// matrix) and, with q = L % 4, the elements b0..b3 at k = 16 s + 2 q + {0, 1, 8, 9}. Lane L's W
// bytes of a sub-block:
//   int4: one little-endian 32-bit word whose nibble p holds, for p = 0..7,
//         (s, b) = (0,b0) (0,b2) (1,b0) (1,b2) (0,b1) (0,b3) (1,b1) (1,b3),
//         so (word >> 4t) & 0x000F000F holds the f16x2 pair t = 0..3: {b0,b1} and {b2,b3} of
//         k-step 0, then of k-step 1 (each ready for the 0x6400 exponent trick);
//   int8: two 32-bit words, word s holding b0, b1, b2, b3 of k-step s in bytes 0..3;
//   int5: the low 4 bits as int4 (W = 4); after the span's m * 128 bytes of them, lane L's m
//         bytes of fifth bits at m * 128 + L * m: bit p of byte j is the fifth bit of nibble p of
//         the lane's sub-block j word (so a span is 640 bytes, 5 bits per weight).
// Codes keep their meaning (value rules above). cuda_mma_code_pos() (and for int5
// cuda_mma_fifth_bit_pos()) computes the position and the tests check it against the fragment
// rule; a tile is 8 row_bytes, like the CPU tiles.
#pragma once

#include <cmath>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace llmrt::quant {

enum class ScaleType : uint8_t { kF16 = 0, kBF16 = 1, kF32 = 2 };
enum class Offset : uint8_t { kSym = 0, kZeroPoint = 1, kMin = 2, kNl = 3 };

/// The values of int4 "nl" codes: ggml's non-linear 4-bit grid of IQ4_NL / IQ4_XS (kvalues_iq4nl,
/// public constants of that format), each an int8.
inline constexpr int8_t kNlGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

/// Sub-block of the int4 nibble order and of the fast contract's activation blocks.
inline constexpr int64_t kSubBlock = 32;
/// The one group smaller than a sub-block (int8 sym or min only): half of one.
inline constexpr int64_t kHalfGroup = 16;
/// The plan's tensor layout name for this storage.
inline constexpr const char* kLayoutRowGroups = "cpu_row_groups";
inline constexpr const char* kLayoutInterleaved8 = "cpu_interleaved8";
inline constexpr const char* kLayoutCudaMma8 = "cuda_mma_n8";
/// Rows per tile of cpu_interleaved8 and cuda_mma_n8.
inline constexpr int64_t kTileRows = 8;

enum class Layout : uint8_t { kRowGroups = 0, kInterleaved8 = 1, kCudaMma8 = 2 };
/// Whether rows are stored in tiles of kTileRows (each tile kTileRows row_bytes).
inline bool is_tiled(Layout l) { return l != Layout::kRowGroups; }
/// Parses a layout name; the error lists the known ones.
StatusOr<Layout> parse_layout(std::string_view name);
const char* layout_name(Layout l);

struct Format {
  int bits = 4;                       // 4 | 5 | 8
  int64_t group = 32;                 // elements per group: a multiple of 32, 16 (int8 sym / min); 0 = the whole row
  ScaleType scale = ScaleType::kF16;
  Offset offset = Offset::kSym;
  int64_t sub = 0;                    // elements per int8 sub-scale (32, 16: int4 / int8 sym / min); 0 = none

  bool operator==(const Format&) const = default;
};

/// Parses a format name (see above). Errors name the part that is wrong.
StatusOr<Format> parse_format(std::string_view name);
std::string format_name(const Format& f);

/// Elements per group for rows of k elements (resolves "row").
inline int64_t group_elems(const Format& f, int64_t k) { return f.group == 0 ? k : f.group; }
/// Sub-scale codes per group (0 without sub-scales).
inline int64_t sub_scales(const Format& f) { return f.sub == 0 ? 0 : f.group / f.sub; }
/// Elements that share one scale: the sub-block with sub-scales, else the group.
inline int64_t scale_elems(const Format& f, int64_t k) { return f.sub != 0 ? f.sub : group_elems(f, k); }
/// The format with the same values and neither sub-scales (groups of `sub`, f32 scales and mins
/// d * sc_j, dmin * mc_j) nor int5 codes (int8 bytes; sym becomes a zero point of 16); int4
/// sub-blocks of 16 become int8 groups of 16 (sym: codes q - 8; min: q); f itself when it has neither.
Format expanded_format(const Format& f);
/// One row of f in expanded_format(f): row_bytes of that format in out.
void expand_row(const Format& f, const uint8_t* row, int64_t k, uint8_t* out);
/// Scale and min (0 for other offsets) of sub-block j (< sub_scales) of a group whose header is
/// at h in the row layout.
void sub_block_scale(const Format& f, const uint8_t* h, int64_t j, float* d, float* m);
int scale_bytes(ScaleType t);
/// Bytes of the group header (scale + offset, then any sub-scale codes).
int64_t header_bytes(const Format& f);
/// Bytes of the scale and offset alone (where a header's sub-scale codes start).
int64_t base_header_bytes(const Format& f);
/// Bytes of one group of g elements.
int64_t group_bytes(const Format& f, int64_t g);
/// Bytes of one row of k elements; an error when k is not a whole number of groups or a group
/// is not a whole number of 32-element sub-blocks.
StatusOr<int64_t> row_bytes(const Format& f, int64_t k);

/// Bytes of an [n, k] tensor of format f in layout l (n rounded up to whole tiles).
StatusOr<uint64_t> tensor_bytes(const Format& f, Layout l, int64_t n, int64_t k);

/// A tiled layout l: `nrows` (<= 8) consecutive rows in the row layout (row_bytes each) into
/// one tile of 8 rows (missing rows zero).
void pack_tile(const Format& f, Layout l, int64_t k, const uint8_t* rows, int64_t nrows, uint8_t* tile);
/// A tiled layout l: row r (0..7) of a tile back in the row layout.
void unpack_row(const Format& f, Layout l, int64_t k, const uint8_t* tile, int r, uint8_t* row);
/// cpu_interleaved8 forms of pack_tile / unpack_row.
void interleave_tile(const Format& f, int64_t k, const uint8_t* rows, int64_t nrows, uint8_t* tile);
void deinterleave_row(const Format& f, int64_t k, const uint8_t* tile, int r, uint8_t* row);

/// cuda_mma_n8: where the code of element e (0..k-1) of tile row r (0..7) lies: tile byte
/// `byte`, bits [shift, shift + bits).
struct CodePos {
  int64_t byte;
  int shift;
};
CodePos cuda_mma_code_pos(const Format& f, int64_t k, int r, int64_t e);
/// int5: where the fifth bit of element e of tile row r lies: tile byte `byte`, bit `shift`
/// (cuda_mma_code_pos gives its low 4 bits).
CodePos cuda_mma_fifth_bit_pos(const Format& f, int64_t k, int r, int64_t e);

float load_scale(ScaleType t, const uint8_t* p);
/// Rounds x to the scale type and stores it; returns the stored value as f32.
float store_scale(ScaleType t, float x, uint8_t* p);

/// IEEE half -> float, exact (subnormals, infinities and NaN payloads included), branch-light
/// (inline: the CPU widens f16 weight rows and KV cache rows with it): the half's exponent and
/// mantissa moved into place and rebiased, subnormals renormalized by one subtraction.
inline float half_to_float(uint16_t bits) {
  constexpr uint32_t kExp = 0x7C00u << 13;  // a half's exponent field, moved to f32's place
  uint32_t o = static_cast<uint32_t>(bits & 0x7FFFu) << 13;
  const uint32_t exp = o & kExp;
  o += (127u - 15u) << 23;                          // rebias
  if (exp == kExp) {
    o += (128u - 16u) << 23;                        // infinity, NaN: the top exponent
  } else if (exp == 0) {                            // zero, subnormal: (1 + m) 2^-14 - 2^-14, exact
    o += 1u << 23;
    o = std::bit_cast<uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(o | static_cast<uint32_t>(bits & 0x8000u) << 16);
}
uint16_t float_to_half(float x);      // round to nearest even, saturating to +-inf like IEEE
inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
/// Round to nearest even (inline: the synthetic weights convert billions of them).
inline uint16_t float_to_bf16(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);  // nan
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

/// FP8 E4M3 (the OCP 8-bit format CUDA calls __nv_fp8_e4m3, ml_dtypes float8_e4m3fn): sign, 4
/// exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN, 448 the largest
/// finite value, subnormals m * 2^-9. The KV cache's fp8 type.
/// Exact: the code's exponent and mantissa moved into a half's place (an E4M3 exponent e is the
/// half exponent e + 8, so the half's value times 2^8), then half_to_float.
inline float e4m3_to_float(uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return std::bit_cast<float>(0x7FC00000u | static_cast<uint32_t>(code & 0x80u) << 24);
  const uint16_t h = static_cast<uint16_t>((code & 0x7Fu) << 7 | (code & 0x80u) << 8);
  return half_to_float(h) * 256.0f;
}
/// Round to nearest even, saturating: every |x| >= 448 (infinities included) becomes +-448, as
/// CUDA's cvt.rn.satfinite.e4m3x2.f32 does; a NaN becomes the NaN code 0x7F (sign dropped).
inline uint8_t float_to_e4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // 448 and up
  if (a < 0x3C800000u)  // below 2^-6: a subnormal code, |x| * 2^9 rounded to an integer (exact scaling)
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(std::bit_cast<float>(a) * 512.0f)));
  const uint32_t m = a + 0x7FFFFu + ((a >> 20) & 1u) - (120u << 23);  // rebias 127 -> 7, round
  return static_cast<uint8_t>(sign | (m >> 20));
}

/// Dequantizes one row of k elements (k valid for f: row_bytes(f, k) ok).
void dequantize_row(const Format& f, const uint8_t* row, int64_t k, float* out);

/// Checks one row's bytes beyond what sizes say: zero points within range and scales finite.
/// Returns a message naming the first bad group, "" when fine.
std::string check_row(const Format& f, const uint8_t* row, int64_t k);

/// Round-to-nearest quantization of one row into f (the compiler's --quantize):
///   sym:  d = amax / qmax (qmax 127 for int8, 7 for int4), q = round(x / d) clamped;
///   nl:   d = -v / 127 for the v of largest |v| (so v is the grid's -127), q the nearest grid
///         value to x / d (the lower one of a tie);
///   min:  m = min(x), d = (max(x) - m) / (2^bits - 1), q = round((x - m) / d) clamped;
///   zp:   as min, with z = round(-min / d) clamped to the code range and m = -d * z.
/// d (and m) are first rounded to the scale type, the codes computed with the rounded values.
void quantize_row(const Format& f, const float* x, int64_t k, uint8_t* out);

}  // namespace llmrt::quant

#include "runtime/quant/quant_format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace llmrt::quant {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 9) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// Code range of a format: [lo, hi] as stored.
void code_range(const Format& f, int* lo, int* hi) {
  if (f.bits == 8) {
    *lo = f.offset == Offset::kSym ? -127 : 0;  // -128 is never produced by RTN (symmetric range)
    *hi = f.offset == Offset::kSym ? 127 : 255;
  } else {
    *lo = 0;
    *hi = (1 << f.bits) - 1;  // int4 15, int5 31
  }
}

}  // namespace

uint16_t float_to_half(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u)  // inf or nan
    return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u);
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                          // below the smallest normal half (2^-14)
    // Subnormal half: value / 2^-24 rounded to nearest even.
    const float v = std::bit_cast<float>(abs) * 16777216.0f;  // exact: scales by 2^24
    const float r = std::nearbyint(v);                          // default mode: nearest even
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: drop 13 mantissa bits with round to nearest even.
  uint32_t m = abs + 0x0FFFu + ((abs >> 13) & 1u);
  m -= 0x38000000u;  // rebias exponent 127 -> 15
  return sign | static_cast<uint16_t>(m >> 13);
}

int scale_bytes(ScaleType t) { return t == ScaleType::kF32 ? 4 : 2; }

int64_t base_header_bytes(const Format& f) {
  const int s = scale_bytes(f.scale);
  switch (f.offset) {
    case Offset::kSym: return s;
    case Offset::kZeroPoint: return s + 1;
    case Offset::kMin: return 2 * s;
    case Offset::kNl: return s;
  }
  return s;
}

int64_t header_bytes(const Format& f) {
  return base_header_bytes(f) + sub_scales(f) * (f.offset == Offset::kMin ? 2 : 1);
}

void sub_block_scale(const Format& f, const uint8_t* h, int64_t j, float* d, float* m) {
  const int64_t hb = base_header_bytes(f), nsub = sub_scales(f);
  *d = load_scale(f.scale, h) * static_cast<float>(static_cast<int8_t>(h[hb + j]));
  *m = f.offset == Offset::kMin
           ? load_scale(f.scale, h + scale_bytes(f.scale)) * static_cast<float>(static_cast<int8_t>(h[hb + nsub + j]))
           : 0.0f;
}

Format expanded_format(const Format& f) {
  Format w = f;
  if (f.sub != 0) w = Format{f.bits, f.sub, ScaleType::kF32, f.offset, 0};
  if (f.bits == 4 && f.sub == kHalfGroup) w.bits = 8;  // groups of 16 are int8's: codes q - 8 (sym), q (min)
  if (f.bits == 5) {
    w.bits = 8;
    if (w.offset == Offset::kSym) w.offset = Offset::kZeroPoint;  // d (q - 16)
  }
  return w;
}

namespace {

// Writes the codes c[0 .. n) (each within the format's code range, as stored: int8 sym as its
// byte, int4 / int5 unsigned) in the row layout: int8 a byte each; int4 sub-blocks of 16 bytes,
// element i in byte i's low nibble and i + 16 in its high one; int5 sub-blocks of 20 bytes,
// the fifth bits as a little-endian word (bit i: element i), then the int4 nibbles.
void put_codes(int bits, const int* c, int64_t n, uint8_t* q) {
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(c[i]);
    return;
  }
  for (int64_t s = 0; s < n; s += kSubBlock, c += kSubBlock) {
    if (bits == 5) {
      uint32_t high = 0;
      for (int i = 0; i < kSubBlock; ++i) high |= static_cast<uint32_t>((c[i] >> 4) & 1) << i;
      std::memcpy(q, &high, 4);
      q += 4;
    }
    for (int i = 0; i < 16; ++i) q[i] = static_cast<uint8_t>((c[i] & 15) | (c[i + 16] & 15) << 4);
    q += 16;
  }
}

// The 32 codes of the int5 sub-block at q (put_codes' layout), unsigned.
void int5_codes(const uint8_t* q, int* c) {
  uint32_t high;
  std::memcpy(&high, q, 4);
  for (int i = 0; i < 16; ++i) {
    c[i] = (q[4 + i] & 15) | static_cast<int>((high >> i) & 1) << 4;
    c[i + 16] = (q[4 + i] >> 4) | static_cast<int>((high >> (i + 16)) & 1) << 4;
  }
}

}  // namespace

void expand_row(const Format& f, const uint8_t* row, int64_t k, uint8_t* out) {
  const Format w = expanded_format(f);
  const int64_t g = group_elems(f, k), pe = scale_elems(f, k);
  const int64_t gb = group_bytes(f, g), hb = header_bytes(f), whb = base_header_bytes(w);
  const int sb = scale_bytes(f.scale);
  std::vector<int> codes(static_cast<size_t>(pe));
  for (int64_t gi = 0; gi < k / g; ++gi, row += gb)
    for (int64_t j = 0; j < g / pe; ++j) {  // the output's groups: one per scale of f
      if (f.sub != 0) {
        float d, m;
        sub_block_scale(f, row, j, &d, &m);
        std::memcpy(out, &d, 4);
        if (w.offset == Offset::kMin) std::memcpy(out + 4, &m, 4);
      } else {  // (int5: the header as it is, then z = 16 where sym became a zero point)
        std::memcpy(out, row, static_cast<size_t>(base_header_bytes(f)));
        if (f.offset == Offset::kSym && w.offset == Offset::kZeroPoint) out[sb] = 16;
      }
      out += whb;
      const uint8_t* q = row + hb + j * pe * f.bits / 8;
      if (f.bits == w.bits) {
        std::memcpy(out, q, static_cast<size_t>(pe * f.bits / 8));
      } else if (f.bits == 4) {  // int4 halves (s16) as int8 sym / min: the low or high nibbles
        const uint8_t* sub = row + hb + j / 2 * (kSubBlock / 2);
        const int z = f.offset == Offset::kSym ? 8 : 0;
        for (int64_t i = 0; i < pe; ++i) out[i] = static_cast<uint8_t>(((j % 2 ? sub[i] >> 4 : sub[i] & 15) - z));
      } else {  // int5 codes as int8 bytes
        for (int64_t s = 0; s < pe; s += kSubBlock) int5_codes(q + s / kSubBlock * 20, codes.data() + s);
        put_codes(8, codes.data(), pe, out);
      }
      out += pe * w.bits / 8;
    }
}

int64_t group_bytes(const Format& f, int64_t g) { return header_bytes(f) + g * f.bits / 8; }

StatusOr<int64_t> row_bytes(const Format& f, int64_t k) {
  const int64_t g = group_elems(f, k);
  if (k <= 0 || g <= 0) return invalid_argument("quantized rows need a positive length");
  if (g % kSubBlock != 0 && !(g == kHalfGroup && f.bits == 8 && (f.offset == Offset::kSym || f.offset == Offset::kMin)))
    return invalid_argument("group size " + std::to_string(g) + " of " + format_name(f) +
                            " is not a multiple of " + std::to_string(kSubBlock) +
                            " (16 only for int8 sym or min)");
  if (k % g != 0)
    return invalid_argument("rows of " + std::to_string(k) + " elements are not a whole number " +
                            "of groups of " + std::to_string(g) + " (" + format_name(f) + ")");
  if (k % kSubBlock != 0)
    return invalid_argument("rows of " + std::to_string(k) + " elements are not whole " +
                            std::to_string(kSubBlock) + "-element sub-blocks (" + format_name(f) + ")");
  return k / g * group_bytes(f, g);
}

StatusOr<Layout> parse_layout(std::string_view name) {
  if (name == kLayoutRowGroups) return Layout::kRowGroups;
  if (name == kLayoutInterleaved8) return Layout::kInterleaved8;
  if (name == kLayoutCudaMma8) return Layout::kCudaMma8;
  return invalid_argument("unknown quantized weight layout '" + std::string(name) + "' (known: " +
                          kLayoutRowGroups + ", " + kLayoutInterleaved8 + ", " + kLayoutCudaMma8 + ")");
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kRowGroups: return kLayoutRowGroups;
    case Layout::kInterleaved8: return kLayoutInterleaved8;
    case Layout::kCudaMma8: return kLayoutCudaMma8;
  }
  return "unknown";
}

StatusOr<uint64_t> tensor_bytes(const Format& f, Layout l, int64_t n, int64_t k) {
  ASSIGN_OR_RETURN(int64_t rb, row_bytes(f, k));
  if (n < 0) return invalid_argument("negative row count");
  const uint64_t rows = is_tiled(l) ? static_cast<uint64_t>((n + kTileRows - 1) / kTileRows * kTileRows)
                                                    : static_cast<uint64_t>(n);
  return rows * static_cast<uint64_t>(rb);
}

namespace {

// Calls move(tile_offset, row, row_offset, bytes) for every run of bytes that one row
// contributes to a tile of cpu_interleaved8 (see quant_format.h); only row `only` when >= 0.
template <typename Move>
void for_each_tile_run(const Format& f, int64_t k, int only, Move&& move) {
  const int64_t g = group_elems(f, k), gb = group_bytes(f, g), hb = header_bytes(f);
  const int sb = scale_bytes(f.scale);
  const int64_t bhb = base_header_bytes(f), sub_codes = hb - bhb;
  const int64_t chunks = g * f.bits / 8 / 4;  // 4-byte code chunks of one row's group
  for (int64_t gi = 0; gi < k / g; ++gi) {
    const int64_t tile_g = gi * kTileRows * gb, row_g = gi * gb;
    for (int r = only >= 0 ? only : 0; r < (only >= 0 ? only + 1 : kTileRows); ++r) {
      move(tile_g + r * sb, r, row_g, sb);  // scale
      if (f.offset == Offset::kMin) move(tile_g + kTileRows * sb + r * sb, r, row_g + sb, sb);
      if (f.offset == Offset::kZeroPoint) move(tile_g + kTileRows * sb + r, r, row_g + sb, 1);
      for (int64_t j = 0; j < sub_codes; ++j)  // sc_j, then mc_j: 8 rows' codes per sub-block
        move(tile_g + kTileRows * (bhb + j) + r, r, row_g + bhb + j, 1);
      for (int64_t c = 0; c < chunks; ++c)
        move(tile_g + kTileRows * hb + 32 * c + 4 * r, r, row_g + hb + 4 * c, 4);
    }
  }
}

}  // namespace

void interleave_tile(const Format& f, int64_t k, const uint8_t* rows, int64_t nrows, uint8_t* tile) {
  const int64_t rb = *row_bytes(f, k);
  std::memset(tile, 0, static_cast<size_t>(kTileRows * rb));
  for_each_tile_run(f, k, -1, [&](int64_t to, int r, int64_t ro, int64_t n) {
    if (r < nrows) std::memcpy(tile + to, rows + r * rb + ro, static_cast<size_t>(n));
  });
}

void deinterleave_row(const Format& f, int64_t k, const uint8_t* tile, int r, uint8_t* row) {
  for_each_tile_run(f, k, r, [&](int64_t to, int, int64_t ro, int64_t n) {
    std::memcpy(row + ro, tile + to, static_cast<size_t>(n));
  });
}

namespace {

// Element e of tile row r in cuda_mma_n8: its span's first byte, the span's sub-blocks m, its
// sub-block j, lane and (int8) fragment byte or (int4, int5) nibble of the lane's word.
struct CudaSlot {
  int64_t span_at, m, j, lane, byte, nibble;
};
CudaSlot cuda_slot(const Format& f, int64_t k, int r, int64_t e) {
  const int64_t groups = k / group_elems(f, k);
  const int64_t span = e / 128, m = std::min<int64_t>(4, (k - span * 128) / kSubBlock);
  const int64_t j = e % 128 / kSubBlock, i = e % kSubBlock;
  const int64_t s = i / 16, w = i % 16;                    // k-step, offset in it
  const int64_t q = w % 8 / 2, b = (w & 1) + 2 * (w / 8);  // lane % 4, fragment element b0..b3
  return {kTileRows * groups * header_bytes(f) + span * kTileRows * 128 * f.bits / 8, m, j, 4 * r + q, 4 * s + b,
          2 * s + (b >> 1) + 4 * (b & 1)};
}

}  // namespace

CodePos cuda_mma_code_pos(const Format& f, int64_t k, int r, int64_t e) {
  const CudaSlot c = cuda_slot(f, k, r, e);
  const int64_t W = f.bits == 8 ? 8 : 4;  // lane bytes per sub-block (int5: of the low 4 bits)
  const int64_t base = c.span_at + c.lane * c.m * W + c.j * W;
  if (f.bits == 8) return {base + c.byte, 0};
  return {base + c.nibble / 2, static_cast<int>(4 * (c.nibble % 2))};
}

CodePos cuda_mma_fifth_bit_pos(const Format& f, int64_t k, int r, int64_t e) {
  const CudaSlot c = cuda_slot(f, k, r, e);
  return {c.span_at + c.m * 128 + c.lane * c.m + c.j, static_cast<int>(c.nibble)};
}

namespace {

// Row-layout position of element e's code (as cuda_mma_code_pos for the row layout; int5: of its
// low 4 bits, after the sub-block's word of fifth bits).
CodePos row_code_pos(const Format& f, int64_t k, int64_t e) {
  const int64_t g = group_elems(f, k), gi = e / g, i = e % g;
  const int64_t base = gi * group_bytes(f, g) + header_bytes(f) + i / kSubBlock * (kSubBlock * f.bits / 8);
  const int64_t c = i % kSubBlock;
  if (f.bits == 8) return {base + c, 0};
  return {base + (f.bits == 5 ? 4 : 0) + c % 16, c < 16 ? 0 : 4};
}

// Calls move(tile_offset, row, row_offset, bytes) for the scales and offsets of cuda_mma_n8 (for
// row `only` when >= 0), the header part of the tile; codes go element by element.
template <typename Move>
void for_each_cuda_header(const Format& f, int64_t k, int only, Move&& move) {
  const int64_t g = group_elems(f, k), groups = k / g, gb = group_bytes(f, g);
  const int sb = scale_bytes(f.scale);
  const int64_t bhb = base_header_bytes(f), sub_codes = header_bytes(f) - bhb;
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int r = only >= 0 ? only : 0; r < (only >= 0 ? only + 1 : kTileRows); ++r) {
      move((gi * kTileRows + r) * sb, r, gi * gb, sb);
      const int64_t offsets = kTileRows * groups * sb;
      if (f.offset == Offset::kMin) move(offsets + (gi * kTileRows + r) * sb, r, gi * gb + sb, sb);
      if (f.offset == Offset::kZeroPoint) move(offsets + gi * kTileRows + r, r, gi * gb + sb, 1);
      const int64_t subs = kTileRows * groups * bhb;  // [G][sub codes][8]
      for (int64_t j = 0; j < sub_codes; ++j)
        move(subs + (gi * sub_codes + j) * kTileRows + r, r, gi * gb + bhb + j, 1);
    }
}

// cuda_mma_n8's code positions, computed once per tensor shape rather than per element
// (cuda_mma_code_pos per element made packing take most of the load time of a Llama-3-8B-shaped
// plan with synthetic int4 weights). They repeat: within a span, row r's codes lie 4 m W bytes
// after row r - 1's (lane 4 r + q, m sub-blocks of W bytes each); whole spans differ by their
// start; in the row layout, element c of a sub-block lies where element c of the first one does,
// from the sub-block's start.
// int5: the fifth bits alike (row r's m bytes of a span lie 4 m after row r - 1's; in the row
// layout, a sub-block's word of fifth bits lies 4 bytes before its nibbles).
struct CudaCodeMaps {
  int64_t W, start, span_bytes, full_spans, tail_m;
  CodePos full[128], tail[128];  // row 0's codes of a whole / of the short last span, from its start
  CodePos fifth_full[128], fifth_tail[128];  // int5: row 0's fifth bits, from the span's start
  CodePos in_sub[kSubBlock];

  CudaCodeMaps(const Format& f, int64_t k)
      : W(f.bits == 8 ? 8 : 4), start(cuda_mma_code_pos(f, k, 0, 0).byte),
        span_bytes(kTileRows * 128 * f.bits / 8), full_spans(k / 128), tail_m(k % 128 / kSubBlock) {
    auto span_table = [&](int64_t span, int64_t m, CodePos* t, CodePos* fifth) {
      for (int64_t e = 0; e < m * kSubBlock; ++e) {
        t[e] = cuda_mma_code_pos(f, k, 0, span * 128 + e);
        t[e].byte -= start + span * span_bytes;
        if (f.bits != 5) continue;
        fifth[e] = cuda_mma_fifth_bit_pos(f, k, 0, span * 128 + e);
        fifth[e].byte -= start + span * span_bytes;
      }
    };
    if (full_spans > 0) span_table(0, 4, full, fifth_full);
    if (tail_m > 0) span_table(full_spans, tail_m, tail, fifth_tail);
    const int64_t first = row_code_pos(f, k, 0).byte;
    for (int c = 0; c < kSubBlock; ++c) {
      in_sub[c] = row_code_pos(f, k, c);
      in_sub[c].byte -= first;
    }
  }
  int64_t spans() const { return full_spans + (tail_m > 0); }
  int64_t m(int64_t span) const { return span < full_spans ? 4 : tail_m; }
  const CodePos* table(int64_t span) const { return span < full_spans ? full : tail; }
  int64_t at(int64_t span, int r) const { return start + span * span_bytes + 4 * r * m(span) * W; }
  const CodePos* fifth_table(int64_t span) const { return span < full_spans ? fifth_full : fifth_tail; }
  int64_t fifth_at(int64_t span, int r) const { return start + span * span_bytes + 4 * r * m(span); }
  // Where the span's codes lie in a row of the row layout (element e: from[e], shift[e]).
  void row_sources(const Format& f, int64_t k, int64_t span, int64_t* from, uint8_t* shift) const {
    for (int64_t j = 0; j < m(span); ++j) {
      const int64_t sub = row_code_pos(f, k, span * 128 + j * kSubBlock).byte;
      for (int c = 0; c < kSubBlock; ++c) {
        from[j * kSubBlock + c] = sub + in_sub[c].byte;
        shift[j * kSubBlock + c] = static_cast<uint8_t>(in_sub[c].shift);
      }
    }
  }
};

void cuda_pack_tile(const Format& f, int64_t k, const uint8_t* rows, int64_t nrows, uint8_t* tile) {
  const int64_t rb = *row_bytes(f, k);
  std::memset(tile, 0, static_cast<size_t>(kTileRows * rb));
  for_each_cuda_header(f, k, -1, [&](int64_t to, int r, int64_t ro, int64_t n) {
    if (r < nrows) std::memcpy(tile + to, rows + r * rb + ro, static_cast<size_t>(n));
  });
  // Each tile byte written once, whole, from its codes (one int8 code, or two int4 ones: slot
  // 0 the low nibble): for each byte of a row's part of a span, the span elements in its slots.
  // (int5: the low 4 bits so, then the fifth bits one by one.)
  const CudaCodeMaps maps(f, k);
  const int bits = f.bits == 5 ? 4 : f.bits;
  const unsigned mask = (1u << bits) - 1;
  const int per_byte = 8 / bits;
  int16_t slots_full[128], slots_tail[128];
  auto fill_slots = [&](const CodePos* t, int64_t m, int16_t* slots) {
    for (int64_t e = 0; e < m * kSubBlock; ++e) slots[t[e].byte * per_byte + t[e].shift / bits] = static_cast<int16_t>(e);
  };
  if (maps.full_spans > 0) fill_slots(maps.full, 4, slots_full);
  if (maps.tail_m > 0) fill_slots(maps.tail, maps.tail_m, slots_tail);
  int64_t from[128];
  uint8_t shift[128];
  for (int64_t span = 0; span < maps.spans(); ++span) {
    maps.row_sources(f, k, span, from, shift);
    const int16_t* slots = span < maps.full_spans ? slots_full : slots_tail;
    const int64_t bytes = maps.m(span) * kSubBlock / per_byte;
    for (int r = 0; r < nrows; ++r) {
      const uint8_t* row = rows + r * rb;
      uint8_t* out = tile + maps.at(span, r);
      for (int64_t o = 0; o < bytes; ++o) {
        unsigned b = 0;
        for (int i = 0; i < per_byte; ++i) {
          const int e = slots[o * per_byte + i];
          b |= ((row[from[e]] >> shift[e]) & mask) << (i * bits);
        }
        out[o] = static_cast<uint8_t>(b);
      }
      if (f.bits != 5) continue;
      const CodePos* fifth = maps.fifth_table(span);
      uint8_t* high = tile + maps.fifth_at(span, r);
      for (int64_t e = 0; e < maps.m(span) * kSubBlock; ++e) {
        const int64_t word = from[e - e % kSubBlock] - 4;  // the sub-block's fifth bits
        const unsigned bit = (row[word + e % kSubBlock / 8] >> (e % 8)) & 1u;
        high[fifth[e].byte] = static_cast<uint8_t>(high[fifth[e].byte] | bit << fifth[e].shift);
      }
    }
  }
}

void cuda_unpack_row(const Format& f, int64_t k, const uint8_t* tile, int r, uint8_t* row) {
  const int64_t rb = *row_bytes(f, k);
  std::memset(row, 0, static_cast<size_t>(rb));
  for_each_cuda_header(f, k, r, [&](int64_t to, int, int64_t ro, int64_t n) {
    std::memcpy(row + ro, tile + to, static_cast<size_t>(n));
  });
  const CudaCodeMaps maps(f, k);
  const unsigned mask = f.bits == 8 ? 255u : 15u;
  int64_t to[128];
  uint8_t shift[128];
  for (int64_t span = 0; span < maps.spans(); ++span) {
    maps.row_sources(f, k, span, to, shift);
    const CodePos* t = maps.table(span);
    const uint8_t* in = tile + maps.at(span, r);
    for (int64_t e = 0; e < maps.m(span) * kSubBlock; ++e) {
      const unsigned code = (in[t[e].byte] >> t[e].shift) & mask;
      row[to[e]] = static_cast<uint8_t>(row[to[e]] | (code << shift[e]));
    }
    if (f.bits != 5) continue;
    const CodePos* fifth = maps.fifth_table(span);
    const uint8_t* high = tile + maps.fifth_at(span, r);
    for (int64_t e = 0; e < maps.m(span) * kSubBlock; ++e) {
      const int64_t word = to[e - e % kSubBlock] - 4;  // the sub-block's fifth bits
      const unsigned bit = (high[fifth[e].byte] >> fifth[e].shift) & 1u;
      row[word + e % kSubBlock / 8] = static_cast<uint8_t>(row[word + e % kSubBlock / 8] | bit << (e % 8));
    }
  }
}

}  // namespace

void pack_tile(const Format& f, Layout l, int64_t k, const uint8_t* rows, int64_t nrows, uint8_t* tile) {
  if (l == Layout::kCudaMma8) return cuda_pack_tile(f, k, rows, nrows, tile);
  interleave_tile(f, k, rows, nrows, tile);
}

void unpack_row(const Format& f, Layout l, int64_t k, const uint8_t* tile, int r, uint8_t* row) {
  if (l == Layout::kCudaMma8) return cuda_unpack_row(f, k, tile, r, row);
  deinterleave_row(f, k, tile, r, row);
}

float load_scale(ScaleType t, const uint8_t* p) {
  switch (t) {
    case ScaleType::kF16: return half_to_float(load_u16(p));
    case ScaleType::kBF16: return bf16_to_float(load_u16(p));
    case ScaleType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
  return 0.0f;
}

float store_scale(ScaleType t, float x, uint8_t* p) {
  switch (t) {
    case ScaleType::kF16: store_u16(p, float_to_half(x)); break;
    case ScaleType::kBF16: store_u16(p, float_to_bf16(x)); break;
    case ScaleType::kF32: std::memcpy(p, &x, 4); break;
  }
  return load_scale(t, p);
}

StatusOr<Format> parse_format(std::string_view name) {
  const std::string full(name);
  auto bad = [&](const std::string& why) {
    return invalid_argument("quantization format '" + full + "': " + why +
                            " (expected int<4|5|8>-g<N>[s<M>]|row-<f16|bf16|f32>-<sym|zp|min|nl>)");
  };
  std::string_view parts[4];
  int n = 0;
  while (n < 4) {
    const size_t dash = name.find('-');
    parts[n++] = name.substr(0, dash);
    if (dash == std::string_view::npos) {
      name = {};
      break;
    }
    name.remove_prefix(dash + 1);
  }
  if (n != 4 || !name.empty()) return bad("it has not four parts");
  Format f;
  if (parts[0] == "int4") f.bits = 4;
  else if (parts[0] == "int5") f.bits = 5;
  else if (parts[0] == "int8") f.bits = 8;
  else return bad("bits '" + std::string(parts[0]) + "'");
  std::string_view group = parts[1], sub;
  if (const size_t s = group.find('s'); s != std::string_view::npos) {
    sub = group.substr(s + 1);
    group = group.substr(0, s);
    if (!parse_int(sub, &f.sub) || (f.sub != kSubBlock && f.sub != kHalfGroup))
      return bad("sub-scales 's" + std::string(sub) + "' (s32, or s16 for int4 / int8 sym or min)");
  }
  if (group == "row") {
    f.group = 0;
  } else if (group.size() < 2 || group[0] != 'g' || !parse_int(group.substr(1), &f.group) ||
             f.group <= 0 || (f.group % kSubBlock != 0 && f.group != kHalfGroup)) {
    return bad("group '" + std::string(parts[1]) + "' (a multiple of 32, 16, or row)");
  }
  if (parts[2] == "f16") f.scale = ScaleType::kF16;
  else if (parts[2] == "bf16") f.scale = ScaleType::kBF16;
  else if (parts[2] == "f32") f.scale = ScaleType::kF32;
  else return bad("scale type '" + std::string(parts[2]) + "'");
  if (parts[3] == "sym") f.offset = Offset::kSym;
  else if (parts[3] == "zp") f.offset = Offset::kZeroPoint;
  else if (parts[3] == "min") f.offset = Offset::kMin;
  else if (parts[3] == "nl") f.offset = Offset::kNl;
  else return bad("offset '" + std::string(parts[3]) + "'");
  if (f.offset == Offset::kNl && f.bits != 4) return bad("nl codes are int4 only");
  if (f.group == kHalfGroup && (f.bits != 8 || (f.offset != Offset::kSym && f.offset != Offset::kMin)))
    return bad("groups of 16 are int8 sym or min only");
  if (f.sub != 0) {
    if (f.group == 0 || f.group <= f.sub || f.group % f.sub != 0)
      return bad("sub-scales need a group that is a multiple of the sub-block, and larger");
    if (f.sub == kHalfGroup && (f.bits == 5 || (f.offset != Offset::kSym && f.offset != Offset::kMin)))
      return bad("sub-blocks of 16 are int4 or int8 sym or min only");
    if (f.offset == Offset::kZeroPoint) return bad("zero points take no sub-scales");
    if (f.scale == ScaleType::kF32)
      return bad("sub-scales need an f16 or bf16 scale (so scale * code is exact in f32)");
  }
  return f;
}

std::string format_name(const Format& f) {
  std::string s = "int" + std::to_string(f.bits) + "-";
  s += f.group == 0 ? "row" : "g" + std::to_string(f.group);
  if (f.sub != 0) s += "s" + std::to_string(f.sub);
  s += f.scale == ScaleType::kF16 ? "-f16" : f.scale == ScaleType::kBF16 ? "-bf16" : "-f32";
  s += f.offset == Offset::kSym ? "-sym" : f.offset == Offset::kZeroPoint ? "-zp" : f.offset == Offset::kMin ? "-min" : "-nl";
  return s;
}

void dequantize_row(const Format& f, const uint8_t* row, int64_t k, float* out) {
  const int64_t g = group_elems(f, k), pe = scale_elems(f, k);  // pe: elements of one scale
  const int64_t gb = group_bytes(f, g), hb = header_bytes(f);
  const int sb = scale_bytes(f.scale);
  for (int64_t base = 0; base < k; base += g, row += gb)
  for (int64_t pi = 0; pi < g / pe; ++pi) {
    float d, m = 0.0f;
    int z = 0;
    if (f.sub != 0) {
      sub_block_scale(f, row, pi, &d, &m);
    } else {
      d = load_scale(f.scale, row);
      if (f.offset == Offset::kMin) m = load_scale(f.scale, row + sb);
      if (f.offset == Offset::kZeroPoint) z = row[sb];
    }
    const uint8_t* q = row + hb + pi * pe * f.bits / 8;
    float* y = out + base + pi * pe;
    if (f.bits == 8) {
      for (int64_t i = 0; i < pe; ++i) {
        if (f.offset == Offset::kSym) y[i] = d * static_cast<float>(static_cast<int8_t>(q[i]));
        else if (f.offset == Offset::kZeroPoint) y[i] = d * static_cast<float>(q[i] - z);
        else y[i] = d * static_cast<float>(q[i]) + m;
      }
      continue;
    }
    if (f.bits == 5) {  // (the expressions of int8 zp / min: expanded_format's values are these)
      if (f.offset == Offset::kSym) z = 16;
      int c[kSubBlock];
      for (int64_t sbk = 0; sbk < pe; sbk += kSubBlock, q += 20) {
        int5_codes(q, c);
        for (int i = 0; i < kSubBlock; ++i)
          y[sbk + i] = f.offset == Offset::kMin ? d * static_cast<float>(c[i]) + m : d * static_cast<float>(c[i] - z);
      }
      continue;
    }
    if (f.offset == Offset::kSym) z = 8;
    if (pe == kHalfGroup) {  // int4 s16 (sym, min): scale pi holds the low (even pi) or high nibbles
      const uint8_t* sub = row + hb + pi / 2 * (kSubBlock / 2);
      for (int i = 0; i < 16; ++i) {
        const int c = pi % 2 ? sub[i] >> 4 : sub[i] & 0x0F;
        y[i] = f.offset == Offset::kMin ? d * static_cast<float>(c) + m : d * static_cast<float>(c - z);
      }
      continue;
    }
    for (int64_t sbk = 0; sbk < pe; sbk += kSubBlock, q += kSubBlock / 2) {
      for (int i = 0; i < 16; ++i) {
        const int lo = q[i] & 0x0F, hi = q[i] >> 4;
        if (f.offset == Offset::kMin) {
          y[sbk + i] = d * static_cast<float>(lo) + m;
          y[sbk + i + 16] = d * static_cast<float>(hi) + m;
        } else if (f.offset == Offset::kNl) {
          y[sbk + i] = d * static_cast<float>(kNlGrid[lo]);
          y[sbk + i + 16] = d * static_cast<float>(kNlGrid[hi]);
        } else {
          y[sbk + i] = d * static_cast<float>(lo - z);
          y[sbk + i + 16] = d * static_cast<float>(hi - z);
        }
      }
    }
  }
}

std::string check_row(const Format& f, const uint8_t* row, int64_t k) {
  const int64_t g = group_elems(f, k);
  const int64_t gb = group_bytes(f, g);
  const int sb = scale_bytes(f.scale);
  // (Sub-scale codes take any int8 value: scale * code stays finite and exact.)
  for (int64_t gi = 0; gi < k / g; ++gi, row += gb) {
    if (!std::isfinite(load_scale(f.scale, row)) ||
        (f.offset == Offset::kMin && !std::isfinite(load_scale(f.scale, row + sb))))
      return "group " + std::to_string(gi) + " has a scale or min that is not finite";
    if (f.offset == Offset::kZeroPoint && f.bits < 8 && row[sb] >= (1 << f.bits))
      return "group " + std::to_string(gi) + " has zero point " + std::to_string(row[sb]) +
             ", beyond the " + std::to_string(f.bits) + "-bit code range";
  }
  return "";
}

namespace {

// *mn, *mx: what std::min / std::max folded over v[0 .. n) from v[0] give (the first of equal
// values kept), in 8 interleaved partial folds that the compiler keeps in vector registers (the
// serial folds were most of quantizing's time). Their order matters for the sign of a zero only:
// a zero result is the first zero of v, as the serial fold keeps it. (A NaN v[0] stays, others
// are passed over, as there.)
void min_max(const float* v, int64_t n, float* mn_out, float* mx_out) {
  float mn[8], mx[8];
  for (int l = 0; l < 8; ++l) mn[l] = mx[l] = v[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      mn[l] = std::min(mn[l], v[i + l]);
      mx[l] = std::max(mx[l], v[i + l]);
    }
  for (; i < n; ++i) {
    mn[0] = std::min(mn[0], v[i]);
    mx[0] = std::max(mx[0], v[i]);
  }
  float a = mn[0], b = mx[0];
  for (int l = 1; l < 8; ++l) {
    a = std::min(a, mn[l]);
    b = std::max(b, mx[l]);
  }
  if (a == 0.0f || b == 0.0f) {
    const float* zero = std::find(v, v + n, 0.0f);
    if (a == 0.0f) a = *zero;
    if (b == 0.0f) b = *zero;
  }
  *mn_out = a;
  *mx_out = b;
}

// nl codes of n elements (whole sub-blocks) for the scale d: every value to the nearest grid
// point (the lower of two at equal distance).
void write_nl_codes(const float* v, int64_t n, float d, uint8_t* q) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  auto code = [&](float val) {  // the grid ascends: the midpoints below t (a tie stays low)
    const float t = val * id;
    int c = 0;
    for (int j = 0; j < 15; ++j) c += t > 0.5f * static_cast<float>(kNlGrid[j] + kNlGrid[j + 1]);
    return c;
  };
  for (int64_t sbk = 0; sbk < n; sbk += kSubBlock, q += kSubBlock / 2)
    for (int i = 0; i < 16; ++i)
      q[i] = static_cast<uint8_t>(code(v[sbk + i]) | code(v[sbk + i + 16]) << 4);
}

// Codes of n elements (whole sub-blocks for int4) for the scale d >= 0 and, but for sym, the
// min m, rounded to nearest and clamped to the codes' range. nibbles 0 / 1 (int4 sub-scales of 16:
// n = 16): into the low / high nibbles of the 16 bytes at q, a sub-block's half.
void write_codes(const Format& f, const float* v, int64_t n, float d, float m, uint8_t* q, int nibbles = -1) {
  int lo, hi;
  code_range(f, &lo, &hi);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  const int half = f.bits < 8 ? 1 << (f.bits - 1) : 0;  // int4 / int5 sym: codes q - 8 / q - 16
  const float qlo = static_cast<float>(f.offset == Offset::kSym && half ? -half : lo);
  const float qhi = static_cast<float>(f.offset == Offset::kSym && half ? half - 1 : hi);
  // The scaled value clamped to the codes' range, then rounded to nearest, ties to even (as
  // nearbyint in the default rounding mode; clamping first gives the same code, as both steps
  // keep order and integers): adding and subtracting 1.5 * 2^23 leaves a float below 2^22 in
  // magnitude rounded so, inline (nearbyint was a libm call per weight; without SSE4.1 in the
  // baseline ISA the compiler does not inline it). Symmetric codes subtract 0: (val - 0) * id
  // is val * id bit for bit, so one expression serves every offset kind.
  const float sub = f.offset == Offset::kSym ? 0.0f : m;
  auto code = [&](float val) {
    float t = (val - sub) * id;
    t = std::min(std::max(t, qlo), qhi);
    return static_cast<int>((t + 12582912.0f) - 12582912.0f);
  };
  if (f.bits == 8) {  // (signed codes as their two's complement bytes)
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(code(v[i]));
    return;
  }
  const int bias = f.offset == Offset::kSym ? half : 0;
  if (nibbles >= 0) {
    for (int i = 0; i < kHalfGroup; ++i) {
      const int c = code(v[i]) + bias;
      q[i] = static_cast<uint8_t>(nibbles ? (q[i] & 0x0F) | c << 4 : (q[i] & 0xF0) | c);
    }
    return;
  }
  for (int64_t sbk = 0; sbk < n; sbk += kSubBlock, q += kSubBlock * f.bits / 8) {
    int c[kSubBlock];
    for (int i = 0; i < kSubBlock; ++i) c[i] = code(v[sbk + i]) + bias;
    put_codes(f.bits, c, kSubBlock, q);
  }
}

// A group's (or sub-block's) scale and min in f32, before any rounding to the scale type: sym
// amax / qmax; nl the value of largest magnitude (its sign kept: the grid is not symmetric) over
// the grid's -127; min (and zp) the range including 0 (so 0 stays representable: exact for zero
// weights and padding) over the top code, the min the least value or 0.
void ideal_scale(const Format& f, const float* v, int64_t n, float* d, float* m) {
  float mn, mx;
  min_max(v, n, &mn, &mx);
  *m = 0.0f;
  if (f.offset == Offset::kNl) {
    *d = (std::fabs(mn) >= std::fabs(mx) ? mn : mx) / -127.0f;
  } else if (f.offset == Offset::kSym) {
    *d = std::max(std::fabs(mn), std::fabs(mx)) / static_cast<float>((1 << (f.bits - 1)) - 1);  // 127, 15, 7
  } else {
    mn = std::min(mn, 0.0f);
    mx = std::max(mx, 0.0f);
    *d = (mx - mn) / static_cast<float>((1 << f.bits) - 1);  // the top code: 255, 31, 15
    *m = mn;
  }
}

// Sub-scales: each sub-block's ideal scale (and min), then d = the largest |scale| / 127 (dmin =
// the least min / 127) rounded to the scale type, the codes sc_j = round(scale_j / d) and mc_j =
// round(min_j / dmin) (0 where d or dmin is 0), and each sub-block's codes for the exact
// d * sc_j and dmin * mc_j.
void quantize_row_sub(const Format& f, const float* x, int64_t k, uint8_t* out) {
  const int64_t g = f.group, pe = f.sub, nsub = sub_scales(f);
  const int64_t gb = group_bytes(f, g), hb = header_bytes(f), bhb = base_header_bytes(f);
  const int sb = scale_bytes(f.scale);
  std::vector<float> ds(static_cast<size_t>(nsub)), ms(static_cast<size_t>(nsub));
  for (int64_t base = 0; base < k; base += g, out += gb) {
    float dmax = 0.0f, mlow = 0.0f;
    for (int64_t j = 0; j < nsub; ++j) {
      ideal_scale(f, x + base + j * pe, pe, &ds[j], &ms[j]);
      dmax = std::max(dmax, std::fabs(ds[j]));
      mlow = std::min(mlow, ms[j]);
    }
    const float d = store_scale(f.scale, dmax / 127.0f, out);
    const float dmin = f.offset == Offset::kMin ? store_scale(f.scale, mlow / 127.0f, out + sb) : 0.0f;
    auto int8_code = [](float t) { return static_cast<int>(std::clamp(std::nearbyint(t), -127.0f, 127.0f)); };
    for (int64_t j = 0; j < nsub; ++j) {
      const int sc = d != 0.0f ? int8_code(ds[j] / d) : 0;
      out[bhb + j] = static_cast<uint8_t>(static_cast<int8_t>(sc));
      float dj, mj;
      if (f.offset == Offset::kMin) {
        const int mc = dmin != 0.0f ? int8_code(ms[j] / dmin) : 0;
        out[bhb + nsub + j] = static_cast<uint8_t>(static_cast<int8_t>(mc));
      }
      sub_block_scale(f, out, j, &dj, &mj);
      if (f.bits == 4 && pe == kHalfGroup) {  // a half of a sub-block: its nibbles
        write_codes(f, x + base + j * pe, pe, dj, mj, out + hb + j / 2 * (kSubBlock / 2), static_cast<int>(j % 2));
        continue;
      }
      uint8_t* q = out + hb + j * pe * f.bits / 8;
      if (f.offset == Offset::kNl) write_nl_codes(x + base + j * pe, pe, dj, q);
      else write_codes(f, x + base + j * pe, pe, dj, mj, q);
    }
  }
}

}  // namespace

void quantize_row(const Format& f, const float* x, int64_t k, uint8_t* out) {
  if (f.sub != 0) return quantize_row_sub(f, x, k, out);
  const int64_t g = group_elems(f, k);
  const int64_t gb = group_bytes(f, g), hb = header_bytes(f);
  const int sb = scale_bytes(f.scale);
  int lo, hi;
  code_range(f, &lo, &hi);
  for (int64_t base = 0; base < k; base += g, out += gb) {
    const float* v = x + base;
    float ideal, mn;
    ideal_scale(f, v, g, &ideal, &mn);
    const float d = store_scale(f.scale, ideal, out);
    float m = 0.0f;
    if (f.offset == Offset::kNl) {
      write_nl_codes(v, g, d, out + hb);
      continue;
    }
    if (f.offset == Offset::kMin) {
      m = store_scale(f.scale, mn, out + sb);
    } else if (f.offset == Offset::kZeroPoint) {
      int z = d > 0.0f ? static_cast<int>(std::nearbyint(-mn / d)) : 0;
      z = std::clamp(z, 0, hi);
      out[sb] = static_cast<uint8_t>(z);
      m = -d * static_cast<float>(z);
    }
    write_codes(f, v, g, d, m, out + hb);
  }
}

}  // namespace llmrt::quant

//===- LinearKernel.cpp - llm.linear and llm.logits: y = x w^T (+ b) ------===//
//
// The weight-only GEMV/small-GEMM path (decode and small batches), one warp
// per work item:
//
//   * quantized weights in the cuda_mma_n8 layout (runtime/quant/
//     quant_format.h): an item is one tile of 8 output rows times a chunk of
//     kTokens activation rows, one block whose warps split K by 128-element
//     spans. Lane L owns row n = L / 4 of the tile and the fragment elements
//     k = 16 s + 2 (L % 4) + {0, 1, 8, 9} of every sub-block, i.e. exactly
//     the bytes the layout gives it: per span one contiguous run of m * W
//     bytes (16 for int4). Each warp stages its next spans' codes and scales
//     in shared memory with cp.async, dequantizes the codes in registers
//     (f32: a masked code is an exact float after one LOP3 and one FADD),
//     multiplies them with activation pairs (8-byte loads), and the four
//     lanes of a row finish the sum with two xor shuffles. Sub-scales
//     (k-quants) are staged as the header's 8 scales and the groups' codes,
//     multiplied out per sub-block (exact); int5 codes as int4 ones plus a
//     byte of fifth bits per lane and sub-block (4 more bytes a span), put
//     into bit 4 of each code byte (int5Codes).
//   * dense f32 / f16 / bf16 weights [N, K] (row-major): an item is one
//     output row times a chunk of kTokens activation rows; lanes stride over
//     K in 16-byte loads (8 bf16/f16 weights and the activations they meet;
//     one element per load for f32 weights or K not a multiple of 8) and a
//     five-step xor shuffle tree finishes the sum.
//
// Both accumulate in f32 in an order fixed by the sizes only (each lane in
// index order, then the shuffle tree), never by the grid or the batch's other
// rows. The dequantized value of a code is exact in f32 (quant_format.h), so
// results differ from the CPU backend only by summation order and FMA
// contraction.
//
// The tensor-core kernel of the family (LinearParams::tensorCores), which the
// plan adds next to the CUDA-core one for steps of kTensorCoreMinRows rows or
// more (prefill, large decode batches), uses mma.sync m16n8k8 with TF32
// operands and f32 accumulation, a warp item being 8 weight rows x 64 tokens.
// The quantized tile layout gives each lane exactly its B fragments (the k
// order inside a sub-block is permuted alike for A and B), so weights are read
// once per 64 tokens. Operands are rounded to 10 mantissa bits (as f16 inputs
// would be, with f32's range): a row's result then depends on which kernel its
// step ran, within that rounding. Two kernels rather than one with both paths:
// each gets its own register allocation (the CUDA-core GEMV keeps few
// registers and many warps in flight; the mma tiles need many).
//===----------------------------------------------------------------------===//

#include <algorithm>

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"
#include "runtime/quant/quant_format.h"

namespace llmc {

namespace {

// Shared prelude: sizes, conversions and the per-token activation pointers.
constexpr const char *kCommon = R"cuda(namespace {
constexpr int kN = ${N};             // output features
constexpr int kK = ${K};             // input features
constexpr int kTokens = ${TOKENS};   // activation rows per work item
constexpr int kWarps = ${WARPS};     // warps per block
constexpr bool kHasBias = ${BIAS};
constexpr bool kGather = ${GATHER};  // logits: output row r reads x row rows[r]
constexpr bool kTensorCores = ${TENSOR_CORES}; // the tensor-core kernel (sm_80+), else CUDA cores
// Quantized CUDA-core GEMV only: x holds quantize_q8's int8 rows (already gathered), not f32.
constexpr bool kInt8Activations = ${INT8_ACTIVATIONS};
// CUDA-core GEMV only: y = [gate | up] of kSiluInter columns each, and the kernel writes
// h = silu(gate) * up [T, kSiluInter] (quantized weights: and its int8 rows) instead
// (LinearParams::siluInter); 0: it writes y.
constexpr int kSiluInter = ${SILU_INTER};
// Before its wait on the kernel before (programmatic dependent launch), block b < kPrefetchBlocks
// asks the L2 for the first kPrefetchBytes of the weight bytes its first item reads (LinearParams::
// l2PrefetchBytes over the blocks); the weight is kWeightSize long.
constexpr long long kPrefetchBlocks = ${PREFETCH_BLOCKS};
constexpr long long kPrefetchBytes = ${PREFETCH_BYTES};
constexpr long long kWeightSize = ${WEIGHT_SIZE};

// Bytes [from, to) of the weight at w (cut to whole 16-byte units inside it) asked of the L2
// (llmcPrefetchL2) by the calling thread: a GEMV's weights are never written by a kernel, so it
// may ask before its wait, while the kernel before (a norm, the attention) leaves the memory bus
// idle. sm_90+, where the runtime launches a kernel while the one before it runs; elsewhere
// nothing (the host emulation logs the pieces).
__device__ __forceinline__ void prefetchWeightL2(const unsigned char *w, long long from, long long to) {
  const unsigned long long base = reinterpret_cast<unsigned long long>(w);
  const unsigned long long begin = (base + from + 15) & ~15ull;
  const unsigned long long end = (base + (to < kWeightSize ? to : kWeightSize)) & ~15ull;
  if (begin < end)
    llmcPrefetchL2(reinterpret_cast<const void *>(begin), (unsigned)(end - begin));
}
} // namespace
)cuda";

// Helpers of both paths; the tensor-core path's mma and TF32 conversion are detail::kTf32Mma.
constexpr const char *kTensorCoreOps = R"cuda(namespace {
constexpr int kMTiles = 4;                 // m-tiles of 16 tokens per warp item
constexpr int kMmaTokens = 16 * kMTiles;

// CUDA cores: the x rows of tokens t0 .. t0 + NT - 1 of an item, and its sums at zero.
template <int NT>
__device__ __forceinline__ void gemvStart(const float *x, const int *rows, int t0, const float *xr[NT],
                                          float acc[NT]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    xr[i] = x + (long long)(kGather ? rows[t0 + i] : t0 + i) * kK;
    acc[i] = 0.0f;
  }
}

// The x rows of rows g and g + 8 of each m-tile of the item at token t0 (rows past T repeat row
// T - 1; their results are not stored). Row indices, not pointers: half the registers.
__device__ __forceinline__ void mmaRows(const int *rows, int T, int t0, int g, int xr[kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = t0 + 16 * mt + g + 8 * h < T ? t0 + 16 * mt + g + 8 * h : T - 1;
      xr[mt][h] = kGather ? rows[t] : t;
    }
}
// Activation (row, k) rounded to TF32.
__device__ __forceinline__ unsigned xTf32(const float *x, int row, int k) {
  return toTf32(x[(long long)row * kK + k]);
}

// Stores the item's outputs: acc[mt][i] is token t0 + 16 mt + g + 8 (i / 2), weight row
// row0 + 2 q + i % 2.
__device__ __forceinline__ void mmaStore(float acc[kMTiles][4], const float *bias, float *y, int T,
                                         int t0, int row0, int g, int q) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = t0 + 16 * mt + g + 8 * (i >> 1), r = row0 + 2 * q + (i & 1);
      if (t < T && r < kN)
        y[(long long)t * kN + r] = kHasBias ? acc[mt][i] + bias[r] : acc[mt][i];
    }
}
} // namespace
)cuda";


constexpr const char *kQuantTemplate = R"cuda(namespace {
// Whether a lane's codes of a whole span (16 bytes for int4, 32 for int8) lie 16-byte aligned
// (every real model's shapes).
constexpr bool kVectorCodes = kCodesAt % 16 == 0 && kTileBytes % 16 == 0 && kSpanBytes % 16 == 0;

// ---- CUDA cores ----
// A span's group(s): one for the whole span when groups are whole spans (g128, g256 ..., or one
// group per row), else one per sub-block (g32, g64), or two (g16: one per k-step of 16).
constexpr bool kGroupPerSpan = kGroup % 128 == 0 || kGroups == 1;
// Sub-scales under headers of whole spans (GGUF's super-blocks of 256): a span's groups share one
// header (d, dmin), staged once.
constexpr bool kHeaderPerSpan = kSub > 0 && kHeaderGroup % 128 == 0;
// Scale records a span's staged scales hold: a group's each (its 8 rows' scales; with sub-scales,
// its header's 8 scales then its 8 codes); with kHeaderPerSpan one, the header's 8 scales then
// its kSpanGroups groups' codes (offsets alike: the 8 mins, the mc codes).
constexpr int kSpanGroups = kGroupPerSpan ? 1 : 4 * kSubGroups;
constexpr int kSpanRecords = kHeaderPerSpan ? 1 : kSpanGroups;
constexpr int kFullSpans = kK / 128;        // spans of 4 sub-blocks
constexpr int kTailSubBlocks = (kK % 128) / 32;

// Each warp stages the spans it sums in shared memory, kStages deep, with cp.async (sm_80+; sm_75
// and the host emulation copy synchronously):
// the copies in flight cost no registers (prefetching them into registers took so many that
// the kernel ran at half occupancy or spilled). A stage: the lanes' codes (lane L's m * kW bytes
// at L * 4 kW), then the 8 rows' scales of each of the span's groups, then their offsets.
// Over int8 activations a span costs about a quarter of the instructions, so a warp asks for its
// spans sooner: one more span in flight keeps as many bytes requested per multiprocessor (~1.5
// KiB per warp of int4, 48 KiB at 32 warps: above an H200's ~4.8 TB/s x ~0.8 us / 132 SMs).
constexpr int kStages = kInt8Activations ? 4 : 3;
constexpr int kGroupScaleBytes = 8 * kScaleBytes + (kSub == 0 ? 0 : kHeaderPerSpan ? 8 * kSpanGroups : 8); // a record
constexpr int kGroupOffsetBytes = kOffset == 2 ? kGroupScaleBytes : kOffset == 1 ? 8 : 0;
// A span's scales: its records of scales, then those of their offsets at kOffsetsRel.
constexpr int kOffsetsRel = kSpanRecords * kGroupScaleBytes;
constexpr int kSpanScaleBytes = (kOffsetsRel + kSpanRecords * kGroupOffsetBytes + 15) / 16 * 16;
// Where a warp's spans' scales take at most 2 KiB (g128 and wider up to K = 8192 a warp, ...),
// the warp stages all of them once per item (kItemScales), as a cp.async group of their own, and
// a stage holds the codes alone: a span's staging is then one 16-byte copy per lane (nvdisasm of
// Llama-3-8B's gate|up, int8 activations at one token: 90 instructions a span instead of 127),
// and a lane reads only what it copied itself. Else each stage holds its span's scales after the
// codes, copied by some of the lanes.
constexpr int kSpansPerWarp = (kSpans + kWarps - 1) / kWarps;
// int5: a stage's fifth bits follow the codes, lane L's 4 bytes (a whole span's) at kStageFifthAt + 4 L.
constexpr int kStageFifthAt = 32 * 4 * kW;
constexpr int kStageScalesAt = kStageFifthAt + (kBits == 5 ? 128 : 0);
// The SiLU-mul epilogue's block holds 8 warps' stages, item scales and partial sums in its 48 KiB
// of static shared memory: int8 codes with 2 KiB of item scales a warp (Q8_0-like int8-g32-f16
// over Llama-3-8B's K of 4096) would take 49 KiB, so there the scales go with each span.
constexpr bool kItemScales = kSpansPerWarp * kSpanScaleBytes <= 2048 &&
                             (kSiluInter == 0 || 8 * (kStages * kStageScalesAt + kSpansPerWarp * kSpanScaleBytes) +
                                                         8 * 8 * kTokens * 4 <= 48 * 1024);
constexpr int kStageBytes = kItemScales ? kStageScalesAt : kStageScalesAt + kSpanScaleBytes;
struct alignas(16) Stage {
  unsigned char b[kStageBytes];
};
struct alignas(16) ItemScales {
  unsigned char b[kItemScales ? kSpansPerWarp * kSpanScaleBytes : 16];
};

// A stage's address as cp.async takes it: a shared-memory address, converted once per item from
// the stage's pointer (converted at each copy, the SASS recomputed the shared window for every
// piece); the host emulation and sm_75 (no cp.async) copy through the pointer. (The
// f32-activation GEMV once converted at each copy: in a loop of one span per iteration, converting
// once spilled more; in gemvItem's loop of kStages spans it spills less (g128: never in a span loop).)
#if defined(LLMC_HOST_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
constexpr bool kSharedStageAddr = false;
#else
constexpr bool kSharedStageAddr = true;
#endif
template <bool kShared> struct StageAddrOf { using type = unsigned char *; };
template <> struct StageAddrOf<true> { using type = unsigned; };
using StageAddr = StageAddrOf<kSharedStageAddr>::type;
__device__ __forceinline__ unsigned sharedAddress(unsigned a) { return a; }
__device__ __forceinline__ unsigned sharedAddress(unsigned char *p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ unsigned char *toStageAddr(unsigned char *p, unsigned char *) { return p; }
__device__ __forceinline__ unsigned toStageAddr(unsigned char *p, unsigned) { return sharedAddress(p); }
__device__ __forceinline__ StageAddr stageAddress(unsigned char *p) { return toStageAddr(p, StageAddr()); }
// Copies `bytes` (a multiple of kPiece; kPiece 4, 8 or 16, both addresses kPiece-aligned) from
// global to shared memory without waiting; cpAsyncCommit() closes a group of copies and
// cpAsyncWait<N>() waits until at most N groups are pending (the host emulation copies at once).
template <int kPiece>
__device__ __forceinline__ void cpAsync(StageAddr dst, const unsigned char *src, int bytes) {
  for (int o = 0; o < bytes; o += kPiece) {
#if defined(LLMC_HOST_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800) // no cp.async: copy now
    memcpy(dst + o, src + o, kPiece);
#else
    if (kPiece == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sharedAddress(dst + o)), "l"(src + o) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(sharedAddress(dst + o)), "l"(src + o), "n"(kPiece)
                   : "memory");
#endif
  }
}
__device__ __forceinline__ void cpAsyncCommit() {
#if !defined(LLMC_HOST_EMULATION) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cpAsyncWait() {
#if !defined(LLMC_HOST_EMULATION) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Scales (and offsets) of group g: 8 rows' worth at base + g * kGroupScaleBytes, 16-byte aligned
// within the tile (kOffsetsAt too) and 8-byte aligned in memory; with sub-scales, a record is
// the header's 8 scales (mins) then the codes, which lie kSpanGroups groups' after each other
// (one group's: 8-byte pieces). Piece `piece` of the scales (of the offsets) of span `span`'s
// record gi into a span's scales at `dst` (kSpanScaleBytes).
constexpr int kScalePiece = (kSub > 0 && !kHeaderPerSpan) || kTileBytes % 16 != 0 ? 8 : 16;
constexpr int kScalePieces = kGroupScaleBytes / kScalePiece;
constexpr int kOffsetPiece = kOffset == 1 ? 8 : kScalePiece;
constexpr int kOffsetPieces = kGroupOffsetBytes / kOffsetPiece;
__device__ __forceinline__ int spanGroup(int span, int gi) {
  const int k0 = span * 128 + gi * (32 / kSubGroups);
  return (k0 < kK ? k0 : span * 128) / kGroup; // a sub-block past K: any valid group
}
// Piece `piece` of group g's scales (of its offsets) in the tile at base. (Without sub-scales the
// pointer sums of before: summed as one int first, ptxas spilled 228 bytes instead of 192 in
// Q6_K-like int8-g16 gate|up kernels on sm_90.)
__device__ __forceinline__ const unsigned char *scalePiece(const unsigned char *base, int g, int piece) {
  if (kSub == 0)
    return base + g * kGroupScaleBytes + piece * kScalePiece;
  const int at = piece * kScalePiece; // (the header's scales take 16 bytes)
  return base + (at < 16 ? groupHeaderAt(g) + at : subScalesAt(g) + at - 16);
}
__device__ __forceinline__ const unsigned char *offsetPiece(const unsigned char *base, int g, int piece) {
  if (kSub == 0)
    return base + kOffsetsAt + g * kGroupOffsetBytes + piece * kOffsetPiece;
  const int at = piece * kOffsetPiece;
  return base + (at < 16 ? kOffsetsAt + groupHeaderAt(g) + at : subMinsAt(g) + at - 16);
}
__device__ __forceinline__ void stageScalePiece(const unsigned char *base, int span, int gi, int piece, StageAddr dst) {
  cpAsync<kScalePiece>(dst + gi * kGroupScaleBytes + piece * kScalePiece, scalePiece(base, spanGroup(span, gi), piece),
                       kScalePiece);
}
__device__ __forceinline__ void stageOffsetPiece(const unsigned char *base, int span, int gi, int piece, StageAddr dst) {
  cpAsync<kOffsetPiece>(dst + kOffsetsRel + gi * kGroupOffsetBytes + piece * kOffsetPiece,
                        offsetPiece(base, spanGroup(span, gi), piece), kOffsetPiece);
}

// Stages span `span` (M sub-blocks) of the tile at `base`: each lane its codes; without
// kItemScales, lanes 0 .. the group chunks' pieces too.
template <int M>
__device__ __forceinline__ void stageSpan(const unsigned char *base, int span, int lane, StageAddr stage) {
  // Tiles are 8-byte aligned (8 rows of whole bytes each from a 256-byte aligned tensor), 16 where
  // kVectorCodes says so; a lane's codes start at a multiple of 4 m.
  constexpr int kCodePiece = (M * kW) % 16 == 0 && kVectorCodes ? 16 : (M * kW) % 8 == 0 && kCodesAt % 8 == 0 ? 8 : 4;
  cpAsync<kCodePiece>(stage + lane * 4 * kW, base + kCodesAt + span * kSpanBytes + lane * M * kW, M * kW);
  // int5, a whole span: the lane's 4 bytes of fifth bits (a short last span's, fewer and not
  // 4-byte aligned, are read in spanFifthBits)
  if (kBits == 5 && M == 4)
    cpAsync<4>(stage + kStageFifthAt + lane * 4, base + kCodesAt + span * kSpanBytes + 512 + lane * 4, 4);
  if (!kItemScales)
#pragma unroll
    for (int gi = 0; gi < kSpanRecords; ++gi) {
      if (lane < kScalePieces)
        stageScalePiece(base, span, gi, lane, stage + kStageScalesAt);
      if (kOffsetPieces > 0 && lane >= 16 && lane < 16 + kOffsetPieces)
        stageOffsetPiece(base, span, gi, lane - 16, stage + kStageScalesAt);
    }
}
// kItemScales: the scales of the warp's spans w, w + kWarps, ... (its i-th at i * kSpanScaleBytes
// of `dst`), the lanes taking their pieces in turn.
__device__ __forceinline__ void stageItemScales(const unsigned char *base, int warp, int lane, StageAddr dst) {
  constexpr int kPerSpan = kSpanRecords * kScalePieces;
  for (int p = lane; p < kSpansPerWarp * kPerSpan; p += 32) {
    const int i = p / kPerSpan, span = warp + i * kWarps;
    if (span < kSpans)
      stageScalePiece(base, span, p % kPerSpan / kScalePieces, p % kScalePieces, dst + i * kSpanScaleBytes);
  }
  constexpr int kPieces = kOffsetPieces > 0 ? kOffsetPieces : 1; // (no offsets: no loop below)
  constexpr int kOffsetsPerSpan = kSpanRecords * kPieces;
  for (int p = lane; p < (kOffsetPieces > 0 ? kSpansPerWarp * kOffsetsPerSpan : 0); p += 32) {
    const int i = p / kOffsetsPerSpan, span = warp + i * kWarps;
    if (span < kSpans)
      stageOffsetPiece(base, span, p % kOffsetsPerSpan / kPieces, p % kPieces, dst + i * kSpanScaleBytes);
  }
}
__device__ __forceinline__ void stageSpanAny(const unsigned char *base, int span, int lane, StageAddr stage) {
  if (kTailSubBlocks == 0 || span < kFullSpans)
    stageSpan<4>(base, span, lane, stage);
  else
    stageSpan<kTailSubBlocks>(base, span, lane, stage);
}

// Row n's scale (or min) in the staged record at p; with sub-scales the product of its header's
// and group code c's (exact).
__device__ __forceinline__ float stagedScale(const unsigned char *p, int n, int c = 0) {
  const float d = loadScale(p + n * kScaleBytes);
  return kSub > 0 ? d * subCode(p[8 * kScaleBytes + 8 * c + n]) : d;
}
// Row n's scale (min) of group gi (< kSpanGroups) of the span whose scales are staged at sc.
__device__ __forceinline__ float spanScale(const unsigned char *sc, int gi, int n) {
  return kHeaderPerSpan ? stagedScale(sc, n, gi) : stagedScale(sc + gi * kGroupScaleBytes, n);
}
__device__ __forceinline__ float spanMin(const unsigned char *sc, int gi, int n) {
  return kHeaderPerSpan ? stagedScale(sc + kOffsetsRel, n, gi) : stagedScale(sc + kOffsetsRel + gi * kGroupOffsetBytes, n);
}

// The integer u & kMask (kMask within bits 0..22) as a float, exactly: 2^23 + it has it in its
// mantissa. A code masked in place at bit 4 or 8 reads 16 or 256 times too large and meets a
// scale 16 or 256 times smaller: the product, hence every dequantized value, is the same number
// (for scales above 2^-118 in magnitude; f16's smallest is 2^-24).
template <unsigned kMask>
__device__ __forceinline__ float maskedCode(unsigned u) {
#ifdef LLMC_HOST_EMULATION
  const unsigned bits = (u & kMask) | 0x4B000000u;
#else
  // (u & mask) | 2^23's bits in one LOP3 (ptxas otherwise spends two, one per immediate)
  unsigned bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(u), "n"(kMask), "r"(0x4B000000u));
#endif
  return __uint_as_float(bits) - 8388608.0f;
}
struct alignas(8) Pair {
  float x, y;
};

// One sub-block of NT tokens: the lane's 8 weights (row n, elements k0 + 2 q + {0, 1, 8, 9} of
// its two 16-element halves) dequantized once, as d * code + lo, and multiplied with the
// activations, which come in 8-byte pairs (the fragment's elements 2 q + 8 c, + 1 for c = 0..3).
// acc sums in fragment order: int4 nibble p = 0..7 (elements at pair p & 3, x for p < 4 else y),
// int8 byte b of word s (pair 2 s + b / 2, x or y by b % 2).
// (k-step s's weights take (ds[s], los[s]); they differ only for groups of 16: int8 g16 / s16,
// int4 s16.) int5: as int4, each nibble's fifth bit in hi (bit p: nibble p's).
template <int NT>
__device__ __forceinline__ void gemvSubBlock(const unsigned *w, unsigned hi, const float ds[2], const float los[2],
                                             const float *x, const int xrow[NT], int k0, int q, float acc[NT]) {
  const float d = ds[0], lo = los[0];
  float v[8];
  if (kBits == 5) {
    // the codes as bytes (int5Codes), read as int8 codes are: nibbles 4 e, 4 e + 2 at bits 0 and 8
    // of ca >> 16 e, nibbles 4 e + 1, 4 e + 3 of cb's
    unsigned c[2];
    int5Codes(w[0], hi, c[0], c[1]);
    const float d256 = d * 0.00390625f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const unsigned u = c[h] >> (16 * e);
        v[4 * e + h] = fmaf(maskedCode<0xFFu>(u), d, lo);
        v[4 * e + 2 + h] = fmaf(maskedCode<0xFF00u>(u), d256, lo);
      }
  } else if (kBits == 4 && kOffset == 3) {
    // nl: nibbles 4 h .. 4 h + 3 looked up as the grid's signed bytes, then read as int8 sym
    // codes (c ^ 0x80 = code + 128, lo = -128 d), in nibble order.
    const float d256 = d * 0.00390625f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned g = nlGrid4(w[0] >> (16 * h)) ^ 0x80808080u;
#pragma unroll
      for (int e = 0; e < 2; ++e) { // bytes 2 e, 2 e + 1 at bits 0 and 8 of g >> 16 e
        const unsigned u = g >> (16 * e);
        v[4 * h + 2 * e] = fmaf(maskedCode<0xFFu>(u), d, lo);
        v[4 * h + 2 * e + 1] = fmaf(maskedCode<0xFF00u>(u), d256, lo);
      }
    }
  } else if (kBits == 4) {
    const float d16 = d * 0.0625f, d16b = kSubGroups == 2 ? ds[1] * 0.0625f : d16;
#pragma unroll
    for (int i = 0; i < 4; ++i) { // nibbles 2 i, 2 i + 1 at bits 0 and 4 of w >> 8 i: k-step i % 2's
      const unsigned u = w[0] >> (8 * i);
      const bool one = kSubGroups == 2 && (i & 1);
      v[2 * i] = fmaf(maskedCode<0xFu>(u), one ? ds[1] : d, one ? los[1] : lo);
      v[2 * i + 1] = fmaf(maskedCode<0xF0u>(u), one ? d16b : d16, one ? los[1] : lo);
    }
  } else {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const float dk = ds[s], lok = los[s], d256 = dk * 0.00390625f;
      // sym codes are signed bytes: c ^ 0x80 = code + 128, and lo = -128 d
      const unsigned word = kOffset == 0 ? w[s] ^ 0x80808080u : w[s];
#pragma unroll
      for (int h = 0; h < 2; ++h) { // bytes 2 h, 2 h + 1 at bits 0 and 8 of word >> 16 h
        const unsigned u = word >> (16 * h);
        v[4 * s + 2 * h] = fmaf(maskedCode<0xFFu>(u), dk, lok);
        v[4 * s + 2 * h + 1] = fmaf(maskedCode<0xFF00u>(u), d256, lok);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const Pair *xs = reinterpret_cast<const Pair *>(x + (long long)xrow[i] * kK + k0 + 2 * q);
    Pair xp[4];
#pragma unroll
    for (int c = 0; c < 4; ++c)
      xp[c] = xs[4 * c];
    float a = acc[i];
    if (kBits != 8) {
#pragma unroll
      for (int p = 0; p < 8; ++p)
        a = fmaf(v[p], p < 4 ? xp[p].x : xp[p - 4].y, a);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const Pair &pair = xp[2 * (e >> 2) + ((e >> 1) & 1)];
        a = fmaf(v[e], (e & 1) ? pair.y : pair.x, a);
      }
    }
    acc[i] = a;
  }
}

// The lane's code words of the M sub-blocks of the span staged at `stage`.
template <int M>
__device__ __forceinline__ void spanWords(const unsigned char *stage, int lane, unsigned words[kW]) {
  if ((M * kW) % 16 == 0) {
#pragma unroll
    for (int c = 0; c < M * kW / 16; ++c) {
      const Vec16 v = reinterpret_cast<const Vec16 *>(stage + lane * 4 * kW)[c];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        words[4 * c + e] = v.u[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < M * kW / 4; ++e)
      words[e] = reinterpret_cast<const unsigned *>(stage + lane * 4 * kW)[e];
  }
}

// The M sub-blocks of the span staged at `stage`, its scales at `sc`.
// int5: hi holds the lane's bytes of fifth bits, sub-block j's at bits 8 j.
template <int NT, int M>
__device__ __forceinline__ void gemvSpan(const unsigned char *stage, const unsigned char *sc, unsigned hi,
                                         const float *x, const int xrow[NT], int span, int lane, int n, int q,
                                         float acc[NT]) {
  unsigned words[kW];
  spanWords<M>(stage, lane, words);
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const int gi = kGroupPerSpan ? 0 : j * kSubGroups;
    const float d = spanScale(sc, gi, n);
    float lo;
    if (kOffset == 2)
      lo = spanMin(sc, gi, n);
    else if (kOffset == 1)
      lo = -d * (float)sc[kOffsetsRel + gi * kGroupOffsetBytes + n];
    else // sym int4: -8 d, int5: -16 d; sym int8 and nl (read as int8 codes + 128): -128 d
      lo = kOffset == 0 && kBits != 8 ? -(float)kSymCode * d : -128.0f * d;
    float ds[2] = {d, d}, los[2] = {lo, lo};
    if (kSubGroups == 2) { // g16 / s16 (int8, int4; sym or min): k-step 1 has the next group's scale
      ds[1] = spanScale(sc, gi + 1, n);
      los[1] = kOffset == 2 ? spanMin(sc, gi + 1, n) : -(kBits == 8 ? 128.0f : (float)kSymCode) * ds[1];
    }
    gemvSubBlock<NT>(words + j * (kW / 4), hi >> (8 * j), ds, los, x, xrow, span * 128 + j * 32, q, acc);
  }
}

// ---- CUDA cores, int8 activations (the fast contract) ----
// quantize_q8's row layout (KernelFamilies.h, q8RowBytes): per span 128 code bytes (lane quad q's
// 8 per sub-block at 32 q + 8 j), then a scale and a scaled sum per sub-block.
constexpr long long kQ8RowBytes = (long long)((kK + 127) / 128) * 160;
constexpr int kQ8ScalesAt = (kK + 127) / 128 * 128;
constexpr int kQ8SumsAt = kQ8ScalesAt + (kK + 127) / 128 * 16;
// Sym int8 codes, nl codes' grid values and int4 sym s16 codes (16 (q - 8): the activations' sums
// are per 32, the scales per 16) are signed bytes; other int4 nibbles and zero-point / min bytes
// unsigned, their offset (value = d * code + lo) applied once per sub-block as lo * s (s = d_x *
// sum of codes), or, min scales of 16 (kHalfMins), per k-step and lane as lo_s * d_x * (the sum of
// the lane's 4 activation codes, a dp4a of ones).
constexpr bool kSignedCodes = (kBits == 8 && kOffset == 0) || kOffset == 3 || (kBits == 4 && kSubGroups == 2 && kOffset == 0);
constexpr bool kHalfMins = kSubGroups == 2 && kOffset == 2;

// c + the 4 byte products of weight codes a and activation codes b (dp4a: one instruction).
__device__ __forceinline__ int dot4(unsigned a, unsigned b, int c) {
#ifdef LLMC_HOST_EMULATION
  return llmcEmuDp4a<kSignedCodes>(a, b, c);
#else
  int d;
  if (kSignedCodes)
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#endif
}
// An integer below 2^22 in magnitude as a float, exactly, without the int-to-float unit:
// 1.5 * 2^23 + i has i in its mantissa.
__device__ __forceinline__ float smallIntToFloat(int i) {
  return __int_as_float(0x4B400000 + i) - 12582912.0f;
}

// Scales of 16 with mins (int4 s16, int8 g16 / s16; min codes unsigned): sub-block j of the span
// whose lane words are `words` and scales `sc`, a token at a time, as the products of each k-step
// s (bytes 0, 2 of the codes' dp4a operands are k-step 0's, 1, 3 k-step 1's) with its scale d_s,
// and the lane's 4 activations of it, summed by a dp4a with ones, with its min m_s, the four
// terms summed before the token's scale d_x multiplies them (a rounding apart from the CPU's
// order, as every GPU sum is). One sub-block at a time, each token's 8 activation bytes and scale
// read as it goes: the 4 sub-blocks' codes, scales and mins held over the tokens took more than
// the kernel's 64 registers (ptxas spilled up to 952 bytes on sm_80).
// Sub-block j's codes in the lane's words as dp4a operands, unsigned as stored (int4 nibbles, int8
// bytes), in the activations' order: elements 2q, 2q+16, 2q+1, 2q+17 (int4: nibbles 0, 2, 4, 6 =
// the low nibbles; int8: word 0 holds 2q, 2q+1, 2q+8, 2q+9, word 1 the same + 16) in ca and 2q+8,
// 2q+24, 2q+9, 2q+25 in cb.
__device__ __forceinline__ void storedCodes(const unsigned *words, int j, unsigned &ca, unsigned &cb) {
  if (kBits == 4) {
    ca = words[j] & 0x0F0F0F0Fu;
    cb = (words[j] >> 4) & 0x0F0F0F0Fu;
  } else {
    ca = __byte_perm(words[2 * j], words[2 * j + 1], 0x5140);
    cb = __byte_perm(words[2 * j], words[2 * j + 1], 0x7362);
  }
}
struct alignas(8) Words2 {
  unsigned u[2];
};
template <int NT>
__device__ __forceinline__ void gemvSubBlockQ8HalfMins(const unsigned *words, const unsigned char *sc,
                                                       const unsigned char *xq, const int xrow[NT], int span,
                                                       int j, int n, int q, float acc[NT]) {
  unsigned ca, cb;
  storedCodes(words, j, ca, cb);
  const float d0 = spanScale(sc, 2 * j, n), d1 = spanScale(sc, 2 * j + 1, n);
  const float m0 = spanMin(sc, 2 * j, n), m1 = spanMin(sc, 2 * j + 1, n);
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const unsigned char *row = xq + (long long)xrow[i] * kQ8RowBytes;
    const Words2 xw = *reinterpret_cast<const Words2 *>(row + span * 128 + 32 * q + 8 * j); // (one 8-byte load)
    const unsigned x0 = xw.u[0], x1 = xw.u[1];
    const float dx = *reinterpret_cast<const float *>(row + kQ8ScalesAt + span * 16 + 4 * j);
    int p0 = dot4(ca & 0x00FF00FFu, x0, 0);
    p0 = dot4(cb & 0x00FF00FFu, x1, p0);
    int p1 = dot4(ca & 0xFF00FF00u, x0, 0);
    p1 = dot4(cb & 0xFF00FF00u, x1, p1);
    int s0 = dot4(0x00010001u, x0, 0);
    s0 = dot4(0x00010001u, x1, s0);
    int s1 = dot4(0x01000100u, x0, 0);
    s1 = dot4(0x01000100u, x1, s1);
    // d_x (d0 p0 + d1 p1 + m0 s0 + m1 s1): one multiply by d_x, not four
    float t = d0 * smallIntToFloat(p0);
    t = fmaf(d1, smallIntToFloat(p1), t);
    t = fmaf(m0, smallIntToFloat(s0), t);
    t = fmaf(m1, smallIntToFloat(s1), t);
    acc[i] = fmaf(dx, t, acc[i]);
  }
}

// The M sub-blocks of the span staged at `stage` times the int8 activation rows xrow[] of xq.
// Per sub-block and token: two dp4a (the lane's 8 products, at most 8 * 255 * 127 in
// magnitude), then acc += (d_w * d_x) * p as the CPU's fast contract sums (its fmaf over the
// sub-blocks, here split over lanes and warps). The offsets: lane q adds lo * s of sub-block q.
template <int NT, int M>
__device__ __forceinline__ void gemvSpanQ8(const unsigned char *stage, const unsigned char *sc, unsigned hi,
                                           const unsigned char *xq, const int xrow[NT], int span, int lane,
                                           int n, int q, float acc[NT]) {
  unsigned words[kW];
  spanWords<M>(stage, lane, words);
  // The codes as dp4a operands in the activations' order (storedCodes).
  if (kHalfMins) { // (int8 g16 / s16, int4 s16 with mins: gemvSubBlockQ8HalfMins)
#pragma unroll
    for (int j = 0; j < M; ++j)
      gemvSubBlockQ8HalfMins<NT>(words, sc, xq, xrow, span, j, n, q, acc);
    return;
  }
  unsigned ca[4], cb[4];
  float d[4], d1[4]; // d1: k-step 1's scale (groups of 16)
#pragma unroll
  for (int j = 0; j < M; ++j) {
    if (kBits == 4 && kOffset == 3) { // nl: the grid values of nibbles 0, 2, 4, 6 and 1, 3, 5, 7
      const unsigned g0 = nlGrid4(words[j]), g1 = nlGrid4(words[j] >> 16);
      ca[j] = __byte_perm(g0, g1, 0x6420u);
      cb[j] = __byte_perm(g0, g1, 0x7531u);
    } else if (kBits == 4 && kSubGroups == 2 && kOffset == 0) {
      // s16 (sym): q ^ 8 is q - 8 in 4-bit two's complement; in the high nibble of a byte it reads
      // as the signed byte 16 (q - 8), whose scale is d / 16 below (exact: a power of two)
      const unsigned t = words[j] ^ 0x88888888u;
      ca[j] = (t << 4) & 0xF0F0F0F0u;
      cb[j] = t & 0xF0F0F0F0u;
    } else if (kBits == 5) { // as int4 with their fifth bits
      int5Codes(words[j], hi >> (8 * j), ca[j], cb[j]);
    } else {
      storedCodes(words, j, ca[j], cb[j]);
    }
    d[j] = spanScale(sc, kGroupPerSpan ? 0 : j * kSubGroups, n);
    d1[j] = kSubGroups == 2 ? spanScale(sc, j * 2 + 1, n) : d[j];
    if (kBits == 4 && kSubGroups == 2 && kOffset == 0) { // (int4 s16 sym: the codes read 16 times their value)
      d[j] *= 0.0625f;
      d1[j] *= 0.0625f;
    }
  }
  float lo = 0.0f; // sub-block q's offset
  const bool offset = !kSignedCodes && q < M;
  if (offset) {
    const int gi = kGroupPerSpan ? 0 : q;
    const float dq = kGroupPerSpan ? d[0] : spanScale(sc, gi, n);
    if (kOffset == 2)
      lo = spanMin(sc, gi, n);
    else if (kOffset == 1)
      lo = -dq * (float)sc[kOffsetsRel + gi * kGroupOffsetBytes + n];
    else // sym int4, int5
      lo = -(float)kSymCode * dq;
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    const unsigned char *row = xq + (long long)xrow[i] * kQ8RowBytes;
    const Vec16 *codes = reinterpret_cast<const Vec16 *>(row + span * 128 + 32 * q);
    const Vec16 x0 = codes[0], x1 = M > 2 ? codes[1] : x0;
    const Vec16 sc = *reinterpret_cast<const Vec16 *>(row + kQ8ScalesAt + span * 16);
    float a = acc[i];
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const Vec16 &xv = j < 2 ? x0 : x1;
      if (kSubGroups == 2) { // g16 / s16 (sym): bytes 0, 2 of ca / cb are k-step 0's, 1, 3 k-step 1's
        int p0 = dot4(ca[j] & 0x00FF00FFu, xv.u[2 * (j & 1)], 0);
        p0 = dot4(cb[j] & 0x00FF00FFu, xv.u[2 * (j & 1) + 1], p0);
        int p1 = dot4(ca[j] & 0xFF00FF00u, xv.u[2 * (j & 1)], 0);
        p1 = dot4(cb[j] & 0xFF00FF00u, xv.u[2 * (j & 1) + 1], p1);
        a = fmaf(d[j] * __uint_as_float(sc.u[j]), smallIntToFloat(p0), a);
        a = fmaf(d1[j] * __uint_as_float(sc.u[j]), smallIntToFloat(p1), a);
        continue;
      }
      int p = dot4(ca[j], xv.u[2 * (j & 1)], 0);
      p = dot4(cb[j], xv.u[2 * (j & 1) + 1], p);
      a = fmaf(d[j] * __uint_as_float(sc.u[j]), smallIntToFloat(p), a);
    }
    if (offset)
      a = fmaf(lo, *reinterpret_cast<const float *>(row + kQ8SumsAt + span * 16 + 4 * q), a);
    acc[i] = a;
  }
}

// One item: weight rows tile * 8 .. + 7 times tokens t0 .. t0 + NT - 1, shared by the block's
// kWarps warps, which split K: warp w takes spans w, w + kWarps, ... (a decode step's few tiles
// keep every multiprocessor busy), each staged kStages - 1 spans ahead of its use. Lane L owns
// row n = L / 4 and its sub-block elements; the 4 lanes of a row finish the warp's sums with two
// xor shuffles, then the warps' partial sums are added in warp order through shared memory
// (`part`), so the order depends on the sizes only.
static_assert(kTokens == 4, "the dispatch below handles 1 to 4 tokens per item");
template <int NT>
__device__ __forceinline__ void gemvItem(const float *__restrict__ x, const int *__restrict__ rows,
                                         const unsigned char *base, const float *__restrict__ bias,
                                         float *__restrict__ y, int t0, int tile, int lane, int n, int q,
                                         int warp, float (*part)[8][kTokens], Stage *stages,
                                         ItemScales *scales) {
  int xrow[NT]; // x rows (indices, not pointers: half the registers)
  float acc[NT];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    xrow[i] = kGather && !kInt8Activations ? rows[t0 + i] : t0 + i;
    acc[i] = 0.0f;
  }
  // One commit per span slot, empty past the warp's last span, so that "all but kStages - 1
  // groups done" always means "the oldest span is in".
  const StageAddr stage0 = stageAddress(stages[0].b); // slot s at stage0 + s * sizeof(Stage)
  auto slotAddress = [&](int s) { return stage0 + s * (int)sizeof(Stage); };
  if (kItemScales) {
    stageItemScales(base, warp, lane, stageAddress(scales->b));
    cpAsyncCommit(); // a group of their own, waited for once the spans' copies are asked for
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (warp + s * kWarps < kSpans)
      stageSpanAny(base, warp + s * kWarps, lane, slotAddress(s));
    cpAsyncCommit();
  }
  if (kItemScales) {
    cpAsyncWait<kStages - 1>(); // the scales' group, the oldest
    __syncwarp();               // the other lanes' pieces of it are in too
  }
  // The warp's i-th span, staged in slot s = i % kStages. With the item's scales staged once, a
  // lane reads only the codes it copied itself (visible to it after its wait): no __syncwarp per
  // span; else the span's scales come from other lanes' copies.
  auto spanStep = [&](int i, int s) {
    const int span = warp + i * kWarps;
    const int ahead = span + (kStages - 1) * kWarps;
    if (ahead < kSpans) // into the slot read one span ago
      stageSpanAny(base, ahead, lane, slotAddress((s + kStages - 1) % kStages));
    cpAsyncCommit();
    cpAsyncWait<kStages - 1>();
    if (!kItemScales)
      __syncwarp(); // the other lanes' copies (scales) are in
    const unsigned char *xq = reinterpret_cast<const unsigned char *>(x);
    const unsigned char *sc = kItemScales ? scales->b + i * kSpanScaleBytes : stages[s].b + kStageScalesAt;
    const bool full = kTailSubBlocks == 0 || span < kFullSpans;
    const unsigned hi = kBits != 5 ? 0u : full ? *reinterpret_cast<const unsigned *>(stages[s].b + kStageFifthAt + lane * 4)
                                               : spanFifthBits(base, span, lane);
    if (kInt8Activations && full)
      gemvSpanQ8<NT, 4>(stages[s].b, sc, hi, xq, xrow, span, lane, n, q, acc);
    else if (kInt8Activations)
      gemvSpanQ8<NT, kTailSubBlocks>(stages[s].b, sc, hi, xq, xrow, span, lane, n, q, acc);
    else if (full)
      gemvSpan<NT, 4>(stages[s].b, sc, hi, x, xrow, span, lane, n, q, acc);
    else
      gemvSpan<NT, kTailSubBlocks>(stages[s].b, sc, hi, x, xrow, span, lane, n, q, acc);
    if (!kItemScales)
      __syncwarp(); // every lane is done with the slot before it is refilled
  };
  // kStages spans per iteration, so that every slot is a constant: its addresses are offsets from
  // one register and no slot counter is kept (the SASS of a span-per-iteration loop spent about a
  // fifth of its instructions on loop control and slot addresses).
  const int spans = kSpans % kWarps == 0 ? kSpans / kWarps : (kSpans - warp + kWarps - 1) / kWarps; // the warp's
  int i = 0;
  for (; i + kStages <= spans; i += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s)
      spanStep(i + s, s);
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (i + s < spans)
      spanStep(i + s, s);
  cpAsyncWait<0>();
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    float s = acc[i];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (q == 0)
      part[warp][n][i] = s;
  }
  if (kSiluInter > 0)
    return; // (one warp per tile: gemvSiluItems combines the block's tiles)
  __syncthreads();
  if (threadIdx.x < 8 * NT) {
    const int r = threadIdx.x / NT, i = threadIdx.x % NT, row = tile * 8 + r;
    float s = part[0][r][i];
#pragma unroll
    for (int v = 1; v < kWarps; ++v)
      s += part[v][r][i];
    if (row < kN)
      y[(long long)(t0 + i) * kN + row] = kHasBias ? s + bias[row] : s;
  }
  __syncthreads(); // `part` is reused by the block's next item
}
${SILU_FN}} // namespace
${NORM_FN}
extern "C" __global__ void __launch_bounds__(${LAUNCH_BOUNDS})
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y${SILU_PARAM}${NORM_PARAM}, int T) {
${SILU_ENTRY}  // Block b's first item is tile b (of the first token chunk): its scales, then its spans in order.
  if (kPrefetchBlocks > 0 && threadIdx.x == 0 && blockIdx.x < kPrefetchBlocks)
    prefetchWeightL2(w, blockIdx.x * kTileBytes, blockIdx.x * kTileBytes + kPrefetchBytes);
  llmcGridDependencyWait();
  const int lane = threadIdx.x & 31, warp = kWarps == 1 ? 0 : threadIdx.x >> 5;
  const int n = lane >> 2, q = lane & 3;
  if (kTensorCores) {
    // Tensor cores: an item is one tile of 8 rows x kMmaTokens tokens. The lane's 8 weights of
    // a sub-block are its B fragments of 4 k-steps (pairs (v[2 kk], v[2 kk + 1]) as b0, b1):
    // k-step kk's logical k = q, q + 4 are the lane's elements at[2 kk], at[2 kk + 1], the same
    // for every lane of that q, so the A fragments read the activations at those elements.
    const long long items = ((long long)T + kMmaTokens - 1) / kMmaTokens * kTiles;
    for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
         item += (long long)gridDim.x * kWarps) {
      const int tile = (int)(item % kTiles);
      const int t0 = (int)(item / kTiles) * kMmaTokens;
      const unsigned char *base = w + tile * kTileBytes;
      int xr[kMTiles][2];
      mmaRows(rows, T, t0, n, xr);
      float acc[kMTiles][4] = {};
      for (int span = 0; span < kSpans; ++span) {
        const int m = spanSubBlocks(span);
        // (codes read per sub-block straight from memory: the tiles hold enough registers)
        const unsigned char *mine = base + kCodesAt + span * kSpanBytes + lane * m * kW;
        const unsigned hi = kBits == 5 ? spanFifthBits(base, span, lane) : 0u;
        for (int j = 0; j < m; ++j) {
          float v[8];
          int at[8];
          dequantSubBlock(base, reinterpret_cast<const unsigned *>(mine + j * kW), hi >> (8 * j), span, j, n, q, v, at);
          const int k0 = span * 128 + j * 32;
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const unsigned b[2] = {toTf32(v[2 * kk]), toTf32(v[2 * kk + 1])};
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              const int k1 = k0 + at[2 * kk], k2 = k0 + at[2 * kk + 1];
              const unsigned a[4] = {xTf32(x, xr[mt][0], k1), xTf32(x, xr[mt][1], k1),
                                     xTf32(x, xr[mt][0], k2), xTf32(x, xr[mt][1], k2)};
              mmaTf32(acc[mt], a, b);
            }
          }
        }
      }
      mmaStore(acc, bias, y, T, t0, tile * 8, n, q);
    }
    return;
  }
  // CUDA cores: a block per item (tile, token chunk), its warps splitting K.
  __shared__ float part[kWarps][8][kTokens];
  __shared__ Stage stages[kWarps][kStages];
  __shared__ ItemScales scales[kWarps];
  const long long chunks = ((long long)T + kTokens - 1) / kTokens;
  const long long items = chunks * kTiles;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    // Neighbouring blocks take neighbouring tiles of the same tokens.
    const int tile = (int)(item % kTiles);
    const int t0 = (int)(item / kTiles) * kTokens;
    const unsigned char *base = w + tile * kTileBytes;
    // Only the chunk's real rows are computed (a batch of 1 does a quarter of the work).
    const int nt = T - t0 < kTokens ? T - t0 : kTokens;
    if (nt >= 4)
      gemvItem<4>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part, stages[warp], &scales[warp]);
    else if (nt == 3)
      gemvItem<3>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part, stages[warp], &scales[warp]);
    else if (nt == 2)
      gemvItem<2>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part, stages[warp], &scales[warp]);
    else
      gemvItem<1>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part, stages[warp], &scales[warp]);
  }
${NORM_EPILOGUE}}
)cuda";

// The SiLU·mul epilogue of the quantized CUDA-core GEMV (LinearParams::siluInter): gemvSiluItems
// and the entry's call of it.
constexpr const char *kSiluFn = R"cuda(
// h = silu(gate) * up where y's columns are gate [0, kSiluInter) and up [kSiluInter, 2 kSiluInter):
// an item is the 32 columns of h of group g (one int8 sub-block) times a token chunk, a block of 8
// warps; warp v sums tile siluTile(g, v) (gate tiles 4 g .. 4 g + 3, then the up tiles of the same
// columns) over the whole K, as gemvItem does for a block of one warp, so each y value is the one
// a one-warp GEMV computes. Warp i < NT then writes token t0 + i's 32 values of h (the silu_mul
// kernel's expression, so the same bits from the same y) and, when q8 is not null, their int8
// rows (storeQ8Value: quantize_q8's bits). y itself is not written.
static_assert(kSiluInter % 32 == 0 && kN == 2 * kSiluInter && kWarps == 1, "SiLU-mul epilogue: 32-column groups");
constexpr int kSiluGroups = kSiluInter / 32;
__device__ __forceinline__ int siluTile(int g, int v) { return v < 4 ? 4 * g + v : kSiluInter / 8 + 4 * g + v - 4; }
__device__ __forceinline__ float siluMul(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ __forceinline__ void gemvSiluItems(const float *__restrict__ x, const int *__restrict__ rows,
                                              const unsigned char *__restrict__ w, const float *__restrict__ bias,
                                              float *__restrict__ h, unsigned char *__restrict__ q8, int T) {
  __shared__ float part[8][8][kTokens];
  __shared__ Stage stages[8][kStages];
  __shared__ ItemScales scales[8];
  const int lane = threadIdx.x & 31, v = threadIdx.x >> 5;
  const int n = lane >> 2, q = lane & 3;
  const long long items = ((long long)T + kTokens - 1) / kTokens * kSiluGroups;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const int g = (int)(item % kSiluGroups), t0 = (int)(item / kSiluGroups) * kTokens;
    const int tile = siluTile(g, v);
    const unsigned char *base = w + tile * kTileBytes;
    const int nt = T - t0 < kTokens ? T - t0 : kTokens;
    if (nt >= 4)
      gemvItem<4>(x, rows, base, bias, nullptr, t0, tile, lane, n, q, 0, &part[v], stages[v], &scales[v]);
    else if (nt == 3)
      gemvItem<3>(x, rows, base, bias, nullptr, t0, tile, lane, n, q, 0, &part[v], stages[v], &scales[v]);
    else if (nt == 2)
      gemvItem<2>(x, rows, base, bias, nullptr, t0, tile, lane, n, q, 0, &part[v], stages[v], &scales[v]);
    else
      gemvItem<1>(x, rows, base, bias, nullptr, t0, tile, lane, n, q, 0, &part[v], stages[v], &scales[v]);
    __syncthreads();
    if (v < nt) { // column 32 g + lane: row lane % 8 of gate tile 4 g + lane / 8 and of its up tile
      const int c = 32 * g + lane;
      float gate = part[lane >> 3][lane & 7][v], up = part[4 + (lane >> 3)][lane & 7][v];
      if (kHasBias) {
        gate += bias[c];
        up += bias[kSiluInter + c];
      }
      const float hv = siluMul(gate, up);
      h[(long long)(t0 + v) * kSiluInter + c] = hv;
      storeQ8Value<kSiluInter>(q8, t0 + v, c, hv); // (none when q8 is null)
    }
    __syncthreads(); // `part` is reused by the block's next item
  }
}
)cuda";
constexpr const char *kSiluEntry = R"cuda(  if (kSiluInter > 0) {
    // Block b's first item is group b: warp v asks for its tile's first bytes.
    if (kPrefetchBlocks > 0 && (threadIdx.x & 31) == 0 && blockIdx.x < kSiluGroups)
      prefetchWeightL2(w, siluTile(blockIdx.x, threadIdx.x >> 5) * kTileBytes,
                       siluTile(blockIdx.x, threadIdx.x >> 5) * kTileBytes + kPrefetchBytes);
    llmcGridDependencyWait();
    gemvSiluItems(x, rows, w, bias, y, q8, T);
    return;
  }
)cuda";

// The dense GEMV's SiLU·mul epilogue (LinearParams::siluInter): a warp item is column j of h
// (rows j and kSiluInter + j of the weight) times a token chunk.
constexpr const char *kDenseSiluFn = R"cuda(
// h = silu(gate) * up where y's columns are gate [0, kSiluInter) and up [kSiluInter, 2 kSiluInter):
// a warp sums row j and row kSiluInter + j as gemvRow does (so the same y values) and its lane 0
// writes h[:, j] (the silu_mul kernel's expression: the same bits from the same y). y itself is
// not written, nor int8 rows (q8 must be null: a warp holds one column of a 32-value block).
static_assert(kN == 2 * kSiluInter, "SiLU-mul epilogue: [gate | up]");
__device__ __forceinline__ float siluMul(float g, float u) { return g / (1.0f + expf(-g)) * u; }
template <int NT>
__device__ __forceinline__ void gemvSiluColumn(const float *__restrict__ x, const int *__restrict__ rows,
                                               const unsigned char *__restrict__ w, const float *__restrict__ bias,
                                               float *__restrict__ h, int t0, int j, int lane) {
  float g[NT], u[NT];
  gemvRowSums<NT>(x, rows, w, bias, t0, j, lane, g);
  gemvRowSums<NT>(x, rows, w, bias, t0, kSiluInter + j, lane, u);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < NT; ++i)
      h[(long long)(t0 + i) * kSiluInter + j] = siluMul(g[i], u[i]);
}
)cuda";
constexpr const char *kDenseSiluEntry = R"cuda(  if (kSiluInter > 0) {
    // Block b's first items are columns kWarps b .. kWarps b + kWarps - 1: those gate and up rows.
    if (kPrefetchBlocks > 0 && threadIdx.x == 0 && blockIdx.x < kPrefetchBlocks) {
      prefetchWeightL2(w, blockIdx.x * kPrefetchBytes, (blockIdx.x + 1) * kPrefetchBytes);
      prefetchWeightL2(w, kSiluInter / kWarps * kPrefetchBytes + blockIdx.x * kPrefetchBytes,
                       kSiluInter / kWarps * kPrefetchBytes + (blockIdx.x + 1) * kPrefetchBytes);
    }
    llmcGridDependencyWait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long items = ((long long)T + kTokens - 1) / kTokens * kSiluInter;
    for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
         item += (long long)gridDim.x * kWarps) {
      const int j = (int)(item % kSiluInter);
      const int t0 = (int)(item / kSiluInter) * kTokens;
      const int nt = T - t0 < kTokens ? T - t0 : kTokens;
      if (nt >= 4)
        gemvSiluColumn<4>(x, rows, w, bias, y, t0, j, lane);
      else if (nt == 3)
        gemvSiluColumn<3>(x, rows, w, bias, y, t0, j, lane);
      else if (nt == 2)
        gemvSiluColumn<2>(x, rows, w, bias, y, t0, j, lane);
      else
        gemvSiluColumn<1>(x, rows, w, bias, y, t0, j, lane);
    }
    return;
  }
)cuda";

constexpr const char *kDenseTemplate = R"cuda(namespace {
// CUDA cores, one item: weight row `row` times tokens t0 .. t0 + NT - 1; lanes stride over K and
// a five-step xor shuffle tree finishes each sum (every lane takes part).
static_assert(kTokens == 4, "the dispatch below handles 1 to 4 tokens per item");
// The sums of row `row` (bias added) for tokens t0 .. t0 + NT - 1 into s[], in every lane.
template <int NT>
__device__ __forceinline__ void gemvRowSums(const float *__restrict__ x, const int *__restrict__ rows,
                                            const unsigned char *__restrict__ w, const float *__restrict__ bias,
                                            int t0, int row, int lane, float s[NT]) {
  const float *xr[NT];
  float acc[NT];
  gemvStart<NT>(x, rows, t0, xr, acc);
  const long long wrow = (long long)row * kK;
  if (kWeightType != 2 && kK % kWeightVec == 0) {
    // 16-byte loads: lane L takes elements 8 L .. 8 L + 7 of every 256, the activations alike
    // (kK a multiple of 8 keeps the rows 16-byte aligned). f32 weights, a reference storage
    // rather than a fast one, keep one element per lane and load (ptxas spills the vector form
    // under any register budget for some shapes).
    for (int k = lane * kWeightVec; k < kK; k += 32 * kWeightVec) {
      float wv[kWeightVec];
      weightVec(w, wrow + k, wv);
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        float xv[kWeightVec];
#pragma unroll
        for (int c = 0; c < kWeightVec; c += 4)
          loadFloat4(xr[i] + k + c, xv + c);
#pragma unroll
        for (int e = 0; e < kWeightVec; ++e)
          acc[i] += wv[e] * xv[e];
      }
    }
  } else {
    for (int k = lane; k < kK; k += 32) {
      const float wv = weightAt(w, wrow + k);
#pragma unroll
      for (int i = 0; i < NT; ++i)
        acc[i] += wv * xr[i][k];
    }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    float a = acc[i];
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
      a += __shfl_xor_sync(0xffffffffu, a, m);
    s[i] = kHasBias ? a + bias[row] : a;
  }
}
template <int NT>
__device__ __forceinline__ void gemvRow(const float *__restrict__ x, const int *__restrict__ rows,
                                        const unsigned char *__restrict__ w, const float *__restrict__ bias,
                                        float *__restrict__ y, int t0, int row, int lane) {
  float s[NT];
  gemvRowSums<NT>(x, rows, w, bias, t0, row, lane, s);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < NT; ++i)
      y[(long long)(t0 + i) * kN + row] = s[i];
}
${SILU_FN}} // namespace
${NORM_FN}
extern "C" __global__ void __launch_bounds__(${LAUNCH_BOUNDS})
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y${SILU_PARAM}${NORM_PARAM}, int T) {
${SILU_ENTRY}  // Block b's first items are rows kWarps b .. kWarps b + kWarps - 1 (of the first token chunk).
  if (kPrefetchBlocks > 0 && threadIdx.x == 0 && blockIdx.x < kPrefetchBlocks)
    prefetchWeightL2(w, blockIdx.x * kPrefetchBytes, (blockIdx.x + 1) * kPrefetchBytes);
  llmcGridDependencyWait();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (kTensorCores) {
    // Tensor cores: an item is 8 weight rows x kMmaTokens tokens; k-step kb covers elements
    // kb .. kb + 7 (lane q: kb + q and kb + q + 4), zero past K and past N.
    const int g = lane >> 2, q = lane & 3;
    const long long tiles = (kN + 7) / 8;
    const long long items = ((long long)T + kMmaTokens - 1) / kMmaTokens * tiles;
    for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
         item += (long long)gridDim.x * kWarps) {
      const int row0 = (int)(item % tiles) * 8;
      const int t0 = (int)(item / tiles) * kMmaTokens;
      int xr[kMTiles][2];
      mmaRows(rows, T, t0, g, xr);
      const bool rowOk = row0 + g < kN;
      const long long wrow = (long long)(rowOk ? row0 + g : 0) * kK;
      float acc[kMTiles][4] = {};
      for (int kb = 0; kb < kK; kb += 8) {
        const int k1 = kb + q, k2 = kb + q + 4;
        const unsigned b[2] = {toTf32(rowOk && k1 < kK ? weightAt(w, wrow + k1) : 0.0f),
                               toTf32(rowOk && k2 < kK ? weightAt(w, wrow + k2) : 0.0f)};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const unsigned a[4] = {k1 < kK ? xTf32(x, xr[mt][0], k1) : 0u, k1 < kK ? xTf32(x, xr[mt][1], k1) : 0u,
                                 k2 < kK ? xTf32(x, xr[mt][0], k2) : 0u, k2 < kK ? xTf32(x, xr[mt][1], k2) : 0u};
          mmaTf32(acc[mt], a, b);
        }
      }
      mmaStore(acc, bias, y, T, t0, row0, g, q);
    }
    return;
  }
  const long long chunks = ((long long)T + kTokens - 1) / kTokens;
  const long long items = chunks * kN;
  for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
       item += (long long)gridDim.x * kWarps) {
    const int row = (int)(item % kN);
    const int t0 = (int)(item / kN) * kTokens;
    const int nt = T - t0 < kTokens ? T - t0 : kTokens; // only the chunk's real rows
    if (nt >= 4)
      gemvRow<4>(x, rows, w, bias, y, t0, row, lane);
    else if (nt == 3)
      gemvRow<3>(x, rows, w, bias, y, t0, row, lane);
    else if (nt == 2)
      gemvRow<2>(x, rows, w, bias, y, t0, row, lane);
    else
      gemvRow<1>(x, rows, w, bias, y, t0, row, lane);
  }
${NORM_EPILOGUE}}
)cuda";

constexpr int kWarpsPerBlock = 4;
constexpr int kTokensPerItem = 4;
constexpr int64_t kSplitKTargetWarps = 4096;

} // namespace

int quantizedGemvWarps(int64_t n, int64_t k) {
  return static_cast<int>(std::clamp<int64_t>(kSplitKTargetWarps / ((n + 7) / 8), 1, std::min<int64_t>(8, (k + 127) / 128)));
}

llmrt::StatusOr<KernelSpec> emitLinearKernel(const LinearParams &p) {
  const char *what = p.gatherRows ? "logits" : "linear";
  if (p.n <= 0 || p.n > detail::kMaxVocab || p.k <= 0 || p.k > detail::kMaxDim)
    return llmrt::invalid_argument(std::string(what) + ": shape [" + std::to_string(p.n) + ", " +
                                   std::to_string(p.k) + "] outside [1, 2^31) x [1, 2^24]");
  auto storage = detail::weightSource(p.weight, p.k);
  if (!storage.ok())
    return llmrt::invalid_argument(std::string(what) + ": " + storage.status().message());
  // The quantized CUDA-core GEMV gives each item (8 weight rows x 4 tokens) a block whose warps
  // split K (kWarps of them, at most one per 128-element span): as many warps as a decode step's
  // one token chunk can have resident at once (~4096: 32 per multiprocessor at the kernel's 64
  // registers, 132 of them on an H100/H200), at most 8. Rounded down: rounded up, Llama-3-8B's
  // q|k|v (768 tiles x 6 warps) left 108 blocks for a second wave.
  if (p.int8Activations && (storage->dense || p.tensorCores))
    return llmrt::invalid_argument(std::string(what) + ": int8 activations need quantized weights and the "
                                   "CUDA-core GEMV (weight '" + p.weight + "'" +
                                   (p.tensorCores ? ", tensor cores" : "") + ")");
  const bool silu = p.siluInter > 0;
  if (silu && (p.tensorCores || p.gatherRows || p.siluInter % 32 != 0 || p.n != 2 * p.siluInter))
    return llmrt::invalid_argument(std::string(what) + ": the SiLU-mul epilogue needs the CUDA-core GEMV "
                                   "of a linear [gate | up] with n = 2 x " + std::to_string(p.siluInter) +
                                   ", a multiple of 64 (n " + std::to_string(p.n) + ", weight '" + p.weight + "')");
  const bool norm = p.addRmsNorm.has_value();
  if (norm && (p.tensorCores || p.gatherRows || silu || p.addRmsNorm->dim != p.n))
    return llmrt::invalid_argument(std::string(what) + ": the add_rms_norm epilogue needs the CUDA-core GEMV of "
                                   "a linear without the SiLU-mul one, over the norm's width (n " + std::to_string(p.n) +
                                   ", norm width " + std::to_string(p.addRmsNorm->dim) + ")");
  const int64_t tiles = (p.n + 7) / 8;
  const bool splitK = !storage->dense && !p.tensorCores;
  // (The SiLU-mul epilogue: quantized, one warp per tile over the whole K, 8 tiles per block;
  // dense, a warp per column of h: its gate and up rows.)
  const int warps = silu && splitK ? 1 : splitK ? quantizedGemvWarps(p.n, p.k) : kWarpsPerBlock;
  // The L2 prefetch before the wait (CUDA cores only; the tensor-core kernels serve steps of many
  // rows, whose kernel before is no short one): quantized, block b its tile b's first bytes, an
  // equal share of l2PrefetchBytes (the GEMV is one wave: every block is resident early);
  // dense, the first blocks their kWarpsPerBlock whole rows, up to l2PrefetchBytes in all (the
  // first wave's; later blocks start once the kernel before has ended).
  const int64_t weightBytes = storage->dense ? p.n * p.k * (storage->denseType == 2 ? 4 : 2) : tiles * storage->tileBytes;
  int64_t prefetchBlocks = 0, prefetchBytes = 0;
  if (!p.tensorCores && p.l2PrefetchBytes > 0) {
    if (storage->dense) {
      prefetchBytes = kWarpsPerBlock * p.k * (storage->denseType == 2 ? 4 : 2);
      prefetchBlocks = silu ? std::min((p.siluInter + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                       p.l2PrefetchBytes / (2 * prefetchBytes)) // (gate and up rows)
                            : std::min((p.n + kWarpsPerBlock - 1) / kWarpsPerBlock, p.l2PrefetchBytes / prefetchBytes);
    } else {
      prefetchBytes = std::min(storage->tileBytes, p.l2PrefetchBytes / tiles / 16 * 16);
      prefetchBlocks = prefetchBytes >= 128 ? tiles : 0;
    }
    if (prefetchBlocks == 0)
      prefetchBytes = 0;
  }
  std::vector<std::pair<std::string, std::string>> common = {
      {"PREFETCH_BLOCKS", std::to_string(prefetchBlocks)},
      {"PREFETCH_BYTES", std::to_string(prefetchBytes)},
      {"WEIGHT_SIZE", std::to_string(weightBytes)},
      {"N", std::to_string(p.n)},
      {"K", std::to_string(p.k)},
      {"TOKENS", std::to_string(kTokensPerItem)},
      {"WARPS", std::to_string(warps)},
      {"BIAS", p.bias ? "true" : "false"},
      {"GATHER", p.gatherRows ? "true" : "false"},
      {"TENSOR_CORES", p.tensorCores ? "true" : "false"},
      {"INT8_ACTIVATIONS", p.int8Activations ? "true" : "false"},
      {"SILU_INTER", std::to_string(p.siluInter)}};
  std::string body = "// llmc kernel: " + std::string(what) + ", n=" + std::to_string(p.n) +
                     " k=" + std::to_string(p.k) + " weight=" + p.weight +
                     (p.bias ? " bias" : "") +
                     "\n// Params: (const float *x, const unsigned char *w, const float *bias, "
                     "const int *rows, float *y" + (silu ? ", unsigned char *q8" : "") +
                     (norm ? ", const float *other, const float *norm_w, float *normed, float *sum, "
                             "unsigned char *q8, unsigned char *work" : "") + ", int T)\n" +
                     (norm ? "// then the add_rms_norm of (y, other) by the last block: normed, sum, q8 (int8 rows "
                             "of normed or null); work: the workspace\n" : "") +
                     (silu ? "// y: h [T, " + std::to_string(p.siluInter) + "] = silu(gate) * up; q8: its int8 rows or null\n"
                           : "") +
                     (p.int8Activations ? "// x: int8 activation rows written by quantize_q8 (rows already gathered)\n"
                                        : "") +
                     "// Launch: blockDim.x = " +
                     std::to_string(32 * warps) + (splitK ? ", gridDim.x: grid-stride over blocks.\n"
                                                           : ", gridDim.x: grid-stride over warps.\n") +
                     detail::substitute(kCommon, common);
  std::string prefix = std::string("llm_") + what + "_n" + std::to_string(p.n) + "_k" + std::to_string(p.k);
  body += storage->constants;
  body += detail::kTf32Mma;
  body += kTensorCoreOps;
  // The add_rms_norm epilogue: its source for this kernel's blocks, its parameters and its call,
  // last in the entry (every thread of every block reaches it: the CUDA-core paths return nowhere
  // earlier).
  std::vector<std::pair<std::string, std::string>> normParts = {{"NORM_FN", ""}, {"NORM_PARAM", ""}, {"NORM_EPILOGUE", ""}};
  if (norm) {
    const int threads = 32 * warps;
    ASSIGN_OR_RETURN(std::string fn, detail::addRmsNormEpilogueSource(*p.addRmsNorm, threads));
    if (p.addRmsNorm->quantizedOutput)
      fn = std::string("namespace {\n") + detail::kQuantizeQ8Store + "} // namespace\n" + fn;
    normParts = {{"NORM_FN", fn},
                 {"NORM_PARAM", ", const float *norm_other, const float *__restrict__ norm_w,\n"
                                "         float *__restrict__ normed, float *norm_sum, unsigned char *__restrict__ norm_q8,\n"
                                "         unsigned char *work"},
                 {"NORM_EPILOGUE", "  addRmsNormLastBlock(y, norm_other, norm_w, normed, norm_sum, norm_q8, work, T);\n"}};
  }
  auto withNorm = [&](std::vector<std::pair<std::string, std::string>> parts) {
    parts.insert(parts.end(), normParts.begin(), normParts.end());
    return parts;
  };
  if (storage->dense) {
    // The CUDA-core half-weight GEMV's register budget, fixed through its minimum blocks per SM
    // (at most 65536 / (128 x blocks) registers per thread): left to itself ptxas held it at 40
    // registers and spilled values of the 16-byte loads (sm_86 - sm_90); 8 blocks (64 registers)
    // compile without spills on sm_80 - sm_90 for Llama-3-8B's shapes. The f32 GEMV (scalar
    // loads) and the tensor-core tiles keep ptxas' own choice.
    const bool budget = !p.tensorCores && storage->denseType != 2;
    body += detail::substitute(kDenseTemplate, withNorm({{"LAUNCH_BOUNDS", budget ? "kWarps * 32, 8" : "kWarps * 32"},
                                                         {"SILU_FN", silu ? kDenseSiluFn : ""},
                                                         {"SILU_PARAM", silu ? ", unsigned char *q8" : ""},
                                                         {"SILU_ENTRY", silu ? kDenseSiluEntry : ""}}));
  } else {
    // The quantized tensor-core tiles' budget: 5 blocks per SM, 96 registers. Left to itself
    // ptxas held them at 64 registers on some SKUs and spilled 16-48 bytes (sm_86/89: int4-g128
    // sym, int8-g128 zp; sm_90: int8-g128 sym); at 96 none spills on sm_80 - sm_90a for Llama-3-8B's
    // shapes in any format (NvrtcTest.QuantizedTensorCoreTilesDoNotSpillOnAnySku).
    // The CUDA-core GEMV's: 1024 threads per SM, 64 registers, which the 1-token path (batch-1
    // decode) needs without spilling on sm_80 - sm_90. Left to itself ptxas gives the 3- and
    // 4-token paths 78-80 (it hoists every activation load of a sub-block) and the kernel with
    // them: 3 blocks of 8 warps per SM, and a Llama-3-8B down projection's 512 blocks then take
    // two waves on 132 SMs. Capped, the kernel spills a few per-item words (8-104 bytes per thread,
    // stores and loads; none in a g128 span loop; NvrtcTest.EveryFamilyCompilesForSm80AndSm90
    // bounds it). The SiLU-mul epilogue's blocks: 8 warps, 4 per SM at 64 registers.
    body += detail::kQuantDequant;
    body += detail::substitute(
        kQuantTemplate,
        withNorm({{"LAUNCH_BOUNDS", p.tensorCores ? "kWarps * 32, 5" : silu ? "256, 4" : "kWarps * 32, 32 / kWarps"},
                  {"SILU_FN", silu ? std::string(detail::kQuantizeQ8Store) + kSiluFn : std::string()},
                  {"SILU_PARAM", silu ? ", unsigned char *__restrict__ q8" : ""},
                  {"SILU_ENTRY", silu ? kSiluEntry : ""}}));
  }
  prefix += "_" + storage->tag;
  // warps' work items per token chunk
  const int64_t items = storage->dense ? p.n : (p.n + 7) / 8;
  if (p.bias)
    prefix += "_bias";
  if (p.tensorCores)
    prefix += "_tc";
  if (p.int8Activations)
    prefix += "_q8a";
  if (silu)
    prefix += "_silu";
  if (norm)
    prefix += std::string("_addnorm") + (p.addRmsNorm->quantizedOutput ? "_q8" : "");
  // Grid: one warp (split K: one block) per item of the first token chunk; more token chunks
  // are walked by the grid-stride loop. The SiLU-mul epilogue: a block of 8 warps per 32 columns.
  const int64_t blocks = silu && !storage->dense ? p.siluInter / 32
                         : silu                 ? (p.siluInter + kWarpsPerBlock - 1) / kWarpsPerBlock
                         : splitK               ? items
                                                : (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  KernelSpec spec = detail::finishSpec(p.gatherRows ? "logits" : "linear", prefix, body,
                                       silu && !storage->dense ? 256 : 32 * warps,
                                       "rows/" + std::to_string(kTokensPerItem) + "*" + std::to_string(blocks));
  if (norm)
    spec.workspaceBytes = 256; // the last block's counter (a word, zero between launches)
  return spec;
}

} // namespace llmc

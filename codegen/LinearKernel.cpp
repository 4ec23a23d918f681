//===- LinearKernel.cpp - llm.linear and llm.logits: y = x w^T (+ b) ------===//
//
// The weight-only GEMV/small-GEMM path (decode and small batches), one warp
// per work item:
//
//   * quantized weights in the cuda_mma_n8 layout (runtime/quant/
//     quant_format.h): an item is one tile of 8 output rows times a chunk of
//     kTokens activation rows. Lane L owns row n = L / 4 of the tile and the
//     fragment elements k = 16 s + 2 (L % 4) + {0, 1, 8, 9} of every
//     sub-block, i.e. exactly the bytes the layout gives it: per 128-element
//     span one contiguous run of m * W bytes (16 for int4). It dequantizes
//     its codes in registers (f32), multiplies them with the activations and
//     the four lanes of a row finish the sum with two xor shuffles.
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
constexpr int kTiles = (kN + 7) / 8;

// An integer code 0..255 as a float, exactly, without the int-to-float unit (a quarter-rate
// pipe that would bound the decode GEMV): 2^23 + c has c in its mantissa.
__device__ __forceinline__ float codeToFloat(unsigned c) {
  return __uint_as_float(0x4B000000u | c) - 8388608.0f;
}

// The lane's codes in a span, as 32-bit words: m <= 4 sub-blocks of kW bytes, kW / 4 words each
// (words[j * kW / 4 ..] for sub-block j). A whole span's 16 (int4) or 32 (int8) bytes come in
// 16-byte loads where the layout keeps them aligned (every real model's shapes).
constexpr bool kVectorCodes = kCodesAt % 16 == 0 && kTileBytes % 16 == 0 && kSpanBytes % 16 == 0;
__device__ __forceinline__ void loadCodes(const unsigned char *mine, int m, unsigned words[kW]) {
  if (kVectorCodes && m == 4) {
#pragma unroll
    for (int c = 0; c < kW / 4; ++c) {
      const Vec16 v = reinterpret_cast<const Vec16 *>(mine)[c];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        words[4 * c + e] = v.u[e];
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kW; ++i)
    words[i] = i < m * kW / 4 ? reinterpret_cast<const unsigned *>(mine)[i] : 0u;
}

// Sub-block j of span `span`, the lane's words `w` of it (registers or memory): its 8 weights (row n of the tile)
// dequantized exactly, v[p] at element k0 + at[p] (k0 = span * 128 + j * 32).
__device__ __forceinline__ void dequantSubBlock(const unsigned char *base, const unsigned *w,
                                                int span, int j, int n, int q, float v[8], int at[8]) {
  const int k0 = span * 128 + j * 32; // this sub-block's first element
  const int g = k0 / kGroup;          // sub-blocks never straddle groups
  const float d = loadScale(base + (g * 8 + n) * kScaleBytes);
  float lo = 0.0f; // value = d * code + lo
  if (kOffset == 2)
    lo = loadScale(base + kOffsetsAt + (g * 8 + n) * kScaleBytes);
  else if (kOffset == 1)
    lo = -d * (float)base[kOffsetsAt + g * 8 + n];
  else
    lo = kBits == 4 ? -8.0f * d : 0.0f;
  if (kBits == 4) {
    const unsigned word = w[0];
    // Nibble p holds (s, b) = (0,b0) (0,b2) (1,b0) (1,b2) (0,b1) (0,b3)
    // (1,b1) (1,b3); b sits at k = 16 s + 2 q + {0, 1, 8, 9}[b].
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int s = (p >> 1) & 1, b = (p & 1) * 2 + (p >> 2);
      at[p] = 16 * s + 2 * q + (b & 1) + 8 * (b >> 1);
      v[p] = d * codeToFloat((word >> (4 * p)) & 15u) + lo;
    }
  } else {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const unsigned word = w[s];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const unsigned c = (word >> (8 * b)) & 255u;
        // sym codes are signed bytes (c ^ 0x80 = code + 128); zp and min codes unsigned.
        const float code = kOffset == 0 ? codeToFloat(c ^ 0x80u) - 128.0f : codeToFloat(c);
        at[4 * s + b] = 16 * s + 2 * q + (b & 1) + 8 * (b >> 1);
        v[4 * s + b] = d * code + lo;
      }
    }
  }
}
// Sub-blocks of 32 elements in span `span` (4, or fewer in a last partial span).
__device__ __forceinline__ int spanSubBlocks(int span) {
  return (kK - span * 128) / 32 < 4 ? (kK - span * 128) / 32 : 4;
}
// CUDA cores, one item: weight rows tile * 8 .. + 7 times tokens t0 .. t0 + NT - 1, shared by
// the block's kWarps warps, which split K: warp w takes spans w, w + kWarps, ... (a decode step's
// few tiles keep every multiprocessor busy), loading each span's codes one span ahead. Lane L
// owns row n = L / 4 and its sub-block elements; the 4 lanes of a row finish the warp's sums with
// two xor shuffles, then the warps' partial sums are added in warp order through shared memory
// (`part`), so the order depends on the sizes only.
static_assert(kTokens == 4, "the dispatch below handles 1 to 4 tokens per item");
template <int NT>
__device__ __forceinline__ void gemvItem(const float *__restrict__ x, const int *__restrict__ rows,
                                         const unsigned char *base, const float *__restrict__ bias,
                                         float *__restrict__ y, int t0, int tile, int lane, int n, int q,
                                         int warp, float (*part)[8][kTokens]) {
  const float *xr[NT];
  float acc[NT];
  gemvStart<NT>(x, rows, t0, xr, acc);
  unsigned next[kW];
  if (warp < kSpans)
    loadCodes(base + kCodesAt + warp * kSpanBytes + lane * spanSubBlocks(warp) * kW, spanSubBlocks(warp), next);
  for (int span = warp; span < kSpans; span += kWarps) {
    const int m = spanSubBlocks(span);
    unsigned words[kW];
#pragma unroll
    for (int i = 0; i < kW; ++i)
      words[i] = next[i];
    if (span + kWarps < kSpans) // the warp's next span, in flight while this one is summed
      loadCodes(base + kCodesAt + (span + kWarps) * kSpanBytes + lane * spanSubBlocks(span + kWarps) * kW,
                spanSubBlocks(span + kWarps), next);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j >= m)
        break;
      float v[8];
      int at[8]; // element of each value, relative to the sub-block's first
      dequantSubBlock(base, words + j * (kW / 4), span, j, n, q, v, at);
      const int k0 = span * 128 + j * 32;
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        const float *xs = xr[i] + k0;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[i] += v[e] * xs[at[e]];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    float a = acc[i];
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    a += __shfl_xor_sync(0xffffffffu, a, 2);
    if (q == 0)
      part[warp][n][i] = a;
  }
  __syncthreads();
  if (threadIdx.x < 8 * NT) {
    const int r = threadIdx.x / NT, i = threadIdx.x % NT, row = tile * 8 + r;
    float a = part[0][r][i];
#pragma unroll
    for (int v = 1; v < kWarps; ++v)
      a += part[v][r][i];
    if (row < kN)
      y[(long long)(t0 + i) * kN + row] = kHasBias ? a + bias[row] : a;
  }
  __syncthreads(); // `part` is reused by the block's next item
}
} // namespace

extern "C" __global__ void __launch_bounds__(${LAUNCH_BOUNDS})
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
        const int m = (kK - span * 128) / 32 < 4 ? (kK - span * 128) / 32 : 4;
        // (codes read per sub-block straight from memory: the tiles hold enough registers)
        const unsigned char *mine = base + kCodesAt + span * kSpanBytes + lane * m * kW;
        for (int j = 0; j < m; ++j) {
          float v[8];
          int at[8];
          dequantSubBlock(base, reinterpret_cast<const unsigned *>(mine + j * kW), span, j, n, q, v, at);
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
      gemvItem<4>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part);
    else if (nt == 3)
      gemvItem<3>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part);
    else if (nt == 2)
      gemvItem<2>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part);
    else
      gemvItem<1>(x, rows, base, bias, y, t0, tile, lane, n, q, warp, part);
  }
}
)cuda";

constexpr const char *kDenseTemplate = R"cuda(namespace {
// CUDA cores, one item: weight row `row` times tokens t0 .. t0 + NT - 1; lanes stride over K and
// a five-step xor shuffle tree finishes each sum (every lane takes part).
static_assert(kTokens == 4, "the dispatch below handles 1 to 4 tokens per item");
template <int NT>
__device__ __forceinline__ void gemvRow(const float *__restrict__ x, const int *__restrict__ rows,
                                        const unsigned char *__restrict__ w, const float *__restrict__ bias,
                                        float *__restrict__ y, int t0, int row, int lane) {
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
    if (lane == 0)
      y[(long long)(t0 + i) * kN + row] = kHasBias ? a + bias[row] : a;
  }
}
} // namespace

extern "C" __global__ void __launch_bounds__(${LAUNCH_BOUNDS})
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y, int T) {
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
}
)cuda";

constexpr int kWarpsPerBlock = 4;
constexpr int kTokensPerItem = 4;
constexpr int64_t kSplitKTargetWarps = 4096;

} // namespace

llmrt::StatusOr<KernelSpec> emitLinearKernel(const LinearParams &p) {
  const char *what = p.gatherRows ? "logits" : "linear";
  if (p.n <= 0 || p.n > detail::kMaxVocab || p.k <= 0 || p.k > detail::kMaxDim)
    return llmrt::invalid_argument(std::string(what) + ": shape [" + std::to_string(p.n) + ", " +
                                   std::to_string(p.k) + "] outside [1, 2^31) x [1, 2^24]");
  auto storage = detail::weightSource(p.weight, p.k);
  if (!storage.ok())
    return llmrt::invalid_argument(std::string(what) + ": " + storage.status().message());
  // The quantized CUDA-core GEMV gives each item (8 weight rows x 4 tokens) a block whose warps
  // split K (kWarps of them, at most one per 128-element span): enough warps that a decode step
  // of one token chunk fills the GPU (~4096 warps, 31 per multiprocessor on 132), at most 8.
  const int64_t tiles = (p.n + 7) / 8, spans = (p.k + 127) / 128;
  const bool splitK = !storage->dense && !p.tensorCores;
  const int warps = splitK ? static_cast<int>(std::clamp<int64_t>((kSplitKTargetWarps + tiles - 1) / tiles, 1,
                                                                    std::min<int64_t>(8, spans)))
                           : kWarpsPerBlock;
  std::vector<std::pair<std::string, std::string>> common = {
      {"N", std::to_string(p.n)},
      {"K", std::to_string(p.k)},
      {"TOKENS", std::to_string(kTokensPerItem)},
      {"WARPS", std::to_string(warps)},
      {"BIAS", p.bias ? "true" : "false"},
      {"GATHER", p.gatherRows ? "true" : "false"},
      {"TENSOR_CORES", p.tensorCores ? "true" : "false"}};
  std::string body = "// llmc kernel: " + std::string(what) + ", n=" + std::to_string(p.n) +
                     " k=" + std::to_string(p.k) + " weight=" + p.weight +
                     (p.bias ? " bias" : "") +
                     "\n// Params: (const float *x, const unsigned char *w, const float *bias, "
                     "const int *rows, float *y, int T)\n// Launch: blockDim.x = " +
                     std::to_string(32 * warps) + (splitK ? ", gridDim.x: grid-stride over blocks.\n"
                                                           : ", gridDim.x: grid-stride over warps.\n") +
                     detail::substitute(kCommon, common);
  std::string prefix = std::string("llm_") + what + "_n" + std::to_string(p.n) + "_k" + std::to_string(p.k);
  body += storage->constants;
  body += detail::kTf32Mma;
  body += kTensorCoreOps;
  if (storage->dense) {
    // The CUDA-core half-weight GEMV's register budget, fixed through its minimum blocks per SM
    // (at most 65536 / (128 x blocks) registers per thread): left to itself ptxas held it at 40
    // registers and spilled values of the 16-byte loads (sm_86 - sm_90); 8 blocks (64 registers)
    // compile without spills on sm_80 - sm_90 for Llama-3-8B's shapes. The f32 GEMV (scalar
    // loads) and the tensor-core tiles keep ptxas' own choice.
    const bool budget = !p.tensorCores && storage->denseType != 2;
    body += detail::substitute(kDenseTemplate, {{"LAUNCH_BOUNDS", budget ? "kWarps * 32, 8" : "kWarps * 32"}});
  } else {
    // The quantized tensor-core tiles' budget: 5 blocks per SM, 96 registers. Left to itself
    // ptxas held them at 64 registers on some SKUs and spilled 16-48 bytes (sm_86/89: int4-g128
    // sym, int8-g128 zp; sm_90: int8-g128 sym); at 96 none spills on sm_80 - sm_90a for Llama-3-8B's
    // shapes in any format (NvrtcTest.QuantizedTensorCoreTilesDoNotSpillOnAnySku).
    body += detail::substitute(kQuantTemplate, {{"LAUNCH_BOUNDS", p.tensorCores ? "kWarps * 32, 5" : "kWarps * 32"}});
  }
  prefix += "_" + storage->tag;
  // warps' work items per token chunk
  const int64_t items = storage->dense ? p.n : (p.n + 7) / 8;
  if (p.bias)
    prefix += "_bias";
  if (p.tensorCores)
    prefix += "_tc";
  // Grid: one warp (split K: one block) per item of the first token chunk; more token chunks
  // are walked by the grid-stride loop.
  const int64_t blocks = splitK ? items : (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return detail::finishSpec(p.gatherRows ? "logits" : "linear", prefix, body, 32 * warps,
                            "rows/" + std::to_string(kTokensPerItem) + "*" + std::to_string(blocks));
}

} // namespace llmc

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
//     K and a five-step xor shuffle tree finishes the sum.
//
// Both accumulate in f32 in an order fixed by the sizes only (each lane in
// index order, then the shuffle tree), never by T, the grid or the batch. The
// dequantized value of a code is exact in f32 (quant_format.h), so results
// differ from the CPU backend only by summation order and FMA contraction.
// Tensor-core (mma.sync) tiles for large batches and cuBLASLt for dense
// prefill are the next steps of this family; this kernel is the reference
// and the batch-1 path.
//
//===----------------------------------------------------------------------===//

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
} // namespace
)cuda";

constexpr const char *kQuantTemplate = R"cuda(namespace {
constexpr int kTiles = (kN + 7) / 8;
} // namespace

extern "C" __global__ void __launch_bounds__(kWarps * 32)
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = lane >> 2, q = lane & 3;
  const long long chunks = ((long long)T + kTokens - 1) / kTokens;
  const long long items = chunks * kTiles;
  for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
       item += (long long)gridDim.x * kWarps) {
    // Neighbouring warps take neighbouring tiles of the same tokens.
    const int tile = (int)(item % kTiles);
    const int t0 = (int)(item / kTiles) * kTokens;
    const unsigned char *base = w + tile * kTileBytes;
    const float *xr[kTokens];
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      const int t = t0 + i < T ? t0 + i : t0; // a repeat of a valid row
      xr[i] = x + (long long)(kGather ? rows[t] : t) * kK;
    }
    float acc[kTokens];
#pragma unroll
    for (int i = 0; i < kTokens; ++i)
      acc[i] = 0.0f;
    for (int span = 0; span < kSpans; ++span) {
      const int m = (kK - span * 128) / 32 < 4 ? (kK - span * 128) / 32 : 4;
      const unsigned char *mine =
          base + kCodesAt + span * kSpanBytes + lane * m * kW;
      for (int j = 0; j < m; ++j) {
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
        float v[8];
        int at[8]; // element of each value, relative to k0
        if (kBits == 4) {
          const unsigned word = *reinterpret_cast<const unsigned *>(mine + j * 4);
          // Nibble p holds (s, b) = (0,b0) (0,b2) (1,b0) (1,b2) (0,b1) (0,b3)
          // (1,b1) (1,b3); b sits at k = 16 s + 2 q + {0, 1, 8, 9}[b].
#pragma unroll
          for (int p = 0; p < 8; ++p) {
            const int s = (p >> 1) & 1, b = (p & 1) * 2 + (p >> 2);
            at[p] = 16 * s + 2 * q + (b & 1) + 8 * (b >> 1);
            v[p] = d * (float)((word >> (4 * p)) & 15u) + lo;
          }
        } else {
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const unsigned word =
                *reinterpret_cast<const unsigned *>(mine + j * 8 + 4 * s);
#pragma unroll
            for (int b = 0; b < 4; ++b) {
              const unsigned c = (word >> (8 * b)) & 255u;
              // sym codes are signed bytes; zp and min codes unsigned.
              const float code = kOffset == 0 ? (float)(int)(signed char)c : (float)c;
              at[4 * s + b] = 16 * s + 2 * q + (b & 1) + 8 * (b >> 1);
              v[4 * s + b] = d * code + lo;
            }
          }
        }
#pragma unroll
        for (int i = 0; i < kTokens; ++i) {
          const float *xs = xr[i] + k0;
#pragma unroll
          for (int e = 0; e < 8; ++e)
            acc[i] += v[e] * xs[at[e]];
        }
      }
    }
    const int row = tile * 8 + n;
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      float a = acc[i];
      a += __shfl_xor_sync(0xffffffffu, a, 1);
      a += __shfl_xor_sync(0xffffffffu, a, 2);
      if (q == 0 && row < kN && t0 + i < T)
        y[(long long)(t0 + i) * kN + row] = kHasBias ? a + bias[row] : a;
    }
  }
}
)cuda";

constexpr const char *kDenseTemplate = R"cuda(extern "C" __global__ void __launch_bounds__(kWarps * 32)
${ENTRY}(const float *__restrict__ x, const unsigned char *__restrict__ w,
         const float *__restrict__ bias, const int *__restrict__ rows,
         float *__restrict__ y, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long chunks = ((long long)T + kTokens - 1) / kTokens;
  const long long items = chunks * kN;
  for (long long item = (long long)blockIdx.x * kWarps + warp; item < items;
       item += (long long)gridDim.x * kWarps) {
    const int row = (int)(item % kN);
    const int t0 = (int)(item / kN) * kTokens;
    const float *xr[kTokens];
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      const int t = t0 + i < T ? t0 + i : t0;
      xr[i] = x + (long long)(kGather ? rows[t] : t) * kK;
    }
    float acc[kTokens];
#pragma unroll
    for (int i = 0; i < kTokens; ++i)
      acc[i] = 0.0f;
    const long long wrow = (long long)row * kK;
    for (int k = lane; k < kK; k += 32) {
      const float wv = weightAt(w, wrow + k);
#pragma unroll
      for (int i = 0; i < kTokens; ++i)
        acc[i] += wv * xr[i][k];
    }
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      float a = acc[i];
#pragma unroll
      for (int m = 16; m > 0; m >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, m);
      if (lane == 0 && t0 + i < T)
        y[(long long)(t0 + i) * kN + row] = kHasBias ? a + bias[row] : a;
    }
  }
}
)cuda";

constexpr int kWarpsPerBlock = 4;
constexpr int kTokensPerItem = 4;

} // namespace

llmrt::StatusOr<KernelSpec> emitLinearKernel(const LinearParams &p) {
  const char *what = p.gatherRows ? "logits" : "linear";
  if (p.n <= 0 || p.n > detail::kMaxVocab || p.k <= 0 || p.k > detail::kMaxDim)
    return llmrt::invalid_argument(std::string(what) + ": shape [" + std::to_string(p.n) + ", " +
                                   std::to_string(p.k) + "] outside [1, 2^31) x [1, 2^24]");
  std::vector<std::pair<std::string, std::string>> common = {
      {"N", std::to_string(p.n)},
      {"K", std::to_string(p.k)},
      {"TOKENS", std::to_string(kTokensPerItem)},
      {"WARPS", std::to_string(kWarpsPerBlock)},
      {"BIAS", p.bias ? "true" : "false"},
      {"GATHER", p.gatherRows ? "true" : "false"}};
  std::string body = "// llmc kernel: " + std::string(what) + ", n=" + std::to_string(p.n) +
                     " k=" + std::to_string(p.k) + " weight=" + p.weight +
                     (p.bias ? " bias" : "") +
                     "\n// Params: (const float *x, const unsigned char *w, const float *bias, "
                     "const int *rows, float *y, int T)\n// Launch: blockDim.x = " +
                     std::to_string(32 * kWarpsPerBlock) + ", gridDim.x: grid-stride over warps.\n" +
                     detail::substitute(kCommon, common);
  std::string prefix = std::string("llm_") + what + "_n" + std::to_string(p.n) + "_k" + std::to_string(p.k);
  auto storage = detail::weightSource(p.weight, p.k);
  if (!storage.ok())
    return llmrt::invalid_argument(std::string(what) + ": " + storage.status().message());
  body += storage->constants;
  body += storage->dense ? kDenseTemplate : kQuantTemplate;
  prefix += "_" + storage->tag;
  // warps' work items per token chunk
  const int64_t items = storage->dense ? p.n : (p.n + 7) / 8;
  if (p.bias)
    prefix += "_bias";
  // Grid: one warp per item of the first token chunk; more token chunks are
  // walked by the grid-stride loop.
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return detail::finishSpec(p.gatherRows ? "logits" : "linear", prefix, body, 32 * kWarpsPerBlock,
                            "rows/" + std::to_string(kTokensPerItem) + "*" + std::to_string(blocks));
}

} // namespace llmc

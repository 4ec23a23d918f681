//===- DequantKernel.cpp - dequant_bf16: a quantized weight as bf16 ------===//
//
// A GEMM library's weight (Step.library_weight_kernel): a quantized weight in the cuda_mma_n8
// layout written out as the bf16 [n, k] row-major matrix cuBLASLt multiplies, each element its
// exact dequantized value (the quantized GEMVs' dequantSubBlock, detail::kQuantDequant) rounded
// to nearest even.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {

// dequant_bf16: one warp per (tile, span) item, lane L holding row L / 4's fragment elements of
// each sub-block (dequantSubBlock), which it writes as two adjacent bf16 per 4-byte store (a
// row's 4 lanes fill 64 contiguous bytes per sub-block).
constexpr const char *kDequantTemplate = R"cuda(namespace {
constexpr int kN = ${N};
constexpr int kK = ${K};
constexpr int kDequantWarps = ${WARPS};
} // namespace
)cuda";

constexpr const char *kDequantEntry = R"cuda(
extern "C" __global__ void __launch_bounds__(kDequantWarps * 32)
${ENTRY}(const unsigned char *__restrict__ w, unsigned short *__restrict__ out, int T) {
  const int lane = threadIdx.x & 31, n = lane >> 2, q = lane & 3;
  const long long items = (long long)kTiles * kSpans;
  // Neighbouring warps take neighbouring spans of one tile: the reads stream through the tile.
  for (long long item = (long long)blockIdx.x * kDequantWarps + (threadIdx.x >> 5); item < items;
       item += (long long)gridDim.x * kDequantWarps) {
    const int tile = (int)(item / kSpans), span = (int)(item % kSpans);
    const unsigned char *base = w + tile * kTileBytes;
    const int m = spanSubBlocks(span);
    const unsigned char *mine = base + kCodesAt + span * kSpanBytes + lane * m * kW;
    const int row = tile * 8 + n;
    const unsigned hi = kBits == 5 ? spanFifthBits(base, span, lane) : 0u; // int5: the lane's fifth bits
    for (int j = 0; j < m; ++j) {
      float v[8];
      int at[8];
      dequantSubBlock(base, reinterpret_cast<const unsigned *>(mine + j * kW), hi >> (8 * j), span, j, n, q, v, at);
      if (row >= kN)
        continue;
      unsigned short *o = out + (long long)row * kK + span * 128 + j * 32;
      // The elements come in adjacent pairs (2 q + 16 s + 8 c, + 1), one 4-byte store each:
      // int4 (int5) nibbles p and p + 4, int8 bytes 2 i and 2 i + 1 (dequantSubBlock's order).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int lo = kBits != 8 ? i : 2 * i, hi = kBits != 8 ? i + 4 : 2 * i + 1;
        *reinterpret_cast<unsigned *>(o + at[lo]) = (unsigned)floatToBf16(v[lo]) | ((unsigned)floatToBf16(v[hi]) << 16);
      }
    }
  }
}
)cuda";

} // namespace

llmrt::StatusOr<KernelSpec> emitDequantBf16Kernel(const std::string &weight, int64_t n, int64_t k) {
  if (n <= 0 || n > detail::kMaxVocab || k <= 0 || k > detail::kMaxDim)
    return llmrt::invalid_argument("dequant_bf16: shape [" + std::to_string(n) + ", " + std::to_string(k) +
                                   "] outside [1, 2^31) x [1, 2^24]");
  auto storage = detail::weightSource(weight, k);
  if (!storage.ok())
    return llmrt::invalid_argument("dequant_bf16: " + storage.status().message());
  if (storage->dense)
    return llmrt::invalid_argument("dequant_bf16: weight '" + weight + "' is not quantized");
  constexpr int kWarps = 8;
  std::string body = "// llmc kernel: dequant_bf16, n=" + std::to_string(n) + " k=" + std::to_string(k) +
                     " weight=" + weight +
                     "\n// out[r, c] = bf16(dequantized w[r, c]), round to nearest even; bf16 bit patterns."
                     "\n// Params: (const unsigned char *w, unsigned short *out, int T = n)"
                     "\n// Launch: blockDim.x = " + std::to_string(32 * kWarps) +
                     ", gridDim.x: grid-stride over (tile, span) warp items.\n" +
                     detail::substitute(kDequantTemplate,
                                        {{"N", std::to_string(n)}, {"K", std::to_string(k)},
                                         {"WARPS", std::to_string(kWarps)}}) +
                     storage->constants + detail::kQuantDequant + kDequantEntry;
  // One warp per (tile, span) item: T = n rows make n / 8 tiles of kSpans items, 8 per block.
  const int64_t spans = (k + 127) / 128;
  return detail::finishSpec("dequant_bf16",
                            "llm_dequant_bf16_n" + std::to_string(n) + "_k" + std::to_string(k) + "_" + storage->tag,
                            body, 32 * kWarps, "rows/64*" + std::to_string(spans));
}

// The tiles' exact dequantization, shared by dequant_bf16 and the quantized linear kernels
// (LinearKernel.cpp).
const char *const detail::kQuantDequant = R"cuda(namespace {
constexpr int kTiles = (kN + 7) / 8;

// An integer code 0..255 as a float, exactly, without the int-to-float unit (a quarter-rate
// pipe that would bound the decode GEMV): 2^23 + c has c in its mantissa.
__device__ __forceinline__ float codeToFloat(unsigned c) {
  return __uint_as_float(0x4B000000u | c) - 8388608.0f;
}

// Sub-block j of span `span`, the lane's words `w` of it (registers or memory) and (int5) its byte
// of fifth bits hi: its 8 weights (row n of the tile) dequantized exactly, v[p] at element k0 +
// at[p] (k0 = span * 128 + j * 32).
__device__ __forceinline__ void dequantSubBlock(const unsigned char *base, const unsigned *w, unsigned hi,
                                                int span, int j, int n, int q, float v[8], int at[8]) {
  const int k0 = span * 128 + j * 32; // this sub-block's first element
  const int g = k0 / kGroup;          // sub-blocks never straddle groups (g16, s16: two, one per k-step)
  const float d = groupScale(base, g, n);
  const float d1 = kSubGroups == 2 ? groupScale(base, g + 1, n) : d;
  float lo = 0.0f; // value = d * code + lo
  if (kOffset == 2)
    lo = groupMin(base, g, n);
  else if (kOffset == 1)
    lo = -d * (float)base[kOffsetsAt + g * 8 + n];
  else
    lo = kBits != 8 && kOffset == 0 ? -(float)kSymCode * d : 0.0f;
  // k-step 1's offset where scales are per 16 (int8 g16 / s16, int4 s16: sym or min)
  const float lo1 = kSubGroups != 2 ? lo : kOffset == 2 ? groupMin(base, g + 1, n) : kBits != 8 ? -(float)kSymCode * d1 : 0.0f;
  if (kBits != 8) {
    const unsigned word = w[0];
    // nl: the grid values of nibbles 0..3 and 4..7 as signed bytes
    const unsigned grid[2] = {kOffset == 3 ? nlGrid4(word) : 0u, kOffset == 3 ? nlGrid4(word >> 16) : 0u};
    // Nibble p holds (s, b) = (0,b0) (0,b2) (1,b0) (1,b2) (0,b1) (0,b3)
    // (1,b1) (1,b3); b sits at k = 16 s + 2 q + {0, 1, 8, 9}[b].
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int s = (p >> 1) & 1, b = (p & 1) * 2 + (p >> 2);
      at[p] = 16 * s + 2 * q + (b & 1) + 8 * (b >> 1);
      const float code = kOffset == 3 ? codeToFloat(((grid[p >> 2] >> (8 * (p & 3))) & 255u) ^ 0x80u) - 128.0f
                                      : codeToFloat(((word >> (4 * p)) & 15u) | ((hi >> p) & 1u) << 4);
      v[p] = (s ? d1 : d) * code + (s ? lo1 : lo); // (int4 s16: k-step s's own scale and offset)
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
        v[4 * s + b] = (s ? d1 : d) * code + (s ? lo1 : lo); // (groups of 16: k-step s's own)
      }
    }
  }
}
} // namespace
)cuda";

} // namespace llmc

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
    const int m = (kK - span * 128) / 32 < 4 ? (kK - span * 128) / 32 : 4; // sub-blocks in the span
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

} // namespace llmc

//===- QuantizeQ8Kernel.cpp - f32 activations to int8 blocks (fast contract) -===//
//
// The int8-activation GEMV (LinearParams::int8Activations) multiplies
// quantized weight codes with int8 activation codes in dp4a instructions (4
// products and their sum per instruction, against ~5 instructions per weight
// for f32 activations). This kernel writes a step's input rows in the form it
// reads: per 32 values the CPU's fast-contract quantization
// (runtime/cpu/quant_linear.cc, quantize_activations_scalar), bit for bit:
//   d = amax / 127, q = rint(x * (1 / d)) (0 for an all-zero block),
//   s = d * sum(q),
// with the codes permuted into the lanes' fragment order of the cuda_mma_n8
// weight layout, so that a lane reads its 8 activations of a sub-block in one
// 8-byte load (q8RowBytes in KernelFamilies.h has the row layout).
//
// One warp per block of 32 values, a lane per value: the block's absolute
// maximum and code sum are xor-shuffle trees, each lane writes its code byte.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {

constexpr int kWarpsPerBlock = 8;

constexpr const char *kTemplate = R"cuda(// llmc kernel: quantize_q8, width=${K}${GATHER_NOTE}
// Params: (const float *x, const int *rows, unsigned char *out, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T * ${BLOCKS_PER_ROW} (grid-stride over (row, 8 sub-blocks)).
namespace {
constexpr int kK = ${K};
constexpr bool kGather = ${GATHER};
constexpr int kWarps = ${WARPS};
constexpr int kSubBlocks = kK / 32;
constexpr int kSpans = (kK + 127) / 128;
constexpr long long kRowBytes = (long long)kSpans * 160;
constexpr int kScalesAt = kSpans * 128;
constexpr int kSumsAt = kScalesAt + kSpans * 16;
constexpr int kChunks = (kSubBlocks + kWarps - 1) / kWarps; // blocks per row
} // namespace

extern "C" __global__ void __launch_bounds__(${BLOCK})
${ENTRY}(const float *__restrict__ x, const int *__restrict__ rows, unsigned char *__restrict__ out, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Element e = lane of the sub-block: its place in the fragment order. In a span's 128 bytes,
  // lane quad q = (e % 8) / 2 owns 32 q .. 32 q + 31, 8 per sub-block j: word A (bytes 0-3) holds
  // elements 2q, 2q+16, 2q+1, 2q+17, word B (bytes 4-7) 2q+8, 2q+24, 2q+9, 2q+25 -- the
  // elements int4 nibbles 0, 2, 4, 6 and 1, 3, 5, 7 of a lane's code word weigh.
  const int c = lane >> 3, odd = lane & 1, q = (lane & 7) >> 1;
  const int p = c + 4 * odd; // the nibble of the lane's word at this element
  const int at = 32 * q + ((p & 1) ? 4 : 0) + (p >> 1); // in its span: + 8 per sub-block
  const long long items = (long long)T * kChunks;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const int t = (int)(item / kChunks);
    const int b = (int)(item % kChunks) * kWarps + warp; // sub-block
    if (b >= kSubBlocks)
      continue; // (no barrier below: warps are independent)
    const long long src = kGather ? (long long)rows[t] : t;
    const float v = x[src * kK + 32 * b + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const int code = __float2int_rn(__fmul_rn(v, id));
    int sum = code;
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1)
      sum += __shfl_xor_sync(0xffffffffu, sum, m);
    unsigned char *row = out + (long long)t * kRowBytes;
    const int span = b >> 2, j = b & 3;
    row[span * 128 + j * 8 + at] = (unsigned char)(signed char)code;
    if (lane == 0) {
      reinterpret_cast<float *>(row + kScalesAt)[b] = d;
      reinterpret_cast<float *>(row + kSumsAt)[b] = __fmul_rn(d, (float)sum);
    }
  }
}
)cuda";

} // namespace

llmrt::StatusOr<KernelSpec> emitQuantizeQ8Kernel(int64_t k, bool gatherRows) {
  if (k <= 0 || k > detail::kMaxDim || k % 32 != 0)
    return llmrt::invalid_argument("quantize_q8: width " + std::to_string(k) +
                                   " is not a positive multiple of 32 up to 2^24");
  const int64_t subBlocks = k / 32;
  const int64_t blocksPerRow = (subBlocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  std::string body = detail::substitute(
      kTemplate, {{"K", std::to_string(k)},
                  {"GATHER", gatherRows ? "true" : "false"},
                  {"GATHER_NOTE", gatherRows ? ", rows gathered (out row t from x row rows[t])" : ""},
                  {"WARPS", std::to_string(kWarpsPerBlock)},
                  {"BLOCK", std::to_string(32 * kWarpsPerBlock)},
                  {"BLOCKS_PER_ROW", std::to_string(blocksPerRow)}});
  return detail::finishSpec("quantize_q8",
                            "llm_quantize_q8_k" + std::to_string(k) + (gatherRows ? "_gather" : ""), body,
                            32 * kWarpsPerBlock, "rows*" + std::to_string(blocksPerRow));
}

} // namespace llmc

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
// maximum and code sum are xor-shuffle trees, each lane writes its code byte
// (storeQ8, shared with the producers that write these rows themselves).
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
constexpr int kChunks = (kSubBlocks + kWarps - 1) / kWarps; // blocks per row
${Q8_STORE}} // namespace

extern "C" __global__ void __launch_bounds__(${BLOCK})
${ENTRY}(const float *__restrict__ x, const int *__restrict__ rows, unsigned char *__restrict__ out, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long items = (long long)T * kChunks;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const int t = (int)(item / kChunks);
    const int b = (int)(item % kChunks) * kWarps + warp; // sub-block
    if (b >= kSubBlocks)
      continue; // (no barrier below: warps are independent)
    const long long src = kGather ? (long long)rows[t] : t;
    storeQ8Value<kK>(out, t, 32 * b + lane, x[src * kK + 32 * b + lane]);
  }
}
)cuda";

} // namespace

// Shared with the kernels that write a GEMV's int8 input as a second output of their own
// (rms_norm, add_rms_norm, silu_mul, permute_columns and paged_attention with quantizedOutput):
// the same operations, so the same bits as this family's kernel reading their f32 output back.
const char *const detail::kQuantizeQ8Store = R"cuda(// Int8 rows of the fast contract (codegen/KernelFamilies.h, emitQuantizeQ8Kernel).
template <int K> __device__ __forceinline__ constexpr long long q8RowBytes() { return (K + 127) / 128 * 160LL; }

// Element e (0..31) of a sub-block: its byte among the sub-block's 32 in the lanes' fragment
// order. Lane quad q = (e % 8) / 2 owns bytes 32 q .. 32 q + 31 of a span, 8 per sub-block:
// word A (bytes 0-3) holds elements 2q, 2q+16, 2q+1, 2q+17, word B (bytes 4-7) 2q+8, 2q+24,
// 2q+9, 2q+25 -- the elements int4 nibbles 0, 2, 4, 6 and 1, 3, 5, 7 of a lane's code word weigh.
__device__ __forceinline__ int q8ByteOf(int e) {
  const int c = e >> 3, q = (e & 7) >> 1, p = c + 4 * (e & 1); // p: the element's nibble
  return 32 * q + ((p & 1) ? 4 : 0) + (p >> 1);
}

// V consecutive values v (V = 1, 2 or 4) of a row of K, from element e0 (a multiple of V): the
// 32 / V consecutive lanes of the warp that hold a sub-block's 32 values find its absolute
// maximum and code sum in xor-shuffle trees, each writes its codes, the sub-block's first lane
// d = amax / 127 and s = d * sum(codes) (codes rint(x * (1 / d)), 0 for an all-zero block).
// Every lane of the warp must call it (full-mask shuffles), for sub-blocks of one row or not;
// only lanes with `store` write (whole sub-blocks of lanes: the others' values do not matter).
template <int K, int V>
__device__ __forceinline__ void storeQ8(unsigned char *row, int e0, const float v[V], bool store) {
  constexpr int kSpans = (K + 127) / 128;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i)
    amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int m = 16 / V; m >= 1; m >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  const int b = e0 >> 5;
  unsigned char *codes = row + (b >> 2) * 128 + (b & 3) * 8;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int code = __float2int_rn(__fmul_rn(v[i], id));
    sum += code;
    if (store)
      codes[q8ByteOf((e0 + i) & 31)] = (unsigned char)(signed char)code;
  }
#pragma unroll
  for (int m = 16 / V; m >= 1; m >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (store && (e0 & 31) == 0) {
    reinterpret_cast<float *>(row + kSpans * 128)[b] = d;
    reinterpret_cast<float *>(row + kSpans * 144)[b] = __fmul_rn(d, (float)sum);
  }
}

// One value y per lane (element e of row `row` of the int8 rows at q8; the warp's 32 lanes a
// sub-block): storeQ8 when q8 is not null.
template <int K>
__device__ __forceinline__ void storeQ8Value(unsigned char *q8, long long row, int e, float y) {
  if (q8 != nullptr) {
    const float one[1] = {y};
    storeQ8<K, 1>(q8 + row * q8RowBytes<K>(), e, one, true);
  }
}
)cuda";

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
                  {"Q8_STORE", detail::kQuantizeQ8Store},
                  {"BLOCK", std::to_string(32 * kWarpsPerBlock)},
                  {"BLOCKS_PER_ROW", std::to_string(blocksPerRow)}});
  return detail::finishSpec("quantize_q8",
                            "llm_quantize_q8_k" + std::to_string(k) + (gatherRows ? "_gather" : ""), body,
                            32 * kWarpsPerBlock, "rows*" + std::to_string(blocksPerRow));
}

} // namespace llmc

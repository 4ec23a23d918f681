//===- ConvertKernel.cpp - f32 activations to bf16 for a GEMM library -----===//
//
// cuBLASLt multiplies operands of one type: bf16 weights need bf16
// activations (A and B of one type, f32 accumulation and output). The
// runtime's activations are f32, so a step whose dense GEMM runs in the
// library first writes its input rows in bf16 into a buffer of its own; this
// kernel is that conversion, specialized by the row width. Rounding is to
// nearest, ties to even, as __float2bfloat16_rn and the CPU backend's
// f32-to-bf16 conversion round; NaN stays NaN (quiet), infinities stay
// infinite, values past bf16's largest finite round to infinity as IEEE
// rounding does.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {

// Each thread converts 4 consecutive elements per iteration (a 16-byte load, an 8-byte store)
// when the width allows it, else one.
constexpr const char *kTemplate = R"cuda(// llmc kernel: to_bf16, width=${K}
// y[t, j] = bf16(x[t, j]), round to nearest even (bit patterns as unsigned short).
// Params: (const float *x, unsigned short *y, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
${CONVERSIONS}namespace {
constexpr int kK = ${K};
constexpr int kBlock = ${BLOCK};
constexpr bool kVector = kK % 4 == 0;
struct alignas(16) F32x4 { float v[4]; };
struct alignas(8) Bf16x4 { unsigned short v[4]; };

} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ x, unsigned short *__restrict__ y, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long base = (long long)row * kK;
    if (kVector) {
      for (int j = 4 * threadIdx.x; j < kK; j += 4 * kBlock) {
        const F32x4 v = *reinterpret_cast<const F32x4 *>(x + base + j);
        Bf16x4 o;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o.v[i] = floatToBf16(v.v[i]);
        *reinterpret_cast<Bf16x4 *>(y + base + j) = o;
      }
    } else {
      for (int j = threadIdx.x; j < kK; j += kBlock)
        y[base + j] = floatToBf16(x[base + j]);
    }
  }
}
)cuda";

} // namespace

llmrt::StatusOr<KernelSpec> emitToBf16Kernel(int64_t width) {
  if (width <= 0 || width > detail::kMaxDim)
    return llmrt::invalid_argument("to_bf16: width " + std::to_string(width) + " outside [1, 2^24]");
  const int block = detail::elementwiseBlockSize(width % 4 == 0 ? width / 4 : width);
  std::string body = detail::substitute(kTemplate, {{"K", std::to_string(width)},
                                                   {"BLOCK", std::to_string(block)},
                                                   {"CONVERSIONS", detail::kFloatConversions}});
  return detail::finishSpec("to_bf16", "llm_to_bf16_k" + std::to_string(width), body, block, "rows");
}

} // namespace llmc

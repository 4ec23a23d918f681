//===- SiluMulKernel.cpp - llm.silu_mul: silu(gate) * up ------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {
// Two operands: gate[T, I], up[T, I]. `out` may alias `gate` or `up` (each
// element is read and written by the same thread), so no __restrict__.
constexpr const char *kSplitTemplate = R"cuda(// llmc kernel: silu_mul (gate, up), inter=${I}
// out[t, j] = silu(gate[t, j]) * up[t, j], silu(g) = g / (1 + exp(-g)).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kI = ${I};
constexpr int kBlock = ${BLOCK};
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *gate, const float *up, float *out, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long base = (long long)row * kI;
    for (int j = threadIdx.x; j < kI; j += kBlock) {
      const float g = gate[base + j];
      const float u = up[base + j];
      out[base + j] = g / (1.0f + expf(-g)) * u;
    }
  }
}
)cuda";

// Fused: gate_up[T, 2I], gate in columns [0, I), up in [I, 2I).
constexpr const char *kFusedTemplate = R"cuda(// llmc kernel: silu_mul (fused gate_up), inter=${I}
// out[t, j] = silu(gu[t, j]) * gu[t, I + j], silu(g) = g / (1 + exp(-g)).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kI = ${I};
constexpr int kBlock = ${BLOCK};
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ gate_up, float *__restrict__ out, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const float *in = gate_up + (long long)row * (2 * kI);
    float *dst = out + (long long)row * kI;
    for (int j = threadIdx.x; j < kI; j += kBlock) {
      const float g = in[j];
      const float u = in[kI + j];
      dst[j] = g / (1.0f + expf(-g)) * u;
    }
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitSiluMulKernel(const SiluMulParams &p) {
  if (p.inter <= 0 || p.inter > detail::kMaxDim)
    return llmrt::invalid_argument("silu_mul: intermediate size " +
                                   std::to_string(p.inter) +
                                   " outside [1, 2^24]");
  int block = detail::elementwiseBlockSize(p.inter);
  std::string body = detail::substitute(
      p.fused ? kFusedTemplate : kSplitTemplate,
      {{"I", std::to_string(p.inter)}, {"BLOCK", std::to_string(block)}});
  return detail::finishSpec("silu_mul",
                            std::string(p.fused ? "llm_silu_mul_fused_i"
                                                : "llm_silu_mul_i") +
                                std::to_string(p.inter),
                            body, block, "rows");
}

} // namespace llmc

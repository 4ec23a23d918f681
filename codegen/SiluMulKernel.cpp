//===- SiluMulKernel.cpp - llm.silu_mul: silu(gate) * up ------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {
// A row of I elements is cut into chunks of kBlock * kVec (kVec = 4 when I is a multiple of 4:
// 16-byte loads, rows 16-byte aligned as the arena keeps them), one block per (row, chunk), so a
// decode step's single row spreads over ceil(I / chunk) multiprocessors instead of one.
constexpr const char *kPrelude = R"cuda(namespace {
constexpr int kI = ${I};
constexpr int kBlock = ${BLOCK};
constexpr int kVec = kI % 4 == 0 ? 4 : 1;
constexpr int kChunk = kBlock * kVec;
constexpr int kChunks = (kI + kChunk - 1) / kChunk;
struct alignas(16) F4 { float v[4]; };

__device__ __forceinline__ float siluMul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// out[j .. j + kVec) = silu(g[j ..]) * u[j ..], also left in o; out may alias g or u (same
// thread, same element).
__device__ __forceinline__ void siluMulAt(const float *g, const float *u, float *out, int j, float o[kVec]) {
  if (kVec == 4) {
    const F4 a = *reinterpret_cast<const F4 *>(g + j), b = *reinterpret_cast<const F4 *>(u + j);
    F4 r;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[e] = r.v[e] = siluMul(a.v[e], b.v[e]);
    *reinterpret_cast<F4 *>(out + j) = r;
  } else {
    out[j] = o[0] = siluMul(g[j], u[j]);
  }
}
${Q8_STORE}
// Element j of the row (and the kVec after it) into `out`; with q8 rows (a multiple of 32
// elements: kVec = 4, a sub-block over 8 lanes, whole sub-blocks in or out of the row) every
// lane takes part in their stores, those past the row with zeros.
__device__ __forceinline__ void siluMulRow(const float *g, const float *u, float *out, int j, unsigned char *q8row) {
  float o[kVec] = {};
  if (j < kI)
    siluMulAt(g, u, out, j, o);
${Q8_CALL}}
} // namespace
)cuda";

// Two operands: gate[T, I], up[T, I]. `out` may alias `gate` or `up` (each
// element is read and written by the same thread), so no __restrict__.
constexpr const char *kSplitTemplate = R"cuda(// llmc kernel: silu_mul (gate, up), inter=${I}
// out[t, j] = silu(gate[t, j]) * up[t, j], silu(g) = g / (1 + exp(-g)).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T * chunks (grid-stride over (row, chunk)).
${PRELUDE}
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *gate, const float *up, float *out${Q8_PARAM}, int T) {
  for (long long item = blockIdx.x; item < (long long)T * kChunks; item += gridDim.x) {
    const long long row = item / kChunks, base = row * kI;
    const int j = (int)(item % kChunks) * kChunk + threadIdx.x * kVec;
    siluMulRow(gate + base, up + base, out + base, j, ${Q8_ROW});
  }
}
)cuda";

// Fused: gate_up[T, 2I], gate in columns [0, I), up in [I, 2I).
constexpr const char *kFusedTemplate = R"cuda(// llmc kernel: silu_mul (fused gate_up), inter=${I}
// out[t, j] = silu(gu[t, j]) * gu[t, I + j], silu(g) = g / (1 + exp(-g)).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T * chunks (grid-stride over (row, chunk)).
${PRELUDE}
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ gate_up, float *__restrict__ out${Q8_PARAM}, int T) {
  for (long long item = blockIdx.x; item < (long long)T * kChunks; item += gridDim.x) {
    const long long row = item / kChunks;
    const int j = (int)(item % kChunks) * kChunk + threadIdx.x * kVec;
    const float *in = gate_up + row * (2 * kI);
    siluMulRow(in, in + kI, out + row * kI, j, ${Q8_ROW});
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitSiluMulKernel(const SiluMulParams &p) {
  if (p.inter <= 0 || p.inter > detail::kMaxDim)
    return llmrt::invalid_argument("silu_mul: intermediate size " +
                                   std::to_string(p.inter) +
                                   " outside [1, 2^24]");
  if (p.quantizedOutput && p.inter % 32 != 0)
    return llmrt::invalid_argument("silu_mul: int8 output rows need a multiple of 32 elements, got " +
                                   std::to_string(p.inter));
  const int vec = p.inter % 4 == 0 ? 4 : 1;
  const int block = detail::elementwiseBlockSize((p.inter + vec - 1) / vec);
  const int64_t chunks = (p.inter + int64_t{block} * vec - 1) / (int64_t{block} * vec);
  const std::vector<std::pair<std::string, std::string>> sizes = {{"I", std::to_string(p.inter)},
                                                                    {"BLOCK", std::to_string(block)}};
  const bool q8 = p.quantizedOutput;
  const std::string prelude = detail::substitute(
      kPrelude, {sizes[0], sizes[1],
                 {"Q8_STORE", q8 ? detail::kQuantizeQ8Store : ""},
                 {"Q8_CALL", q8 ? "  if (q8row != nullptr)\n    storeQ8<kI, kVec>(q8row, j, o, j < kI);\n" : ""}});
  std::string body = detail::substitute(
      p.fused ? kFusedTemplate : kSplitTemplate,
      {{"PRELUDE", prelude},
       sizes[0],
       sizes[1],
       {"Q8_PARAM", q8 ? ", unsigned char *__restrict__ q8" : ""},
       {"Q8_ROW", q8 ? "q8 != nullptr ? q8 + row * q8RowBytes<kI>() : nullptr" : "nullptr"}});
  return detail::finishSpec("silu_mul",
                            std::string(p.fused ? "llm_silu_mul_fused_i"
                                                : "llm_silu_mul_i") +
                                std::to_string(p.inter) + (q8 ? "_q8" : ""),
                            body, block, "rows*" + std::to_string(chunks));
}

} // namespace llmc

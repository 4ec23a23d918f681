//===- RmsNormKernel.cpp - llm.rms_norm and llm.add_rms_norm --------------===//
//
// One block per (row, group). Each thread keeps its strided elements of the
// group in registers (kPerThread is a compile-time constant), sums their
// squares in index order, and a shared-memory tree over the block (a power
// of two) finishes the sum: the order depends only on the sizes.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace llmc {

namespace {
// Shared by both kernels: constants and the block reduction.
constexpr const char *kCommon = R"cuda(namespace {
constexpr int kD = ${D};         // row width
constexpr int kG = ${G};         // group width: kD (plain RMSNorm) or head_dim
constexpr int kGroups = kD / kG; // groups per row
constexpr int kBlock = ${BLOCK}; // threads per block, a power of two
constexpr int kPerThread = (kG + kBlock - 1) / kBlock;
constexpr float kEps = ${EPS};

// The weight's N floats asked of the L2 (thread 0, whole 16-byte units), which the entries do
// before their wait on the kernel before (programmatic dependent launch; no kernel writes a
// weight): the weight's reads after it then wait on the L2 like those of x, not on device memory. (Read into
// registers before the wait instead, the weight stayed live across the row loop and the int8
// variant spilled at 1024 threads.)
template <int N>
__device__ __forceinline__ void prefetchWeight(const float *w) {
  if (threadIdx.x == 0 && N * 4 >= 16)
    llmcPrefetchL2(w, N * 4 / 16 * 16);
}
${REDUCTIONS}${Q8_STORE}} // namespace
)cuda";

constexpr const char *kRmsNormTemplate = R"cuda(
// y = x / sqrt(mean(x^2 over the group) + eps) * w[column in group]
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ x, const float *__restrict__ w,
         float *__restrict__ out${Q8_PARAM}, int T) {
  __shared__ float red[kBlock];
  const int tid = threadIdx.x;
  prefetchWeight<kG>(w);
  llmcGridDependencyWait();
  const long long items = (long long)T * kGroups;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    // item = row * kGroups + group, so its first column is item * kG.
    const long long base = item * kG;
    float v[kPerThread], wv[kPerThread];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int j = tid + k * kBlock;
      v[k] = j < kG ? x[base + j] : 0.0f;
      wv[k] = j < kG ? w[j] : 0.0f; // read with x: its latency hides behind theirs and the sum's
      ss += v[k] * v[k];
    }
    const float total = blockSum(ss, red);
    const float inv = 1.0f / sqrtf(total / (float)kG + kEps);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int j = tid + k * kBlock;
      if (j < kG) { // (whole warps: kG and kBlock are multiples of 32 when q8 rows are written)
        const float y = v[k] * inv * wv[k];
        out[base + j] = y;${Q8_WRITE_ITEM}
      }
    }
  }
}
)cuda";

constexpr const char *kAddRmsNormTemplate = R"cuda(
// sum = x + residual; normed = sum / sqrt(mean(sum^2) + eps) * w
// `sum` may alias `x` or `residual` (same thread reads, then writes).
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *x, const float *residual, const float *__restrict__ w,
         float *__restrict__ normed, float *sum${Q8_PARAM}, int T) {
  __shared__ float red[kBlock];
  const int tid = threadIdx.x;
  prefetchWeight<kD>(w);
  llmcGridDependencyWait();
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long base = (long long)row * kD;
    float v[kPerThread], wv[kPerThread];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int j = tid + k * kBlock;
      v[k] = 0.0f;
      wv[k] = 0.0f;
      if (j < kD) {
        v[k] = x[base + j] + residual[base + j];
        wv[k] = w[j]; // read with x: its latency hides behind theirs and the sum's
        sum[base + j] = v[k];
      }
      ss += v[k] * v[k];
    }
    const float total = blockSum(ss, red);
    const float inv = 1.0f / sqrtf(total / (float)kD + kEps);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int j = tid + k * kBlock;
      if (j < kD) { // (whole warps: kD and kBlock are multiples of 32 when q8 rows are written)
        const float y = v[k] * inv * wv[k];
        normed[base + j] = y;${Q8_WRITE_ROW}
      }
    }
  }
}
)cuda";

// The add_rms_norm a GEMV does after it (LinearParams::addRmsNorm): its last block to finish does
// the kernel above's operations, in its order, for every row. The add_rms_norm kernel's kBlock
// threads become kNormBlock "virtual" ones: warp w of this block does virtual warps w,
// w + kNormThreads / 32, ..., each exactly as that warp would (its lanes' strided elements in index
// order, the same xor tree), and the warps' sums go through the same tree: the same bits.
constexpr const char *kAddRmsNormEpilogue = R"cuda(namespace {
constexpr int kNormD = ${D};
constexpr int kNormBlock = ${BLOCK};     // the add_rms_norm kernel's threads
constexpr int kNormWarps = kNormBlock / 32;
constexpr int kNormPerThread = (kNormD + kNormBlock - 1) / kNormBlock;
constexpr int kNormThreads = ${THREADS}; // this kernel's threads per block
constexpr int kNormRealWarps = kNormThreads / 32;
constexpr int kNormVirtual = (kNormWarps + kNormRealWarps - 1) / kNormRealWarps; // a warp's virtual warps
// Virtual warps whose loads a thread has in flight together: 16 values (Llama's 8-warp
// projections: all 4 of a warp; more made ptxas spill in the 4-warp dense GEMV).
constexpr int kNormChunk = kNormPerThread >= 16 ? 1 : 16 / kNormPerThread < kNormVirtual ? 16 / kNormPerThread : kNormVirtual;
constexpr float kNormEps = ${EPS};
static_assert(kNormThreads % 32 == 0, "blocks of whole warps");

__device__ __forceinline__ float normWarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Once every block of the grid has stored its part of y: for rows 0 .. T - 1, sum = y + other,
// normed = sum / sqrt(mean(sum^2) + eps) * w (and normed's int8 rows when q8 is not null), done by
// the last block to count itself in. counter (the workspace's first word) is zero between
// launches. `sum` may alias `other` or `y` (a thread reads an element, then writes it). Not
// inlined: called once per block, and inlined its pointers stayed live across the GEMV's loops,
// where ptxas then spilled more (Llama-3-8B's int4 down projection on sm_90: 112 bytes of spill
// stores and loads against the plain GEMV's 40; as a call, the same 40, and none in here).
__device__ __noinline__ void addRmsNormLastBlock(const float *y, const float *other,
                                                    const float *__restrict__ w, float *__restrict__ normed,
                                                    float *sum, unsigned char *__restrict__ q8,
                                                    unsigned char *work, int T) {
  __shared__ float normRed[kNormWarps];
  __shared__ bool normLast;
  unsigned *counter = reinterpret_cast<unsigned *>(work);
  __threadfence(); // the block's y is visible device-wide before its count says so
  __syncthreads();
  if (threadIdx.x == 0)
    normLast = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!normLast)
    return;
  __threadfence();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = 0; row < T; ++row) {
    const long long base = (long long)row * kNormD;
    // The loads of kNormChunk virtual warps at once (compile-time slots: a trip to the L2 per
    // chunk rather than per virtual warp), then each one's sum of squares.
    for (int c = 0; c < kNormVirtual; c += kNormChunk) {
      float v[kNormChunk][kNormPerThread];
#pragma unroll
      for (int i = 0; i < kNormChunk; ++i)
#pragma unroll
        for (int k = 0; k < kNormPerThread; ++k) {
          const int vw = warp + (c + i) * kNormRealWarps, j = vw * 32 + lane + k * kNormBlock;
          v[i][k] = vw < kNormWarps && j < kNormD ? __ldcg(y + base + j) + other[base + j] : 0.0f; // (y: L2)
        }
#pragma unroll
      for (int i = 0; i < kNormChunk; ++i) {
        const int vw = warp + (c + i) * kNormRealWarps;
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < kNormPerThread; ++k) {
          const int j = vw * 32 + lane + k * kNormBlock;
          if (vw < kNormWarps && j < kNormD)
            sum[base + j] = v[i][k];
          ss += v[i][k] * v[i][k];
        }
        ss = normWarpSum(ss);
        if (lane == 0 && vw < kNormWarps)
          normRed[vw] = ss;
      }
    }
    __syncthreads();
    const float total = normWarpSum(lane < kNormWarps ? normRed[lane] : 0.0f);
    const float inv = 1.0f / sqrtf(total / (float)kNormD + kNormEps);
    // The sums read back (the thread's own stores; kept in registers across the reduction they
    // made ptxas spill), with the weight.
    for (int c = 0; c < kNormVirtual; c += kNormChunk)
#pragma unroll
      for (int i = 0; i < kNormChunk; ++i)
#pragma unroll
        for (int k = 0; k < kNormPerThread; ++k) {
          const int vw = warp + (c + i) * kNormRealWarps, j = vw * 32 + lane + k * kNormBlock;
          if (vw < kNormWarps && j < kNormD) { // (whole warps: kNormD is a multiple of 32 when q8 rows are written)
            const float out = sum[base + j] * inv * w[j];
            normed[base + j] = out;${Q8_WRITE}
          }
        }
    __syncthreads(); // normRed is rewritten for the next row
  }
  if (threadIdx.x == 0)
    *counter = 0u; // ready for the next launch
}
} // namespace
)cuda";

std::string epsTag(float eps) {
  uint32_t bits;
  std::memcpy(&bits, &eps, sizeof(bits));
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", bits);
  return buf;
}

llmrt::Status checkParams(const char *what, const RmsNormParams &p) {
  std::string name(what);
  if (p.dim <= 0 || p.dim > detail::kMaxDim)
    return llmrt::invalid_argument(name + ": width " + std::to_string(p.dim) +
                                   " outside [1, 2^24]");
  if (p.group <= 0 || p.dim % p.group != 0)
    return llmrt::invalid_argument(name + ": group " + std::to_string(p.group) +
                                   " does not divide width " +
                                   std::to_string(p.dim));
  if (!std::isfinite(p.eps) || p.eps < 0.0f)
    return llmrt::invalid_argument(name + ": eps must be finite and >= 0");
  return llmrt::ok_status();
}

std::string commonPart(const RmsNormParams &p, int block) {
  return detail::substitute(kCommon, {{"D", std::to_string(p.dim)},
                                      {"G", std::to_string(p.group)},
                                      {"BLOCK", std::to_string(block)},
                                      {"EPS", detail::floatLiteral(p.eps)},
                                      {"REDUCTIONS", detail::kBlockReductions},
                                      {"Q8_STORE", p.quantizedOutput ? detail::kQuantizeQ8Store : ""}});
}

// The int8 rows of the output (RmsNormParams::quantizedOutput): the q8 parameter and the store
// of y (column j of the row `rowExpr`).
std::vector<std::pair<std::string, std::string>> q8Parts(const RmsNormParams &p, const char *key,
                                                         const char *rowExpr) {
  if (!p.quantizedOutput)
    return {{"Q8_PARAM", ""}, {key, ""}};
  return {{"Q8_PARAM", ", unsigned char *__restrict__ q8"},
          {key, std::string("\n        storeQ8Value<kD>(q8, ") + rowExpr + ", j, y);"}};
}

llmrt::Status checkQuantizedOutput(const char *what, const RmsNormParams &p) {
  if (p.quantizedOutput && (p.group != p.dim || p.dim % 32 != 0))
    return llmrt::invalid_argument(std::string(what) + ": int8 output rows need one group over the row and a "
                                   "width that is a multiple of 32 (group " + std::to_string(p.group) +
                                   ", width " + std::to_string(p.dim) + ")");
  return llmrt::ok_status();
}
} // namespace

llmrt::StatusOr<KernelSpec> emitRmsNormKernel(const RmsNormParams &p) {
  RETURN_IF_ERROR(checkParams("rms_norm", p));
  RETURN_IF_ERROR(checkQuantizedOutput("rms_norm", p));
  int block = detail::reductionBlockSize(p.group);
  int64_t groups = p.dim / p.group;
  std::string body =
      "// llmc kernel: rms_norm, width=" + std::to_string(p.dim) +
      " group=" + std::to_string(p.group) + " eps=" +
      detail::floatLiteral(p.eps) + "\n// Launch: blockDim.x = " +
      std::to_string(block) + ", gridDim.x = T * " + std::to_string(groups) +
      " (grid-stride over (row, group)).\n" + commonPart(p, block) +
      detail::substitute(kRmsNormTemplate, q8Parts(p, "Q8_WRITE_ITEM", "item"));
  return detail::finishSpec(
      "rms_norm",
      "llm_rms_norm_d" + std::to_string(p.dim) + "_g" +
          std::to_string(p.group) + "_e" + epsTag(p.eps) + (p.quantizedOutput ? "_q8" : ""),
      body, block, groups == 1 ? "rows" : "rows*" + std::to_string(groups));
}

llmrt::StatusOr<KernelSpec> emitAddRmsNormKernel(const RmsNormParams &p) {
  RETURN_IF_ERROR(checkParams("add_rms_norm", p));
  RETURN_IF_ERROR(checkQuantizedOutput("add_rms_norm", p));
  if (p.group != p.dim)
    return llmrt::invalid_argument(
        "add_rms_norm: the weight must cover the whole row (group " +
        std::to_string(p.group) + " != width " + std::to_string(p.dim) + ")");
  int block = detail::reductionBlockSize(p.dim);
  std::string body =
      "// llmc kernel: add_rms_norm, width=" + std::to_string(p.dim) +
      " eps=" + detail::floatLiteral(p.eps) + "\n// Launch: blockDim.x = " +
      std::to_string(block) + ", gridDim.x = T (grid-stride over rows).\n" +
      commonPart(p, block) + detail::substitute(kAddRmsNormTemplate, q8Parts(p, "Q8_WRITE_ROW", "row"));
  return detail::finishSpec("add_rms_norm",
                            "llm_add_rms_norm_d" + std::to_string(p.dim) +
                                "_e" + epsTag(p.eps) + (p.quantizedOutput ? "_q8" : ""),
                            body, block, "rows");
}

llmrt::StatusOr<std::string> detail::addRmsNormEpilogueSource(const RmsNormParams &p, int threads) {
  RETURN_IF_ERROR(checkParams("add_rms_norm", p));
  RETURN_IF_ERROR(checkQuantizedOutput("add_rms_norm", p));
  if (p.group != p.dim)
    return llmrt::invalid_argument("add_rms_norm: the weight must cover the whole row (group " +
                                   std::to_string(p.group) + " != width " + std::to_string(p.dim) + ")");
  if (threads <= 0 || threads % 32 != 0 || threads > 1024)
    return llmrt::invalid_argument("add_rms_norm epilogue: " + std::to_string(threads) +
                                   " threads per block is not a whole number of warps up to 1024");
  std::string body = detail::substitute(
      kAddRmsNormEpilogue,
      {{"D", std::to_string(p.dim)},
       {"BLOCK", std::to_string(detail::reductionBlockSize(p.dim))},
       {"THREADS", std::to_string(threads)},
       {"EPS", detail::floatLiteral(p.eps)},
       {"Q8_WRITE", p.quantizedOutput ? "\n            storeQ8Value<kNormD>(q8, row, j, out);" : ""}});
  return body;
}

} // namespace llmc

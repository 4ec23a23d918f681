//===- LogitsSummaryKernel.cpp - logits rows reduced for sampling ---------===//
//
// One block per logits row writes the row's summary (runtime/sampler/
// logits_summary.h): max, log-sum-exp and the kLogitsSummaryTop largest
// entries, so the runtime copies ~0.5 KiB per row back instead of the whole
// vocabulary, and the host samples from it where that is exact.
//
// The top entries come from a radix select (four passes of an 8-bit digit
// histogram over an order-preserving key of each float) that finds the key of
// the kTop-th largest entry, then one pass that collects, in index order,
// every larger entry and the lowest-index entries equal to it; the
// kTop survivors are ranked by (logit desc, id asc). Max and the count of
// non-NaN entries, then the sum of exp(x - max) in double, are block
// reductions in a fixed tree order.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include "runtime/sampler/logits_summary.h"

#include <algorithm>

namespace llmc {

namespace {
constexpr const char *kSource = R"cuda(// llmc kernel: logits_summary, vocab=${V} top=${TOP}
// Each row of logits [L, vocab] -> its summary (runtime/sampler/logits_summary.h), ${BYTES} bytes:
// log_sum (double), max, count, num_valid, 0, ids[top], logits[top].
// Params: (const float *logits, unsigned char *out, int L)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = L (grid-stride over rows).
namespace {
constexpr int kV = ${V};
constexpr int kTop = ${TOP};
constexpr int kTake = kTop < kV ? kTop : kV;
constexpr int kBlock = ${BLOCK};
constexpr int kWarps = kBlock / 32;
constexpr long long kSummaryBytes = ${BYTES};

// Larger float <-> larger key; NaN -> 0, below every number.
__device__ __forceinline__ unsigned orderKey(float x) {
  if (x != x)
    return 0u;
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

${REDUCTIONS}} // namespace

extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ logits, unsigned char *__restrict__ out, int L) {
  __shared__ double red[kBlock];
  __shared__ unsigned hist[256];
  __shared__ int warpGt[kWarps], warpEq[kWarps];
  __shared__ int candIds[kTop];
  __shared__ float candVals[kTop];
  __shared__ unsigned shDigit;
  __shared__ int shRemaining, shGt, shEq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < L; row += gridDim.x) {
    const float *x = logits + (long long)row * kV;
    unsigned char *o = out + (long long)row * kSummaryBytes;
    // 1. The largest non-NaN entry and the number of non-NaN entries.
    double mx = (double)__uint_as_float(0xff800000u), valid = 0.0; // -inf
    for (int i = threadIdx.x; i < kV; i += kBlock) {
      const float v = x[i];
      if (v == v) {
        mx = fmax(mx, (double)v);
        valid += 1.0;
      }
    }
    mx = blockMax(mx, red);
    valid = blockSum(valid, red);
    const float fmx = (float)mx;
    // 2. sum exp(x - max) in double, as the host sums it (NaN in, NaN out).
    double sum = 0.0;
    for (int i = threadIdx.x; i < kV; i += kBlock)
      sum += exp((double)x[i] - (double)fmx);
    sum = blockSum(sum, red);

    // 3. Radix select: tau = the key of the kTake-th largest entry; `remaining` of the entries
    //    equal to tau complete the set after every entry above it.
    unsigned prefix = 0u, mask = 0u;
    int remaining = kTake;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += kBlock)
        hist[i] = 0u;
      __syncthreads();
      for (int i = threadIdx.x; i < kV; i += kBlock) {
        const unsigned k = orderKey(x[i]);
        if ((k & mask) == prefix)
          atomicAdd(&hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int cum = 0, d = 255;
        for (; d > 0; --d) {
          if (cum + (int)hist[d] >= remaining)
            break;
          cum += (int)hist[d];
        }
        shDigit = (unsigned)d;
        shRemaining = remaining - cum;
      }
      __syncthreads();
      prefix |= shDigit << shift;
      mask |= 255u << shift;
      remaining = shRemaining;
    }
    const unsigned tau = prefix;
    const int greater = kTake - remaining;
    const int ties = tau == 0u ? 0 : remaining; // tau 0: fewer valid entries than kTake
    const int count = greater + ties;

    // 4. Collect in index order: every key above tau, the first `ties` keys equal to it.
    if (threadIdx.x == 0) {
      shGt = 0;
      shEq = 0;
    }
    __syncthreads();
    for (int base = 0; base < kV; base += kBlock) {
      const int i = base + threadIdx.x;
      const unsigned k = i < kV ? orderKey(x[i]) : 0u;
      const bool gt = k > tau, eq = tau != 0u && k == tau;
      const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
      if (lane == 0) {
        warpGt[warp] = __popc(bg);
        warpEq[warp] = __popc(be);
      }
      __syncthreads();
      int g = shGt, e = shEq;
      for (int w = 0; w < warp; ++w) {
        g += warpGt[w];
        e += warpEq[w];
      }
      const unsigned below = (1u << lane) - 1u;
      g += __popc(bg & below);
      e += __popc(be & below);
      if (gt) {
        candIds[g] = i;
        candVals[g] = x[i];
      }
      if (eq && e < ties) {
        candIds[greater + e] = i;
        candVals[greater + e] = x[i];
      }
      __syncthreads();
      if (threadIdx.x == 0)
        for (int w = 0; w < kWarps; ++w) {
          shGt += warpGt[w];
          shEq += warpEq[w];
        }
      __syncthreads();
      if (shGt >= greater && shEq >= ties)
        break;
    }

    // 5. Rank the survivors by (logit desc, id asc) and write the summary.
    int *ids = reinterpret_cast<int *>(o + 24);
    float *vals = reinterpret_cast<float *>(o + 24 + 4 * kTop);
    for (int t = threadIdx.x; t < kTop; t += kBlock) {
      if (t < count) {
        const float v = candVals[t];
        const int id = candIds[t];
        int rank = 0;
        for (int j = 0; j < count; ++j) {
          const float w = candVals[j];
          rank += (w > v || (w == v && candIds[j] < id)) ? 1 : 0;
        }
        ids[rank] = id;
        vals[rank] = v;
      } else {
        ids[t] = -1;
        vals[t] = 0.0f;
      }
    }
    if (threadIdx.x == 0) {
      *reinterpret_cast<double *>(o) = log(sum);
      *reinterpret_cast<float *>(o + 8) = fmx;
      *reinterpret_cast<int *>(o + 12) = count;
      *reinterpret_cast<int *>(o + 16) = (int)valid;
      *reinterpret_cast<int *>(o + 20) = 0;
    }
    __syncthreads(); // the next row reuses the candidates
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitLogitsSummaryKernel(int64_t vocab) {
  if (vocab <= 0 || vocab > (int64_t(1) << 30)) // index + block stays in int
    return llmrt::invalid_argument("logits_summary: vocab size " + std::to_string(vocab) +
                                   " outside [1, 2^30]");
  // At most 512 threads: 1024 caps registers at 64 per thread, where sm_86 / sm_89 spilled.
  const int block = std::clamp(detail::reductionBlockSize(vocab), 64, 512);
  std::string body = detail::substitute(
      kSource, {{"V", std::to_string(vocab)},
                {"TOP", std::to_string(llmrt::kLogitsSummaryTop)},
                {"BLOCK", std::to_string(block)},
                {"BYTES", std::to_string(sizeof(llmrt::LogitsSummary))},
                {"REDUCTIONS", detail::kBlockReductions}});
  return detail::finishSpec("logits_summary", "llm_logits_summary_v" + std::to_string(vocab), body, block,
                            "rows");
}

} // namespace llmc

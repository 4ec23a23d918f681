//===- SamplingKernel.cpp - the sampler's draws on the device -------------===//
//
// A token drawn from a row of logits on the GPU, the host sampler's stages 4-8
// (runtime/sampler/sampler.h) for draws without penalties, bias or logits
// processors, so a decode step at a temperature copies back a token instead of
// the row. The definition makes that exact: a token's probability is
// sampling_exp's float operations (written here with the _rn intrinsics, which
// NVRTC does not contract), its mass an integer, masses summed exactly in any
// order, the draw the first token in id order past r = floor(u53 x total /
// 2^53). The kernel finds the host's sets without sorting:
//   * top-k: the k-th largest probability by a radix select over its bits (the
//     order of positive floats), counting with warp-aggregated shared atomics;
//     of the entries equal to it the lowest ids, up to k;
//   * top-p: the same select weighing entries by their mass (the lanes of a
//     bin add theirs first, in two 20-bit halves by redux.sync, so the shared
//     64-bit atomics see one add per bin and warp): the probability at which
//     the (prob desc, id asc) prefix's mass first reaches the target, and how
//     many of its equals (equal probabilities, equal masses) that takes;
//   * the j-th of a set in id order, and the draw: each thread sums a
//     contiguous chunk of ids, a block scan of the sums, the thread whose chunk
//     holds the target walks it.
// A block does one draw: up to 14 passes over its row (in the L2 after the
// logits GEMV wrote it), the probabilities recomputed in each.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include "runtime/sampler/logits_summary.h"
#include "runtime/sampler/sampler.h"

#include <cstddef>

namespace llmc {

namespace {

static_assert(sizeof(llmrt::DeviceDraw) == 32 && offsetof(llmrt::DeviceDraw, row) == 0 &&
                  offsetof(llmrt::DeviceDraw, inv_t) == 4 && offsetof(llmrt::DeviceDraw, top_p) == 8 &&
                  offsetof(llmrt::DeviceDraw, min_p) == 12 && offsetof(llmrt::DeviceDraw, top_k) == 16 &&
                  offsetof(llmrt::DeviceDraw, u53) == 24,
              "the kernel reads this layout");

constexpr const char *kSource = R"cuda(// llmc kernel: sample, vocab=${V}
// Each of n draws (runtime/sampler/sampler.h DeviceDraw, 32 bytes: int row, float inv_t, top_p,
// min_p, int top_k, 0, unsigned long long u53) -> tokens[2 d] its token (-1: nothing to draw, every
// entry of its row masked or one infinite) and tokens[2 d + 1] the token's logit's bits.
// Params: (const float *logits, const unsigned char *summaries, const unsigned char *draws,
//          int *tokens, int n); summaries: the rows' (logits_summary.h, their max at byte 8).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = n (grid-stride).
namespace {
constexpr int kV = ${V};
constexpr int kBlock = ${BLOCK};
constexpr int kWarps = kBlock / 32;
constexpr int kChunk = (kV + kBlock - 1) / kBlock; // ids of a thread in the id-order passes
constexpr long long kSummaryBytes = ${BYTES};
typedef unsigned long long u64;

// sampling_exp (runtime/sampler/sampler.cc), operation for operation.
__device__ __forceinline__ float samplingExp(float x) {
  if (!(x > -87.0f))
    return 0.0f;
  const float k = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504f), 12582912.0f), 12582912.0f);
  const float r = __fadd_rn(__fsub_rn(x, __fmul_rn(k, 0.693359375f)), __fmul_rn(k, 2.12194440e-4f));
  float q = 1.98412698e-4f;
  q = __fadd_rn(__fmul_rn(q, r), 1.38888889e-3f);
  q = __fadd_rn(__fmul_rn(q, r), 8.33333333e-3f);
  q = __fadd_rn(__fmul_rn(q, r), 4.16666667e-2f);
  q = __fadd_rn(__fmul_rn(q, r), 1.66666667e-1f);
  q = __fadd_rn(__fmul_rn(q, r), 0.5f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  return __fmul_rn(q, __uint_as_float((unsigned)((int)k + 127) << 23));
}
// sampling_mass: floor(p x 2^40) (exact: p has 24 bits).
__device__ __forceinline__ u64 massOf(float p) { return (u64)((double)p * 1099511627776.0); }

struct Draw {
  const float *x;
  float invT, mxs, thr;
  // An entry's probability, and whether it is a candidate (mass > 0, not below min-p).
  __device__ __forceinline__ float prob(int i) const { return samplingExp(__fsub_rn(__fmul_rn(x[i], invT), mxs)); }
  __device__ __forceinline__ bool cand(float p) const { return massOf(p) > 0ull && !(p < thr); }
};

struct Shared {
  u64 hist[256];
  u64 warpSum[kWarps];
  unsigned digit;
  u64 above;
  int found;
};

// Sum over the block, to every thread (a fixed tree: exact for integers anyway).
__device__ u64 blockSum(u64 v, Shared &sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0)
    sh.warpSum[warp] = v;
  __syncthreads();
  u64 t = 0;
  for (int w = 0; w < kWarps; ++w)
    t += sh.warpSum[w];
  __syncthreads();
  return t;
}

// The sum of v over lanes 0 .. this lane of the warp.
__device__ __forceinline__ u64 warpInclusiveScan(u64 v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o)
      v += t;
  }
  return v;
}

// The sums of the threads before this one (thread order), and the block's total.
__device__ u64 blockExclusiveScan(u64 v, u64 &total, Shared &sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u64 inc = warpInclusiveScan(v);
  if (lane == 31)
    sh.warpSum[warp] = inc;
  __syncthreads();
  u64 before = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp)
      before += sh.warpSum[w];
    total += sh.warpSum[w];
  }
  __syncthreads();
  return before + inc - v;
}

// The first id, in id order, whose cumulative weight (weight(i), 0 outside the set) exceeds
// target (< the total): each thread's contiguous chunk summed, scanned, walked by its holder.
template <class Weight> __device__ int findInIdOrder(Weight weight, u64 target, Shared &sh) {
  const int lo = (int)threadIdx.x * kChunk, hi = lo + kChunk < kV ? lo + kChunk : kV;
  if (threadIdx.x == 0)
    sh.found = -1; // (a target at or past the total: none)
  u64 s = 0;
  for (int i = lo; i < hi; ++i)
    s += weight(i);
  u64 total;
  const u64 before = blockExclusiveScan(s, total, sh);
  if (before <= target && target < before + s) {
    u64 cum = before;
    for (int i = lo; i < hi; ++i) {
      cum += weight(i);
      if (cum > target) {
        sh.found = i;
        break;
      }
    }
  }
  __syncthreads();
  const int found = sh.found;
  __syncthreads();
  return found;
}

// Radix select over the keys (a probability's bits: larger key, larger probability) of the
// entries with in(i): the largest key K whose entries at or above it weigh enough,
// reaches(weight of keys >= K); `above` gets the weight of the keys above K. kMass: the weight
// is the entry's mass, else 1.
template <bool kMass, class In, class Reaches>
__device__ unsigned radixSelect(const Draw &d, In in, Reaches reaches, u64 &above, Shared &sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned prefix = 0u, mask = 0u;
  u64 abv = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kBlock)
      sh.hist[i] = 0ull;
    __syncthreads();
    for (int base = 0; base < kV; base += kBlock) {
      const int i = base + (int)threadIdx.x;
      const float p = i < kV ? d.prob(i) : 0.0f;
      const unsigned key = __float_as_uint(p);
      const bool take = i < kV && (key & mask) == prefix && in(i, p);
      if (!__any_sync(0xffffffffu, take)) // (after the first digit, most warps: the bins are narrow)
        continue;
      const unsigned bin = take ? (key >> shift) & 255u : 256u; // 256: none
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      u64 w;
      if (kMass) {
        const u64 m = take ? massOf(p) : 0ull; // below 2^41: two halves of at most 21 bits
        const unsigned hi = __reduce_add_sync(peers, (unsigned)(m >> 20)),
                       lo = __reduce_add_sync(peers, (unsigned)(m & 0xfffffu));
        w = ((u64)hi << 20) + lo;
      } else {
        w = (u64)__popc(peers);
      }
      if (bin < 256u && (peers & ((1u << lane) - 1u)) == 0u) // the lowest lane of its peers
        atomicAdd(&sh.hist[bin], w);
    }
    __syncthreads();
    // Warp 0: the bins in descending order, 8 per lane; a shuffle scan of the lanes' sums finds
    // the lane of the largest digit that reaches, which walks its 8.
    if (warp == 0) {
      u64 c[8], s = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s += c[j] = sh.hist[255 - 8 * lane - j];
      const u64 inc = warpInclusiveScan(s);
      const unsigned hit = __ballot_sync(0xffffffffu, reaches(abv + inc));
      const int at = hit ? __popc((hit & (0u - hit)) - 1u) : 31; // (always hit: the set reaches)
      if (lane == at) {
        u64 cum = abv + inc - s;
        int pick = 7;
        bool found = false;
#pragma unroll
        for (int j = 0; j < 7; ++j) {
          if (!found && reaches(cum + c[j])) {
            found = true;
            pick = j;
          }
          if (!found)
            cum += c[j];
        }
        sh.digit = (unsigned)(255 - 8 * lane - pick);
        sh.above = cum;
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
    abv = sh.above;
    __syncthreads();
  }
  above = abv;
  return prefix;
}
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ logits, const unsigned char *__restrict__ summaries,
         const unsigned char *__restrict__ draws, int *__restrict__ tokens, int n) {
  __shared__ Shared sh;
  for (int di = blockIdx.x; di < n; di += gridDim.x) {
    const unsigned char *rec = draws + 32ll * di;
    const int row = *reinterpret_cast<const int *>(rec);
    const float invT = *reinterpret_cast<const float *>(rec + 4);
    const float topP = *reinterpret_cast<const float *>(rec + 8);
    const float minP = *reinterpret_cast<const float *>(rec + 12);
    const int topK = *reinterpret_cast<const int *>(rec + 16);
    const u64 u53 = *reinterpret_cast<const u64 *>(rec + 24);
    const float mx = *reinterpret_cast<const float *>(summaries + kSummaryBytes * row + 8);
    if (!(mx > __uint_as_float(0xff800000u))) { // no entry but NaN or -inf: the host says so
      if (threadIdx.x == 0)
        tokens[2 * di] = tokens[2 * di + 1] = -1;
      continue;
    }
    Draw d;
    d.x = logits + (long long)kV * row;
    d.invT = invT;
    d.mxs = __fmul_rn(mx, invT);
    d.thr = __fmul_rn(minP, samplingExp(__fsub_rn(__fmul_rn(mx, invT), d.mxs))); // min_p x the max's (1)
    // 6. top-k: of more candidates than k, the k largest (prob desc, id asc): keys above tauK,
    // and of those equal to it the ids up to idK.
    unsigned tauK = 0u;
    int idK = kV;
    if (topK > 0) {
      u64 count = 0;
      for (int i = threadIdx.x; i < kV; i += kBlock)
        count += d.cand(d.prob(i)) ? 1ull : 0ull;
      count = blockSum(count, sh);
      if ((u64)topK < count) {
        u64 above;
        tauK = radixSelect<false>(d, [&](int, float p) { return d.cand(p); },
                                  [&](u64 c) { return c >= (u64)topK; }, above, sh);
        idK = findInIdOrder([&](int i) -> u64 {
          const float p = d.prob(i);
          return d.cand(p) && __float_as_uint(p) == tauK ? 1ull : 0ull;
        }, (u64)topK - above - 1ull, sh);
      }
    }
    auto inK = [&](int i, float p) {
      const unsigned key = __float_as_uint(p);
      return d.cand(p) && (key > tauK || (key == tauK && i <= idK));
    };
    // 7. top-p: the smallest (prob desc, id asc) prefix whose mass reaches top_p x the total:
    // keys above tauP, and of those equal to it the ids up to idP.
    unsigned tauP = 0u;
    int idP = kV;
    if (topP < 1.0f) {
      u64 total = 0;
      for (int i = threadIdx.x; i < kV; i += kBlock) {
        const float p = d.prob(i);
        total += inK(i, p) ? massOf(p) : 0ull;
      }
      total = blockSum(total, sh);
      const double target = (double)topP * (double)total;
      u64 above;
      tauP = radixSelect<true>(d, inK, [&](u64 m) { return (double)m >= target; }, above, sh);
      // Its equals have one mass each: the fewest j of them (>= 1) that reach the target.
      const u64 m = massOf(__uint_as_float(tauP));
      u64 j = (u64)((target - (double)above) / (double)m);
      while (j > 1ull && (double)(above + (j - 1ull) * m) >= target)
        --j;
      while (j < 1ull || (double)(above + j * m) < target)
        ++j;
      idP = findInIdOrder([&](int i) -> u64 {
        const float p = d.prob(i);
        return inK(i, p) && __float_as_uint(p) == tauP ? 1ull : 0ull;
      }, j - 1ull, sh);
    }
    // 8. the draw, in id order.
    auto mass = [&](int i) -> u64 {
      const float p = d.prob(i);
      const unsigned key = __float_as_uint(p);
      return inK(i, p) && (key > tauP || (key == tauP && i <= idP)) ? massOf(p) : 0ull;
    };
    u64 total = 0;
    for (int i = threadIdx.x; i < kV; i += kBlock)
      total += mass(i);
    total = blockSum(total, sh);
    const u64 r = (__umul64hi(u53, total) << 11) | ((u53 * total) >> 53);
    const int token = findInIdOrder(mass, r, sh);
    if (threadIdx.x == 0) {
      tokens[2 * di] = token;
      tokens[2 * di + 1] = token >= 0 ? __float_as_int(d.x[token]) : -1;
    }
  }
}
)cuda";

} // namespace

llmrt::StatusOr<KernelSpec> emitSamplingKernel(int64_t vocab) {
  if (vocab <= 0 || vocab > kMaxLogitsSummaryVocab)
    return llmrt::invalid_argument("sample: vocab size " + std::to_string(vocab) + " outside [1, " +
                                   std::to_string(kMaxLogitsSummaryVocab) + "]");
  const int block = 1024;
  std::string body = detail::substitute(kSource, {{"V", std::to_string(vocab)},
                                                  {"BLOCK", std::to_string(block)},
                                                  {"BYTES", std::to_string(sizeof(llmrt::LogitsSummary))}});
  return detail::finishSpec("sample", "llm_sample_v" + std::to_string(vocab), body, block, "rows");
}

} // namespace llmc

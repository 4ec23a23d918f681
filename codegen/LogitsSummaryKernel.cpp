//===- LogitsSummaryKernel.cpp - logits rows reduced for sampling ---------===//
//
// Each logits row becomes its summary (runtime/sampler/logits_summary.h):
// max, log-sum-exp and the kLogitsSummaryTop largest entries, so the runtime
// copies ~0.5 KiB per row back instead of the whole vocabulary, and the host
// samples from it where that is exact.
//
// The top entries come from a radix select (four passes of an 8-bit digit
// histogram over an order-preserving key of each float) that finds the key of
// the kTop-th largest entry, then one pass that collects, in index order,
// every larger entry and the lowest-index entries equal to it; the
// kTop survivors are ranked by (logit desc, id asc). Max and the count of
// non-NaN entries, then the sum of exp(x - max) in double, are block
// reductions in a fixed tree order.
//
// Steps of up to kSplitRows rows (decode batches) cut each row into kParts
// parts, a block each (one block per row would leave a batch-1 step on one
// multiprocessor for the whole vocabulary): a part writes its own summary
// (its max, count of non-NaN entries, sum of exp(x - its max) and its top
// entries) to the kernel's workspace, and the row's last part to finish
// (a counter per row, which it resets) merges them: the max of the maxes, the
// sums rescaled to it and added in part order, and the same radix select over
// the parts' top entries, laid out in part order (so in id order among equal
// values). The result is the one-block summary's: the same max, counts, ids
// and logits; log_sum summed in another order.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include "runtime/sampler/logits_summary.h"

#include <algorithm>

namespace llmc {

namespace {
// Rows are split into parts of at least kMinPartLen entries, at most kMaxParts, in steps of up
// to kSplitRows rows (the workspace holds a part's summary per (row, part) of those).
constexpr int64_t kMinPartLen = 2048;
constexpr int64_t kMaxParts = 32;
constexpr int64_t kSplitRows = 32;

constexpr const char *kSource = R"cuda(// llmc kernel: logits_summary, vocab=${V} top=${TOP} parts=${PARTS}
// Each row of logits [L, vocab] -> its summary (runtime/sampler/logits_summary.h), ${BYTES} bytes:
// log_sum (double), max, count, num_valid, 0, ids[top], logits[top].
// Params: (const float *logits, unsigned char *out,${WORK_DOC} int L)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = L x parts when L <= ${SPLIT_ROWS}, else L (grid-stride).
namespace {
constexpr int kV = ${V};
constexpr int kTop = ${TOP};
constexpr int kBlock = ${BLOCK};
constexpr int kWarps = kBlock / 32;
constexpr long long kSummaryBytes = ${BYTES};
constexpr int kParts = ${PARTS};
constexpr int kSplitRows = ${SPLIT_ROWS};
constexpr int kPartLen = (kV + kParts - 1) / kParts;
constexpr long long kCountersBytes = ${COUNTERS_BYTES};

// Larger float <-> larger key; NaN -> 0, below every number.
__device__ __forceinline__ unsigned orderKey(float x) {
  if (x != x)
    return 0u;
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

${REDUCTIONS}
struct Shared {
  double red[kBlock];
  unsigned hist[256];
  int warpGt[kWarps], warpEq[kWarps];
  int candIds[kTop];
  float candVals[kTop];
  unsigned digit;
  int remaining, gt, eq;
  bool last;
};

// The kTake = min(kTop, n) largest non-NaN of entries 0 .. n - 1 (value(i), id(i)); among equal
// values the lower positions first. Ranked by (value desc, id asc) into ids / vals (kTop slots:
// -1 and 0 past the count); returns the count (fewer when fewer are not NaN).
template <class Value, class Id>
__device__ int selectTop(int n, Value value, Id id, Shared &sh, int *ids, float *vals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int take = kTop < n ? kTop : n;
  // Radix select: tau = the key of the take-th largest entry; `remaining` of the entries equal
  // to tau complete the set after every entry above it.
  unsigned prefix = 0u, mask = 0u;
  int remaining = take;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kBlock)
      sh.hist[i] = 0u;
    __syncthreads();
    // Warp-aggregated: the lanes counting into one bin add their number once (logits crowd into
    // few bins of the first digit, where one atomic per entry would serialize on one address).
    for (int base = 0; base < n; base += kBlock) {
      const int i = base + (int)threadIdx.x;
      const unsigned k = i < n ? orderKey(value(i)) : 0u;
      const unsigned bin = i < n && (k & mask) == prefix ? (k >> shift) & 255u : 256u; // 256: none
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256u && (peers & ((1u << lane) - 1u)) == 0u) // the lowest lane of its peers
        atomicAdd(&sh.hist[bin], (unsigned)__popc(peers));
    }
    __syncthreads();
    // The digit: the largest d whose entries with a digit >= d number `remaining` or more (0 when
    // none: fewer valid entries), and `remaining` less those above it. Warp 0 holds the 256 bins
    // in descending order, 8 per lane; a shuffle scan of the lanes' sums finds the lane holding
    // it, which walks its 8 bins (not one thread walking up to 255).
    if (warp == 0) {
      int c[8], s = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s += c[j] = (int)sh.hist[255 - 8 * lane - j];
      int inc = s; // entries in the bins of lanes 0 .. lane
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
          inc += t;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, inc >= remaining);
      const int at = hit ? __popc((hit & (0u - hit)) - 1u) : 31; // the lowest such lane
      if (lane == at) {
        int cum = inc - s, j = 0;
        for (; j < 7; ++j) { // (bin 0, j = 7 of lane 31, is taken without the test)
          if (cum + c[j] >= remaining)
            break;
          cum += c[j];
        }
        sh.digit = (unsigned)(255 - 8 * lane - j);
        sh.remaining = remaining - cum;
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
    remaining = sh.remaining;
  }
  const unsigned tau = prefix;
  const int greater = take - remaining;
  const int ties = tau == 0u ? 0 : remaining; // tau 0: fewer valid entries than take
  const int count = greater + ties;

  // Collect in position order: every key above tau, the first `ties` keys equal to it.
  if (threadIdx.x == 0) {
    sh.gt = 0;
    sh.eq = 0;
  }
  __syncthreads();
  for (int base = 0; base < n; base += kBlock) {
    const int i = base + threadIdx.x;
    const float v = i < n ? value(i) : 0.0f;
    const unsigned k = i < n ? orderKey(v) : 0u;
    const bool gt = k > tau, eq = tau != 0u && k == tau;
    const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) {
      sh.warpGt[warp] = __popc(bg);
      sh.warpEq[warp] = __popc(be);
    }
    __syncthreads();
    int g = sh.gt, e = sh.eq;
    for (int w = 0; w < warp; ++w) {
      g += sh.warpGt[w];
      e += sh.warpEq[w];
    }
    const unsigned below = (1u << lane) - 1u;
    g += __popc(bg & below);
    e += __popc(be & below);
    if (gt) {
      sh.candIds[g] = id(i);
      sh.candVals[g] = v;
    }
    if (eq && e < ties) {
      sh.candIds[greater + e] = id(i);
      sh.candVals[greater + e] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < kWarps; ++w) {
        sh.gt += sh.warpGt[w];
        sh.eq += sh.warpEq[w];
      }
    __syncthreads();
    if (sh.gt >= greater && sh.eq >= ties)
      break;
  }

  // Rank the survivors by (value desc, id asc).
  for (int t = threadIdx.x; t < kTop; t += kBlock) {
    if (t < count) {
      const float v = sh.candVals[t];
      const int me = sh.candIds[t];
      int rank = 0;
      for (int j = 0; j < count; ++j) {
        const float w = sh.candVals[j];
        rank += (w > v || (w == v && sh.candIds[j] < me)) ? 1 : 0;
      }
      ids[rank] = me;
      vals[rank] = v;
    } else {
      ids[t] = -1;
      vals[t] = 0.0f;
    }
  }
  __syncthreads(); // the candidates are reused
  return count;
}

__device__ __forceinline__ int *idsOf(unsigned char *s) { return reinterpret_cast<int *>(s + 24); }
__device__ __forceinline__ float *valsOf(unsigned char *s) { return reinterpret_cast<float *>(s + 24 + 4 * kTop); }
__device__ __forceinline__ void writeHead(unsigned char *s, double sum, float mx, int count, int valid) {
  *reinterpret_cast<double *>(s) = sum;
  *reinterpret_cast<float *>(s + 8) = mx;
  *reinterpret_cast<int *>(s + 12) = count;
  *reinterpret_cast<int *>(s + 16) = valid;
  *reinterpret_cast<int *>(s + 20) = 0;
}
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ logits, unsigned char *__restrict__ out,${WORK_PARAM} int L) {
  __shared__ Shared sh;${NO_WORK}
  const bool split = kParts > 1 && L <= kSplitRows;
  const int parts = split ? kParts : 1;
  int *counters = reinterpret_cast<int *>(work);
  unsigned char *partials = work + kCountersBytes;
  for (long long item = blockIdx.x; item < (long long)L * parts; item += gridDim.x) {
    const int row = (int)(item / parts), part = (int)(item % parts);
    const int lo = part * kPartLen; // part 0 when not split
    const int n = split ? (kV - lo < kPartLen ? kV - lo : kPartLen) : kV;
    const float *x = logits + (long long)row * kV + lo;
    unsigned char *o = split ? partials + ((long long)row * kParts + part) * kSummaryBytes
                             : out + (long long)row * kSummaryBytes;
    // 1. The largest non-NaN entry and the number of non-NaN entries.
    double mx = (double)__uint_as_float(0xff800000u), valid = 0.0; // -inf
    for (int i = threadIdx.x; i < n; i += kBlock) {
      const float v = x[i];
      if (v == v) {
        mx = fmax(mx, (double)v);
        valid += 1.0;
      }
    }
    mx = blockMax(mx, sh.red);
    valid = blockSum(valid, sh.red);
    const float fmx = (float)mx;
    // 2. sum exp(x - max) in double, as the host sums it (NaN in, NaN out).
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += kBlock)
      sum += exp((double)x[i] - (double)fmx);
    sum = blockSum(sum, sh.red);
    // 3. The top entries (ids: positions in the row).
    const int count = selectTop(
        n, [&](int i) { return x[i]; }, [&](int i) { return lo + i; }, sh, idsOf(o), valsOf(o));
    if (threadIdx.x == 0)
      writeHead(o, split ? sum : log(sum), fmx, count, (int)valid);
    if (!split)
      continue;

    // 4. The row's last part to finish merges the parts' summaries.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
      sh.last = atomicAdd(&counters[row], 1) == kParts - 1;
    __syncthreads();
    if (!sh.last)
      continue;
    __threadfence();
    unsigned char *ps = partials + (long long)row * kParts * kSummaryBytes;
    auto head = [&](int p) { return ps + (long long)p * kSummaryBytes; };
    double m = (double)__uint_as_float(0xff800000u), v = 0.0;
    for (int p = threadIdx.x; p < kParts; p += kBlock) {
      m = fmax(m, (double)*reinterpret_cast<const float *>(head(p) + 8));
      v += (double)*reinterpret_cast<const int *>(head(p) + 16);
    }
    m = blockMax(m, sh.red);
    v = blockSum(v, sh.red);
    const float fm = (float)m;
    // A part's sum rescaled to the row's max; a part of -inf only (and no NaN) adds exactly 0
    // below a larger max (its own sum, exp(-inf - -inf), is NaN).
    double total = 0.0;
    for (int p = threadIdx.x; p < kParts; p += kBlock) {
      const float pm = *reinterpret_cast<const float *>(head(p) + 8);
      const int len = kV - p * kPartLen < kPartLen ? kV - p * kPartLen : kPartLen;
      const bool emptyTail = pm == __uint_as_float(0xff800000u) &&
                             *reinterpret_cast<const int *>(head(p) + 16) == len && fm > pm;
      if (!emptyTail)
        total += *reinterpret_cast<const double *>(head(p)) * exp((double)pm - (double)fm);
    }
    total = blockSum(total, sh.red);
    unsigned char *f = out + (long long)row * kSummaryBytes;
    const int merged = selectTop(
        kParts * kTop,
        [&](int i) {
          const unsigned char *h = head(i / kTop);
          return i % kTop < *reinterpret_cast<const int *>(h + 12)
                     ? reinterpret_cast<const float *>(h + 24 + 4 * kTop)[i % kTop]
                     : __uint_as_float(0x7fc00000u); // past the part's count: NaN, never taken
        },
        [&](int i) { return reinterpret_cast<const int *>(head(i / kTop) + 24)[i % kTop]; }, sh, idsOf(f),
        valsOf(f));
    if (threadIdx.x == 0) {
      writeHead(f, log(total), fm, merged, (int)v);
      counters[row] = 0; // ready for the next launch
    }
    __syncthreads();
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitLogitsSummaryKernel(int64_t vocab) {
  if (vocab <= 0 || vocab > (int64_t(1) << 30)) // index + block stays in int
    return llmrt::invalid_argument("logits_summary: vocab size " + std::to_string(vocab) +
                                   " outside [1, 2^30]");
  // At most 512 threads: 1024 caps registers at 64 per thread, where sm_86 / sm_89 spilled.
  // Split rows: parts of at least kMinPartLen entries, at most kMaxParts of them.
  const int64_t parts = std::clamp<int64_t>(vocab / kMinPartLen, 1, kMaxParts);
  const int block = std::clamp(detail::reductionBlockSize(parts > 1 ? (vocab + parts - 1) / parts : vocab), 64, 512);
  const int64_t countersBytes = (kSplitRows * 4 + 255) / 256 * 256;
  const int64_t summaryBytes = sizeof(llmrt::LogitsSummary);
  std::string body = detail::substitute(
      kSource, {{"V", std::to_string(vocab)},
                {"TOP", std::to_string(llmrt::kLogitsSummaryTop)},
                {"BLOCK", std::to_string(block)},
                {"BYTES", std::to_string(summaryBytes)},
                {"PARTS", std::to_string(parts)},
                {"SPLIT_ROWS", std::to_string(kSplitRows)},
                {"COUNTERS_BYTES", std::to_string(countersBytes)},
                {"REDUCTIONS", detail::kBlockReductions},
                // A workspace parameter only when rows split (KernelSpec.h: kernels without a
                // workspace take none, as plans before split summaries have it).
                {"WORK_PARAM", parts > 1 ? " unsigned char *__restrict__ work," : ""},
                {"WORK_DOC", parts > 1 ? " unsigned char *work," : ""},
                {"NO_WORK", parts > 1 ? "" : "\n  unsigned char *const work = nullptr; // (kParts == 1: never split)"}});
  KernelSpec spec = detail::finishSpec("logits_summary", "llm_logits_summary_v" + std::to_string(vocab), body, block,
                                       parts > 1 ? "rows x" + std::to_string(parts) + " when rows<=" +
                                                       std::to_string(kSplitRows)
                                                 : std::string("rows"));
  if (parts > 1)
    spec.workspaceBytes = static_cast<uint64_t>(countersBytes + kSplitRows * parts * summaryBytes);
  return spec;
}

} // namespace llmc

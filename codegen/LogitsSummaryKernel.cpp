//===- LogitsSummaryKernel.cpp - logits rows reduced for sampling ---------===//
//
// Each logits row becomes its summary (runtime/sampler/logits_summary.h):
// max, log-sum-exp and the kLogitsSummaryTop largest entries, so the runtime
// copies ~0.5 KiB per row back instead of the whole vocabulary, and the host
// samples from it where that is exact.
//
// A row is cut into kParts parts of at most kBlock x kPer entries (one part
// when the vocabulary is small). A block summarizes a part from its registers
// (each thread loads its kPer entries once): its max and count of non-NaN
// entries, the sum of exp(x - its max) in double (block reductions in a fixed
// tree order) and its top entries. Those come from a radix select over an
// order-preserving key of each float (up to four passes of an 8-bit digit
// histogram; it stops early once the entries at or above a digit's bin are
// exactly the ones taken) that finds the key of the kTop-th largest entry, then
// one collection, in position order, of every larger entry and the
// lowest-position entries equal to it (a scan of the warps' ballot counts), and
// a ranking of the survivors by (logit desc, id asc), kBlock / kTop threads per
// survivor. A part being a few thousand entries, a block's time is its barriers:
// one per reduction (two values each) and per radix pass (three histograms, every
// warp finding the digit itself), three for the collection.
//
// Steps of up to kSplitRows rows (decode batches) give each part its own block
// (one block per row would leave a batch-1 step on one multiprocessor for the
// whole vocabulary): a part writes its summary (its max, count, sum of
// exp(x - its max) and top entries) to the kernel's workspace, and the row's
// last part to finish (a counter per row, which it resets) merges them: the max
// of the maxes, the sums rescaled to it and added in part order, and the same
// selection over the parts' top entries, laid out in part order (so in id order
// among equal values). Larger steps keep a block per row, which summarizes its
// parts one after another into shared memory, then merges them the same way.
// The result is the host's summary: the same max, counts, ids and logits;
// log_sum summed in another order.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include "runtime/sampler/logits_summary.h"

#include <algorithm>

namespace llmc {

namespace {
// Rows are split into parts of at least kMinPartLen entries, at most kMaxParts, in steps of up
// to kSplitRows rows (the workspace holds a part's summary per (row, part) of those). A thread
// holds at most kMaxPer entries of a part (blocks of up to kMaxBlock threads): rows longer than
// kMaxParts such parts have more parts, up to kMaxLogitsSummaryVocab entries (the merge's
// kParts x kTop entries then fill kMaxPer slots of every thread of a kMaxBlock block).
constexpr int64_t kMinPartLen = 2048;
constexpr int64_t kMaxParts = 32;
constexpr int64_t kSplitRows = 32;
constexpr int64_t kMaxBlock = 512; // 1024 caps registers at 64 per thread, where sm_86 / sm_89 spilled
constexpr int64_t kMaxPer = 16;
static_assert(kMaxLogitsSummaryVocab % (kMaxBlock * kMaxPer) == 0 &&
                  kMaxLogitsSummaryVocab / (kMaxBlock * kMaxPer) * llmrt::kLogitsSummaryTop <= kMaxBlock * kMaxPer,
              "the merge of the most parts fits the threads' slots");
static_assert(llmrt::kLogitsSummaryTop == 64, "blocks of 64 to 512 threads: whole groups of rank threads");

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
// Entries a thread holds: of a part, and of the parts' top entries when they are merged.
constexpr int kPer = (kPartLen + kBlock - 1) / kBlock;
constexpr int kMergePer = kParts > 1 ? (kParts * kTop + kBlock - 1) / kBlock : 1;
constexpr int kMaxPer = kPer > kMergePer ? kPer : kMergePer;
// Threads that rank one survivor of a selection together (a power of two: groups inside a warp).
constexpr int kRankThreads = kBlock / kTop;
static_assert(kBlock % kTop == 0 && kRankThreads <= 32 && (kRankThreads & (kRankThreads - 1)) == 0,
              "kTop groups of rank threads, each inside a warp");

// Larger float <-> larger key; NaN -> 0, below every number.
__device__ __forceinline__ unsigned orderKey(float x) {
  if (x != x)
    return 0u;
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct Shared {
  double red[2][2][kWarps]; // two reductions' buffers (reduceOnce)
  unsigned hist[3][256];    // a radix pass's histogram, the next one's (cleared), the one before
  // The warps' counts of collected entries per slot, then the exclusive scan of them.
  int gtAt[kMaxPer * kWarps], eqAt[kMaxPer * kWarps];
  int candIds[kTop];
  float candVals[kTop];
  bool last;
};

// mx and sum combined over the block (their max and their sum) with one barrier, each as the
// shared blockReduce combines a value (an xor tree in each warp, the same tree over the warps'
// results), through buf, which the block must not write again before a later barrier.
__device__ __forceinline__ void reduceOnce(double &mx, double &sum, double (&buf)[2][kWarps]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  if (lane == 0) {
    buf[0][threadIdx.x >> 5] = mx;
    buf[1][threadIdx.x >> 5] = sum;
  }
  __syncthreads();
  mx = lane < kWarps ? buf[0][lane] : buf[0][0];
  sum = lane < kWarps ? buf[1][lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
}

// Warp 0: a[0 .. kM) replaced by its exclusive prefix sums (each lane sums kM / 32 consecutive
// entries, then a shuffle scan of the lanes' sums).
template <int kM>
__device__ __forceinline__ void warpExclusiveScan(int *a) {
  constexpr int kEach = (kM + 31) / 32;
  const int lane = threadIdx.x & 31;
  int c[kEach], s = 0;
#pragma unroll
  for (int j = 0; j < kEach; ++j) {
    const int i = lane * kEach + j;
    c[j] = i < kM ? a[i] : 0;
    s += c[j];
  }
  int inc = s;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o)
      inc += t;
  }
  int run = inc - s;
#pragma unroll
  for (int j = 0; j < kEach; ++j) {
    const int i = lane * kEach + j;
    if (i < kM)
      a[i] = run;
    run += c[j];
  }
}

// The take = min(kTop, n) largest non-NaN of a block's n positions, position p = s x kBlock +
// threadIdx.x held by its thread as v[s] (NaN past n), id(p) its id; among equal values the lower
// positions first. Ranked by (value desc, id asc) into ids / vals (kTop slots: -1 and 0 past the
// count); returns the count (fewer when fewer are not NaN).
template <int N, class Id>
__device__ int selectTop(const float (&v)[N], int n, Id id, Shared &sh, int *ids, float *vals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned below = (1u << lane) - 1u;
  const int take = kTop < n ? kTop : n;
  unsigned key[N];
#pragma unroll
  for (int s = 0; s < N; ++s)
    key[s] = orderKey(v[s]);
  // Radix select: tau = the key of the take-th largest entry; `remaining` of the entries equal
  // to tau complete the set after every entry above it. Or, `exact`: the entries at or above
  // a digit's bin are the set itself (tau the bin's lowest key), and no later digit is needed.
  // One barrier a pass: pass k counts into hist[k % 3] (hist[0] is zero on entry) and clears the
  // next pass's, which the warps last read two passes ago; every warp finds the digit itself.
  unsigned prefix = 0u, mask = 0u;
  int remaining = take;
  bool exact = false;
  for (int pass = 0, shift = 24; shift >= 0 && !exact; ++pass, shift -= 8) {
    unsigned *hist = sh.hist[pass % 3];
    if (shift > 0)
      for (int i = threadIdx.x; i < 256; i += kBlock)
        sh.hist[(pass + 1) % 3][i] = 0u;
    // Warp-aggregated: the lanes counting into one bin add their number once (logits crowd into
    // few bins of the first digit, where one atomic per entry would serialize on one address).
#pragma unroll
    for (int s = 0; s < N; ++s) {
      const bool in = s * kBlock + (int)threadIdx.x < n && (key[s] & mask) == prefix;
      const unsigned bin = in ? (key[s] >> shift) & 255u : 256u; // 256: none
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256u && (peers & below) == 0u) // the lowest lane of its peers
        atomicAdd(&hist[bin], (unsigned)__popc(peers));
    }
    __syncthreads();
    // The digit: the largest d whose entries with a digit >= d number `remaining` or more (0 when
    // none: fewer valid entries), and `remaining` less those above it. A warp holds the 256 bins
    // in descending order, 8 per lane; a shuffle scan of the lanes' sums finds the lane holding
    // it, whose walk of its 8 bins the others take.
    int c[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      sum += c[j] = (int)hist[255 - 8 * lane - j];
    int inc = sum; // entries in the bins of lanes 0 .. lane
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o)
        inc += t;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, inc >= remaining);
    const int at = hit ? __popc((hit & (0u - hit)) - 1u) : 31; // the lowest such lane
    // Each lane's walk as if it were that lane; bin 0 (j = 7 of lane 31) is taken without the test.
    int cum = inc - sum, pick = 7, inBin = c[7];
    bool found = false;
#pragma unroll
    for (int j = 0; j < 7; ++j) {
      if (!found && cum + c[j] >= remaining) {
        found = true;
        pick = j;
        inBin = c[j];
      }
      if (!found)
        cum += c[j];
    }
    const unsigned digit = (unsigned)__shfl_sync(0xffffffffu, 255 - 8 * lane - pick, at);
    const int rest = __shfl_sync(0xffffffffu, remaining - cum, at);
    const int binCount = __shfl_sync(0xffffffffu, inBin, at);
    prefix |= digit << shift;
    mask |= 255u << shift;
    // Not for a lowest key of 0 (NaN, past n): those are never taken.
    exact = binCount == rest && prefix != 0u;
    remaining = rest;
  }
  const unsigned tau = prefix;
  const int greater = exact ? take : take - remaining;
  const int ties = exact || tau == 0u ? 0 : remaining; // tau 0: fewer valid entries than take
  const int count = greater + ties;

  // Collect in position order every key above tau (at or above it when exact: tau > 0 then) and
  // the first `ties` keys equal to it (NaN and positions past n, key 0, never): a warp's counts
  // of each slot, their exclusive scan in position order (slot, then warp), each entry's place.
#pragma unroll
  for (int s = 0; s < N; ++s) {
    const bool gt = exact ? key[s] >= tau : key[s] > tau, eq = ties > 0 && key[s] == tau;
    const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) {
      sh.gtAt[s * kWarps + warp] = __popc(bg);
      sh.eqAt[s * kWarps + warp] = __popc(be);
    }
  }
  __syncthreads();
  if (warp == 0) {
    warpExclusiveScan<N * kWarps>(sh.gtAt);
    warpExclusiveScan<N * kWarps>(sh.eqAt);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += kBlock) // for the next selection (every warp read it)
    sh.hist[0][i] = 0u;
#pragma unroll
  for (int s = 0; s < N; ++s) {
    const bool gt = exact ? key[s] >= tau : key[s] > tau, eq = ties > 0 && key[s] == tau;
    const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    const int p = s * kBlock + (int)threadIdx.x;
    if (gt) {
      const int g = sh.gtAt[s * kWarps + warp] + __popc(bg & below);
      sh.candIds[g] = id(p);
      sh.candVals[g] = v[s];
    }
    if (eq) {
      const int e = sh.eqAt[s * kWarps + warp] + __popc(be & below);
      if (e < ties) {
        sh.candIds[greater + e] = id(p);
        sh.candVals[greater + e] = v[s];
      }
    }
  }
  __syncthreads();

  // Rank the survivors by (value desc, id asc): survivor c by threads c x kRankThreads .. + kRankThreads - 1,
  // each comparing it with every kRankThreads-th survivor, their counts added by shuffles.
  {
    const int c = threadIdx.x / kRankThreads, sub = threadIdx.x % kRankThreads;
    const bool has = c < count;
    const float cv = has ? sh.candVals[c] : 0.0f;
    const int cid = has ? sh.candIds[c] : -1;
    int rank = 0;
    if (has)
      for (int j = sub; j < count; j += kRankThreads) {
        const float w = sh.candVals[j];
        rank += (w > cv || (w == cv && sh.candIds[j] < cid)) ? 1 : 0;
      }
#pragma unroll
    for (int o = 1; o < kRankThreads; o <<= 1)
      rank += __shfl_xor_sync(0xffffffffu, rank, o);
    if (sub == 0) {
      ids[has ? rank : c] = cid;
      vals[has ? rank : c] = cv;
    }
  }
  // (No barrier: the candidates and counts are written again after the next selection's passes.)
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

// The summary of the n <= kBlock x kPer entries x[0 .. n) (ids lo + position) into o, with the
// sum of exp(x - max) itself, or its log when `final`. Every thread loads its entries first.
__device__ void summarizePart(const float *x, int n, int lo, bool final, Shared &sh, unsigned char *o) {
  float v[kPer];
#pragma unroll
  for (int s = 0; s < kPer; ++s) {
    const int p = s * kBlock + (int)threadIdx.x;
    v[s] = p < n ? x[p] : __uint_as_float(0x7fc00000u); // past the part: NaN, never counted
  }
  // 1. The largest non-NaN entry and the number of non-NaN entries.
  double mx = (double)__uint_as_float(0xff800000u), valid = 0.0; // -inf
#pragma unroll
  for (int s = 0; s < kPer; ++s)
    if (v[s] == v[s]) {
      mx = fmax(mx, (double)v[s]);
      valid += 1.0;
    }
  reduceOnce(mx, valid, sh.red[0]);
  const float fmx = (float)mx;
  // 2. sum exp(x - max) in double, as the host sums it (NaN in, NaN out).
  double sum = 0.0, unused = 0.0;
#pragma unroll
  for (int s = 0; s < kPer; ++s)
    if (s * kBlock + (int)threadIdx.x < n)
      sum += exp((double)v[s] - (double)fmx);
  reduceOnce(unused, sum, sh.red[1]);
  // 3. The top entries (ids: positions in the row).
  const int count = selectTop<kPer>(v, n, [&](int p) { return lo + p; }, sh, idsOf(o), valsOf(o));
  if (threadIdx.x == 0)
    writeHead(o, final ? log(sum) : sum, fmx, count, (int)valid);
}

// The row's summary into f from its kParts part summaries at ps (the workspace, or shared memory):
// the max of the maxes, the sums rescaled to it in part order, the selection over the parts' top
// entries laid out in part order (kTop slots each; past a part's count NaN, never taken).
__device__ void mergeParts(const unsigned char *ps, Shared &sh, unsigned char *f) {
  auto head = [&](int p) { return ps + (long long)p * kSummaryBytes; };
  double m = (double)__uint_as_float(0xff800000u), v = 0.0;
  for (int p = threadIdx.x; p < kParts; p += kBlock) {
    m = fmax(m, (double)*reinterpret_cast<const float *>(head(p) + 8));
    v += (double)*reinterpret_cast<const int *>(head(p) + 16);
  }
  reduceOnce(m, v, sh.red[0]);
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
  double unused = 0.0;
  reduceOnce(unused, total, sh.red[1]);
  float tv[kMergePer];
#pragma unroll
  for (int s = 0; s < kMergePer; ++s) {
    const int p = s * kBlock + (int)threadIdx.x, part = p / kTop < kParts ? p / kTop : 0, slot = p % kTop;
    const unsigned char *h = head(part);
    const float x = reinterpret_cast<const float *>(h + 24 + 4 * kTop)[slot]; // (both loads at once)
    tv[s] = p < kParts * kTop && slot < *reinterpret_cast<const int *>(h + 12) ? x : __uint_as_float(0x7fc00000u);
  }
  const int merged = selectTop<kMergePer>(
      tv, kParts * kTop, [&](int p) { return reinterpret_cast<const int *>(head(p / kTop) + 24)[p % kTop]; }, sh,
      idsOf(f), valsOf(f));
  if (threadIdx.x == 0)
    writeHead(f, log(total), fm, merged, (int)v);
}
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ logits, unsigned char *__restrict__ out,${WORK_PARAM} int L) {
  __shared__ Shared sh;${NO_WORK}
  for (int i = threadIdx.x; i < 256; i += kBlock) // zero on a selection's entry (a barrier comes first)
    sh.hist[0][i] = 0u;
  if (kParts == 1 || L > kSplitRows) {
    // A block per row; its parts one after another into shared memory, then merged.
    __shared__ double rowParts[kParts > 1 ? kParts * kSummaryBytes / 8 : 1];
    unsigned char *parts = reinterpret_cast<unsigned char *>(rowParts);
    for (int row = blockIdx.x; row < L; row += gridDim.x) {
      const float *x = logits + (long long)row * kV;
      unsigned char *f = out + (long long)row * kSummaryBytes;
      if (kParts == 1) {
        summarizePart(x, kV, 0, true, sh, f);
        continue;
      }
      for (int part = 0; part < kParts; ++part) {
        const int lo = part * kPartLen;
        summarizePart(x + lo, kV - lo < kPartLen ? kV - lo : kPartLen, lo, false, sh, parts + part * kSummaryBytes);
      }
      __syncthreads(); // the last part's head
      mergeParts(parts, sh, f);
    }
    return;
  }
  // A block per (row, part); the row's last part to finish merges the parts' summaries.
  int *counters = reinterpret_cast<int *>(work);
  unsigned char *partials = work + kCountersBytes;
  for (int item = blockIdx.x; item < L * kParts; item += gridDim.x) {
    const int row = item / kParts, part = item % kParts, lo = part * kPartLen;
    unsigned char *ps = partials + (long long)row * kParts * kSummaryBytes;
    summarizePart(logits + (long long)row * kV + lo, kV - lo < kPartLen ? kV - lo : kPartLen, lo, false, sh,
                  ps + (long long)part * kSummaryBytes);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
      sh.last = atomicAdd(&counters[row], 1) == kParts - 1;
    __syncthreads();
    if (!sh.last)
      continue;
    __threadfence();
    mergeParts(ps, sh, out + (long long)row * kSummaryBytes);
    if (threadIdx.x == 0)
      counters[row] = 0; // ready for the next launch
    __syncthreads();
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitLogitsSummaryKernel(int64_t vocab) {
  if (vocab <= 0 || vocab > kMaxLogitsSummaryVocab)
    return llmrt::invalid_argument("logits_summary: vocab size " + std::to_string(vocab) + " outside [1, " +
                                   std::to_string(kMaxLogitsSummaryVocab) + "]");
  int64_t parts = std::clamp<int64_t>(vocab / kMinPartLen, 1, kMaxParts);
  parts = std::max(parts, (vocab + kMaxBlock * kMaxPer - 1) / (kMaxBlock * kMaxPer));
  const int block =
      std::clamp<int>(detail::reductionBlockSize((vocab + parts - 1) / parts), 64, static_cast<int>(kMaxBlock));
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

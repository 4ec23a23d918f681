//===- AttentionKernel.cpp - llm.kv_store and llm.paged_attention ---------===//
//
// The paged KV cache of PROGRAM.md: per layer one K and one V array
// [num_blocks, num_kv_heads, block_size, head_dim] (f32), slot s = block
// s / block_size, offset s % block_size.
//
// kv_store: one block per row; a row with kv_slots[t] < 0 (padding) is not
// stored.
//
// paged_attention: one block per (row, group of up to 8 query heads sharing a
// kv head): GQA reads each K and V row once per group. The block walks the row's
// visible positions j = max(0, p - W + 1) .. p in tiles of kBlock, whose
// cache rows it looks up once: each warp scores a share of the tile's
// positions, its lanes splitting the head dimension (coalesced reads of a K
// row; q pre-scaled; per lane in index order, then an xor tree), the
// block takes the tile's max and sum with fixed shared-memory trees, and an
// online softmax (running max m, running sum l) rescales the output
// accumulator, which threads own by head dimension (summing the tile's
// positions in order). The order depends only on the row's position, the
// sizes and whether the step splits (below), never on the grid.
//
// Long contexts in small steps (flash-decoding): when a step has at most
// kSplitRows rows, a row's positions are cut into up to kMaxChunks chunks of
// whole tiles (at least kMinChunk positions each), one block per chunk; each
// writes its (max, sum, unnormalized output) to the kernel's workspace and
// the last block of the item to finish (a counter per item, which it resets)
// combines them in chunk order, so the result does not depend on which block
// finished last. Contexts of kMinChunk positions or fewer take one chunk and
// the unsplit path.
//
// Decode with rope_kv_store inside (AttentionParams::rope, the plan's Step.rope_kernel): the
// per-row kernel taking the fused projection qkv in place of q, for steps in which every
// sequence has one row. An item rotates its q heads itself (rope_kv_store's rotation, then the
// same scaling as the plain load); the chunk that ends at the row's own position p also builds
// that position's k (rotated) and v in shared memory as the cache will hold them (int8: codes and
// scale by the kv_store code, read back dequantized) and takes them from there, not from the
// cache, which no block reads at p in this launch; the kv head's first item stores them at the
// row's slot. Outputs and cache are those of rope_kv_store then the plain kernel, bit for bit,
// with one launch fewer per layer and no q row through memory.
//
// Prefill (the family's second kernel, AttentionParams::tensorCores; plans launch it for steps
// of kTiledAttentionMinRows rows or more), FlashAttention-style: a block takes a query tile of
// one sequence's rows times the heads of a kv head group, 64 (row, head) pairs, and walks the
// tile's keys in tiles of 32 loaded once into shared memory for all pairs (the per-row kernel
// reads each K and V row once per row and group): scores Q K^T and the product P V on tensor
// cores (mma.sync m16n8k8, TF32 operands, f32 accumulation), mask and online softmax in f32 per
// pair. Query tiles never mix sequences (a decode row in a large step is a tile of its own);
// the grid counts sequences for that (rule "rows/<c>*<k> + seqs*<k>"). Operands are rounded to
// 10 mantissa bits, so a row's output depends on which kernel its step ran, within that rounding.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llmc {

namespace {

// The sizes both kv_store kernels specialize on.
constexpr const char *kKvStoreConstants = R"cuda(namespace {
constexpr int kHkv = ${HKV};
constexpr int kHd = ${HD};
constexpr int kBs = ${BS};
constexpr int kBlock = ${BLOCK};
constexpr int kWidth = kHkv * kHd;
} // namespace
)cuda";

// f32, bf16, f16 or fp8 cache (KvElem, detail::kvElementSource): each element as toKv rounds it.
constexpr const char *kKvStoreTemplate = R"cuda(// llmc kernel: kv_store, kv_heads=${HKV} head_dim=${HD} block_size=${BS} kv=${KV}
// Params: (const float *k, const float *v, const long long *kv_slots,
//          ${ELEM} *k_cache, ${ELEM} *v_cache, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
${CONSTANTS}${KV_ELEMENT}
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ k, const float *__restrict__ v,
         const long long *__restrict__ kv_slots, KvElem *__restrict__ k_cache,
         KvElem *__restrict__ v_cache, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long slot = kv_slots[row];
    if (slot < 0)
      continue; // padding
    const long long block = slot / kBs, offset = slot % kBs;
    for (int i = threadIdx.x; i < kWidth; i += kBlock) {
      const int head = i / kHd, d = i % kHd;
      const long long dst = ((block * kHkv + head) * kBs + offset) * kHd + d;
      k_cache[dst] = toKv(k[(long long)row * kWidth + i]);
      v_cache[dst] = toKv(v[(long long)row * kWidth + i]);
    }
  }
}
)cuda";

// int8 cache: codes [num_blocks, kv_heads, block_size, head_dim] (signed bytes) plus one f32
// scale per (block, head, slot); a head's row is stored as the CPU backend stores it, every
// operation correctly rounded, so both backends hold the same codes (detail::kInt8RowStore).
constexpr const char *kKvStoreInt8Template = R"cuda(// llmc kernel: kv_store int8, kv_heads=${HKV} head_dim=${HD} block_size=${BS}
// Params: (const float *k, const float *v, const long long *kv_slots, signed char *k_cache,
//          signed char *v_cache, float *k_scales, float *v_scales, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows); one warp per head row.
${CONSTANTS}namespace {
${ROW_STORE}} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ k, const float *__restrict__ v,
         const long long *__restrict__ kv_slots, signed char *__restrict__ k_cache,
         signed char *__restrict__ v_cache, float *__restrict__ k_scales,
         float *__restrict__ v_scales, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long slot = kv_slots[row];
    if (slot < 0)
      continue; // padding
    const long long block = slot / kBs, offset = slot % kBs;
    for (int head = warp; head < kHkv; head += kBlock / 32) {
      const long long r = (block * kHkv + head) * kBs + offset; // the cache row
      const long long x = (long long)row * kWidth + head * kHd;
      storeRowI8([&](int d) { return k[x + d]; }, k_cache + r * kHd, k_scales + r, lane);
      storeRowI8([&](int d) { return v[x + d]; }, v_cache + r * kHd, v_scales + r, lane);
    }
  }
}
)cuda";

} // namespace

const char *const detail::kInt8RowStore = R"cuda(template <typename Value>
__device__ __forceinline__ void storeRowI8(Value value, signed char *codes, float *scale, int lane) {
  constexpr int kPerLane = (kHd + 31) / 32;
  float x[kPerLane]; // lane's elements d = lane + 32 j, in registers
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    x[j] = d < kHd ? value(d) : 0.0f;
    amax = fmaxf(amax, fabsf(x[j]));
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < kHd)
      codes[d] = (signed char)__float2int_rn(x[j] * inv);
  }
  if (lane == 0)
    *scale = s;
}
)cuda";

bool kvCacheHasKernels(const std::string &kvDtype) {
  return kvDtype == "f32" || kvDtype == "bf16" || kvDtype == "f16" || kvDtype == "fp8" || kvDtype == "int8";
}

const char *detail::kvElemType(const std::string &kvDtype) {
  return kvDtype == "int8" ? "signed char" : kvDtype == "f32" ? "float" : kvDtype == "fp8" ? "unsigned char" : "unsigned short";
}

std::string detail::kvEntrySuffix(const std::string &kvDtype) {
  return kvDtype == "int8" ? "_i8" : kvDtype == "f32" ? "" : "_" + kvDtype;
}

std::string detail::kvElementSource(const std::string &kvDtype) {
  if (kvDtype == "f32")
    return R"cuda(namespace {
typedef float KvElem; // an f32 KV cache: elements as they are
__device__ __forceinline__ KvElem toKv(float x) { return x; }
__device__ __forceinline__ float fromKv(KvElem e) { return e; }
} // namespace
)cuda";
  if (kvDtype == "fp8")
    // E4M3 (runtime/quant/quant_format.h: the CPU's float_to_e4m3 / e4m3_to_float, the same
    // operations): stored rounded to nearest even, saturating at +-448 (cvt.rn.satfinite's
    // result, computed here on every SKU: sm_80 / sm_86 have no fp8 conversion, and the host
    // emulation runs this code); read exactly, the code moved into a half's place (its
    // exponent is the half's plus 8), widened, times 2^8.
    return std::string(kFloatConversions) + R"cuda(namespace {
typedef unsigned char KvElem; // an fp8 E4M3 KV cache
__device__ __forceinline__ KvElem toKv(float x) {
  const unsigned u = __float_as_uint(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: the NaN code
    return 0x7fu;
  if (a >= 0x43e00000u) // 448 and up, infinity included: the largest finite
    return (KvElem)(sign | 0x7eu);
  if (a < 0x3c800000u) // below 2^-6: a subnormal code, |x| * 2^9 rounded to an integer
    return (KvElem)(sign | (unsigned)rintf(__uint_as_float(a) * 512.0f));
  return (KvElem)(sign | ((a + 0x7ffffu + ((a >> 20) & 1u) - (120u << 23)) >> 20)); // rebias 127 -> 7, round
}
__device__ __forceinline__ float fromKv(KvElem e) {
  const unsigned c = e;
  if ((c & 0x7fu) == 0x7fu)
    return __uint_as_float(0x7fc00000u | ((c & 0x80u) << 24));
  return halfToFloat(((c & 0x7fu) << 7) | ((c & 0x80u) << 8)) * 256.0f;
}
} // namespace
)cuda";
  if (kvDtype != "bf16" && kvDtype != "f16")
    return "";
  const bool bf16 = kvDtype == "bf16";
  return std::string(kFloatConversions) + detail::substitute(R"cuda(namespace {
typedef unsigned short KvElem; // a ${KV} KV cache: rounded to nearest even when stored, exact when read
__device__ __forceinline__ KvElem toKv(float x) { return ${TO}(x); }
__device__ __forceinline__ float fromKv(KvElem e) { return ${FROM}(e); }
} // namespace
)cuda",
                                                             {{"KV", kvDtype},
                                                              {"TO", bf16 ? "floatToBf16" : "floatToHalf"},
                                                              {"FROM", bf16 ? "bf16ToFloat" : "halfToFloat"}});
}

namespace {

constexpr const char *kAttentionTemplate = R"cuda(// llmc kernel: paged_attention, heads=${H} kv_heads=${HKV} head_dim=${HD}
// block_size=${BS} window=${WINDOW} scale=${SCALE}
// Params: (const float *${Q_NAME}, ${CACHE_CONST}${ELEM} *k_cache, ${CACHE_CONST}${ELEM} *v_cache,${SCALE_PARAMS_DOC}
//          const int *positions,${SLOTS_DOC} const int *query_start, const int *block_tables,
//          int max_blocks, int S, float *out,${Q8_DOC} unsigned char *work, int T)${ROPE_DOC}
// work: ${WORK} bytes, zero when first launched (the kernel leaves it so).
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T * ${ITEMS}, times ${MAX_CHUNKS} when T <= ${SPLIT_ROWS}
// (grid-stride over (row, head group, chunk)).
namespace {
constexpr int kH = ${H};
constexpr int kHkv = ${HKV};
constexpr int kHd = ${HD};
constexpr int kBs = ${BS};
constexpr int kWindow = ${WINDOW}; // 0: none
constexpr float kScale = ${SCALE};
constexpr int kBlock = ${BLOCK};
constexpr int kGroup = ${SUB};            // query heads per item: all or part of a GQA group
constexpr int kItemsPerRow = kH / kGroup; // items per row; item i's heads i * kGroup ..
constexpr int kPerThread = (kHd + kBlock - 1) / kBlock;
constexpr int kSplitRows = ${SPLIT_ROWS}; // steps of at most this many rows split long contexts
constexpr int kMaxChunks = ${MAX_CHUNKS};
constexpr int kMinChunk = ${MIN_CHUNK};   // positions, a multiple of kBlock
constexpr int kPartFloats = kGroup * (kHd + 2); // per chunk: (m, l, acc[kHd]) per head
constexpr int kScoreBatch = 8;                  // positions a warp scores at a time
constexpr int kVBatch = 16;                     // V rows a thread loads at a time
constexpr long long kCountersBytes = ${COUNTERS_BYTES};
constexpr int kPrefetchRows = ${PREFETCH_ROWS}; // cache positions an item asks the L2 for before its wait
${CACHE_READ}${ROPE_CONSTANTS}
// The block's max (kMax) or sum of each of the kGroup values v[g], into v[g] of every thread:
// each value by the trees of blockReduce (KernelSource.cpp) alone, so the same results, with two
// barriers for all of them instead of two each, their trees interleaved.
template <bool kMax>
__device__ __forceinline__ void groupTrees(float v[kGroup]) { // a warp's xor tree of each value
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float u = __shfl_xor_sync(0xffffffffu, v[g], o);
      v[g] = kMax ? fmaxf(v[g], u) : v[g] + u;
    }
}
template <bool kMax>
__device__ __forceinline__ void groupReduce(float v[kGroup], float *red) {
  constexpr int kRedWarps = kBlock / 32;
  static_assert(kGroup * kRedWarps <= kBlock, "red holds a value per (head, warp)");
  const int lane = threadIdx.x & 31;
  groupTrees<kMax>(v);
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
      red[g * kRedWarps + (threadIdx.x >> 5)] = v[g];
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kGroup; ++g)
    v[g] = lane < kRedWarps ? red[g * kRedWarps + lane] : (kMax ? red[g * kRedWarps] : 0.0f);
  groupTrees<kMax>(v);
  __syncthreads();
}
// An item (row, head group, chunk): its row's sequence table and position p, and the positions
// lo .. hi it reads, chunk `chunk` of the row's nChunks (none when chunk >= nChunks); false for a
// padding row.
struct ItemSpan {
  long long rowItem; // (row, head group)
  int chunk, row, head0, kvHead, p, lo, hi, nChunks;
  const int *table;
};
__device__ __forceinline__ bool itemSpan(long long item, int chunksPerItem, const int *positions,
                                         const int *query_start, const int *block_tables, int max_blocks,
                                         int S, ItemSpan &s) {
  s.chunk = (int)(item % chunksPerItem);
  s.rowItem = item / chunksPerItem;
  s.row = (int)(s.rowItem / kItemsPerRow);
  s.head0 = (int)(s.rowItem % kItemsPerRow) * kGroup;
  s.kvHead = s.head0 / (kH / kHkv);
  if (s.row >= query_start[S])
    return false;
  // The row's sequence: the last q with query_start[q] <= row.
  int seq = 0, top = S - 1;
  while (seq < top) {
    const int mid = (seq + top + 1) / 2;
    if (query_start[mid] <= s.row)
      seq = mid;
    else
      top = mid - 1;
  }
  s.table = block_tables + (long long)seq * max_blocks;
  s.p = positions[s.row];
  const int first = kWindow > 0 && s.p - kWindow + 1 > 0 ? s.p - kWindow + 1 : 0;
  // Chunks of whole tiles.
  const int len = s.p - first + 1;
  int span = len;
  if (chunksPerItem > 1 && len > kMinChunk) {
    span = (len + kMaxChunks - 1) / kMaxChunks;
    span = span < kMinChunk ? kMinChunk : (span + kBlock - 1) / kBlock * kBlock;
  }
  s.nChunks = (len + span - 1) / span;
  s.lo = first + s.chunk * span;
  s.hi = s.p < s.lo + span - 1 ? s.p : s.lo + span - 1;
  return true;
}
${Q8_STORE}} // namespace

// (kBlock, 1): ptxas's default register budget for 128-thread blocks spilled a few bytes of the
// windowed variant on sm_80; with at least one block per SM it keeps them in registers.
extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ ${Q_NAME}, ${CACHE_CONST}${ELEM} *__restrict__ k_cache,
         ${CACHE_CONST}${ELEM} *__restrict__ v_cache,${SCALE_PARAMS} const int *__restrict__ positions,${SLOTS_PARAM}
         const int *__restrict__ query_start, const int *__restrict__ block_tables,
         int max_blocks, int S, float *__restrict__ out,${Q8_PARAM} unsigned char *__restrict__ work, int T) {
  // One item = (row, kGroup query heads sharing a kv head): they read each K and V row once. Every head keeps its own order of operations (the same score trees, the same
  // reduction trees, V sums in position order), as if it were alone.
  __shared__ float qs[kGroup][kHd];
  __shared__ float probs[kGroup][kBlock]; // a tile's scores, then its probabilities
  __shared__ long long cacheRow[kBlock];  // the tile's positions' cache rows
  __shared__ float red[kBlock];
  __shared__ int isLast;${ROPE_SHARED}
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kWarps = kBlock / 32;
  int *counters = reinterpret_cast<int *>(work);
  float *parts = reinterpret_cast<float *>(work + kCountersBytes);
  const int chunksPerItem = T <= kSplitRows ? kMaxChunks : 1;
  const long long items = (long long)T * kItemsPerRow * chunksPerItem;
  // Before the wait on the kernel before (programmatic dependent launch, sm_90+): the cache rows
  // of the block's first item, up to kPrefetchRows positions from its first, asked of the L2.
  // Earlier steps wrote them (the row's own, written in this step, is a hint's stale line at
  // worst, which the write updates); the step's positions, starts and tables were copied before
  // its first kernel, which waited for the copies.
  if (kPrefetchRows > 0 && blockIdx.x < items) {
    ItemSpan s;
    if (itemSpan(blockIdx.x, chunksPerItem, positions, query_start, block_tables, max_blocks, S, s) &&
        s.chunk < s.nChunks) {
      const int last = s.hi < s.lo + kPrefetchRows - 1 ? s.hi : s.lo + kPrefetchRows - 1;
      for (int b = s.lo / kBs + tid; b <= last / kBs; b += kBlock) { // a thread per cache block
        const int j0 = b * kBs > s.lo ? b * kBs : s.lo, j1 = (b + 1) * kBs - 1 < last ? (b + 1) * kBs - 1 : last;
        const long long r = ((long long)s.table[b] * kHkv + s.kvHead) * kBs + j0 % kBs;
        const unsigned bytes = (unsigned)((j1 - j0 + 1) * kHd * sizeof(${ELEM}));
        llmcPrefetchL2(k_cache + r * kHd, bytes);
        llmcPrefetchL2(v_cache + r * kHd, bytes);
      }
    }
  }
  llmcGridDependencyWait();
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    ItemSpan s;
    if (!itemSpan(item, chunksPerItem, positions, query_start, block_tables, max_blocks, S, s))
      continue; // padding rows: output unspecified, never read
    if (s.chunk >= s.nChunks)
      continue;
    const int chunk = s.chunk, row = s.row, head0 = s.head0, kvHead = s.kvHead, p = s.p, lo = s.lo, hi = s.hi,
              nChunks = s.nChunks;
    const long long rowItem = s.rowItem;
    const int *table = s.table;
${LOAD_Q}    float acc[kGroup][kPerThread];
    float m[kGroup], l[kGroup];
    const float negInf = __uint_as_float(0xff800000u);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      m[g] = negInf;
      l[g] = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
        acc[g][i] = 0.0f;
    }
    for (int j0 = lo; j0 <= hi; j0 += kBlock) {
      const int j = j0 + tid;
      const int n = hi - j0 + 1 < kBlock ? hi - j0 + 1 : kBlock;
      // The cache rows of the tile's positions, looked up once.
      if (tid < n)
        cacheRow[tid] = ${OWN_ROW}((long long)table[j / kBs] * kHkv + kvHead) * kBs + j % kBs;
      __syncthreads();
      // Scores: warp w takes positions w, w + kWarps, ..., kScoreBatch of them at a time, its
      // lanes the head dimensions (d = lane + 32 i, coalesced reads of a K row), an xor tree
      // each sum; into probs. The batch's K rows are in flight together and its trees interleave
      // (one position at a time, the warp waited for each row's loads, then for each tree); a
      // position's sum is the same operations whichever batch it falls in.
      for (int jw = warp; jw < n; jw += kScoreBatch * kWarps) {
        long long rows[kScoreBatch];
#pragma unroll
        for (int u = 0; u < kScoreBatch; ++u) // (past the tile: position jw again, not stored)
          rows[u] = cacheRow[jw + u * kWarps < n ? jw + u * kWarps : jw];
        float part[kScoreBatch][kGroup];
#pragma unroll
        for (int u = 0; u < kScoreBatch; ++u)
#pragma unroll
          for (int g = 0; g < kGroup; ++g)
            part[u][g] = 0.0f;
#pragma unroll
        for (int d = lane; d < kHd; d += 32) {
          float kds[kScoreBatch];
#pragma unroll
          for (int u = 0; u < kScoreBatch; ++u) {
            const long long r = rows[u];
            kds[u] = ${K_AT};
          }
#pragma unroll
          for (int u = 0; u < kScoreBatch; ++u)
#pragma unroll
            for (int g = 0; g < kGroup; ++g)
              part[u][g] += qs[g][d] * kds[u];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
          for (int u = 0; u < kScoreBatch; ++u)
#pragma unroll
            for (int g = 0; g < kGroup; ++g)
              part[u][g] += __shfl_xor_sync(0xffffffffu, part[u][g], o);
        if (lane == 0) {
#pragma unroll
          for (int u = 0; u < kScoreBatch; ++u)
            if (jw + u * kWarps < n) {
#pragma unroll
              for (int g = 0; g < kGroup; ++g)
                probs[g][jw + u * kWarps] = part[u][g];
            }
        }
      }
      __syncthreads();
      // The tile's max and sum of every head at once (groupReduce: each value its own trees).
      float score[kGroup], mNew[kGroup], sum[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
        mNew[g] = score[g] = j <= hi ? probs[g][tid] : negInf;
      groupReduce<true>(mNew, red);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        mNew[g] = fmaxf(m[g], mNew[g]);
        sum[g] = j <= hi ? expf(score[g] - mNew[g]) : 0.0f;
        probs[g][tid] = sum[g]; // (only this thread reads or writes probs[g][tid] until the barrier)
      }
      groupReduce<false>(sum, red); // (its barriers publish probs)
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float alpha = expf(m[g] - mNew[g]); // 0 on the first tile (m = -inf)
        l[g] = l[g] * alpha + sum[g];
        m[g] = mNew[g];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
          acc[g][i] *= alpha;
      }
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int d = tid + i * kBlock;
        if (d < kHd) {
          // kVBatch rows' loads in flight at a time, the sums in position order; the last
          // n % kVBatch rows as one more batch (past the tile: position 0 again, not summed),
          // not one load at a time as an unrolled loop's remainder takes them.
          int j0 = 0;
          for (; j0 + kVBatch <= n; j0 += kVBatch) {
#pragma unroll
            for (int u = 0; u < kVBatch; ++u) {
              const int jj = j0 + u;
              const float vd = ${V_AT};
#pragma unroll
              for (int g = 0; g < kGroup; ++g)
                acc[g][i] += probs[g][jj] * vd;
            }
          }
          if (j0 < n) {
            float vds[kVBatch];
#pragma unroll
            for (int u = 0; u < kVBatch; ++u) {
              const int jj = j0 + u < n ? j0 + u : 0;
              vds[u] = ${V_AT};
            }
#pragma unroll
            for (int u = 0; u < kVBatch; ++u)
              if (j0 + u < n) {
#pragma unroll
                for (int g = 0; g < kGroup; ++g)
                  acc[g][i] += probs[g][j0 + u] * vds[u];
              }
          }
        }
      }
      __syncthreads(); // probs is rewritten by the next tile
    }
    if (nChunks == 1) {
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float *orow = out + ((long long)row * kH + head0 + g) * kHd;
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int d = tid + i * kBlock;
          if (d < kHd) { // (whole warps: kHd is a multiple of 32 when q8 rows are written)
            const float y = acc[g][i] / l[g];
            orow[d] = y;${Q8_WRITE}
          }
        }
      }
    } else {
      // This chunk's part, then the item's last block to finish combines all parts.
      float *part = parts + (rowItem * kMaxChunks + chunk) * kPartFloats;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (tid == 0) {
          part[g * (kHd + 2)] = m[g];
          part[g * (kHd + 2) + 1] = l[g];
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int d = tid + i * kBlock;
          if (d < kHd)
            part[g * (kHd + 2) + 2 + d] = acc[g][i];
        }
      }
      __threadfence(); // the part is visible device-wide before the count says so
      __syncthreads();
      if (tid == 0)
        isLast = atomicAdd(&counters[rowItem], 1) == nChunks - 1;
      __syncthreads();
      if (isLast) {
        __threadfence();
        const float *all = parts + rowItem * kMaxChunks * kPartFloats;
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          float mAll = negInf;
          for (int c = 0; c < nChunks; ++c)
            mAll = fmaxf(mAll, __ldcg(all + c * kPartFloats + g * (kHd + 2)));
          float lAll = 0.0f;
          float o[kPerThread];
#pragma unroll
          for (int i = 0; i < kPerThread; ++i)
            o[i] = 0.0f;
          for (int c = 0; c < nChunks; ++c) {
            const float *pc = all + c * kPartFloats + g * (kHd + 2);
            const float w = expf(__ldcg(pc) - mAll);
            lAll += __ldcg(pc + 1) * w;
#pragma unroll
            for (int i = 0; i < kPerThread; ++i) {
              const int d = tid + i * kBlock;
              if (d < kHd)
                o[i] += __ldcg(pc + 2 + d) * w;
            }
          }
          float *orow = out + ((long long)row * kH + head0 + g) * kHd;
#pragma unroll
          for (int i = 0; i < kPerThread; ++i) {
            const int d = tid + i * kBlock;
            if (d < kHd) {
              const float y = o[i] / lAll;
              orow[d] = y;${Q8_WRITE}
            }
          }
        }
        if (tid == 0)
          counters[rowItem] = 0; // ready for the next launch
      }
    }
    __syncthreads(); // qs is rewritten by the block's next item
  }
}
)cuda";

// Tiled prefill attention on tensor cores (AttentionParams::tensorCores; see the file comment).
constexpr const char *kTiledAttentionTemplate = R"cuda(// llmc kernel: paged_attention tiled on tensor cores, heads=${H} kv_heads=${HKV}
// head_dim=${HD} block_size=${BS} window=${WINDOW} scale=${SCALE}
// Params: (const float *q, const ${ELEM} *k_cache, const ${ELEM} *v_cache,${SCALE_PARAMS_DOC}
//          const int *positions, const int *query_start, const int *block_tables,
//          int max_blocks, int S, float *out, int T)
// Launch: blockDim.x = 128, gridDim.x = (ceil(T / ${ROWS}) + S) * ${ITEMS} (grid-stride over
// (query tile, kv head, head group)).
namespace {
constexpr int kH = ${H};
constexpr int kHkv = ${HKV};
constexpr int kHd = ${HD};                    // a multiple of 8, at most 128
constexpr int kBs = ${BS};
constexpr int kWindow = ${WINDOW};            // 0: none
constexpr float kScale = ${SCALE};
constexpr int kGroup = kH / kHkv;             // query heads per kv head
constexpr int kSub = ${SUB};                  // of them per item: a power of two dividing kGroup, <= 8
constexpr int kItemsPerTile = kHkv * (kGroup / kSub);
constexpr int kRows = 64 / kSub;              // query rows per tile: 64 (row, head) pairs, 16 per warp
constexpr int kKeys = 32;                     // keys per K/V tile
constexpr int kSteps = kHd / 8;               // k-steps of q . k, n-tiles of the output
constexpr int kKStride = kHd + 4;             // shared rows padded so fragment reads hit 32 banks
constexpr int kVStride = kHd + 8;
constexpr int kPStride = kKeys + 4;
${CACHE_READ}} // namespace
${MMA}
// The step's query tiles are each sequence's rows in runs of kRows, sequence by sequence. Warp 0
// finds tile `tile`: info = {sequence, first row, rows}, rows 0 past the last tile.
__device__ __forceinline__ void findTile(const int *query_start, int S, long long tile, int *info) {
  const int lane = threadIdx.x & 31;
  long long before = 0; // tiles of the sequences before `base`
  for (int base = 0; base < S; base += 32) {
    const int s = base + lane;
    int tiles = s < S ? (query_start[s + 1] - query_start[s] + kRows - 1) / kRows : 0;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
      tiles += __shfl_xor_sync(0xffffffffu, tiles, m);
    if (tile < before + tiles) { // warp-uniform
      if (lane == 0)
        for (int t = base;; ++t) {
          const int n = (query_start[t + 1] - query_start[t] + kRows - 1) / kRows;
          if (tile < before + n) {
            info[0] = t;
            info[1] = query_start[t] + (int)(tile - before) * kRows;
            info[2] = query_start[t + 1] - info[1] < kRows ? query_start[t + 1] - info[1] : kRows;
            break;
          }
          before += n;
        }
      return;
    }
    before += tiles;
  }
  if (lane == 0)
    info[2] = 0;
}

// One item = (query tile of kRows rows of one sequence, kv head, kSub of its query heads): 64
// (row, head) pairs, 16 per warp as the m dimension of mma.m16n8k8. The block walks the keys
// of the tile's rows in tiles of kKeys, loaded once into shared memory for all 64 pairs: S = Q K^T
// on tensor cores (TF32 operands, f32 accumulation), causal / window mask, an online softmax per
// pair (f32), then O += P V on tensor cores. A pair's order of operations depends on its tile's
// rows and key range only, never on the grid or on other sequences.
extern "C" __global__ void __launch_bounds__(128, 2)
${ENTRY}(const float *__restrict__ q, const ${ELEM} *__restrict__ k_cache,
         const ${ELEM} *__restrict__ v_cache,${SCALE_PARAMS} const int *__restrict__ positions,
         const int *__restrict__ query_start, const int *__restrict__ block_tables,
         int max_blocks, int S, float *__restrict__ out, int T) {
  __shared__ float ks[kKeys][kKStride]; // TF32-rounded K rows of the key tile
  __shared__ float vs[kKeys][kVStride]; // and V rows
  __shared__ float ps[4][16][kPStride]; // each warp's probabilities, as the A operand of P V
  __shared__ int info[3];
  __shared__ int range[2];              // the tile's keys lo .. hi
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = lane & 3; // mma fragment coordinates
  const float negInf = __uint_as_float(0xff800000u);
  for (long long item = blockIdx.x;; item += gridDim.x) {
    if (warp == 0)
      findTile(query_start, S, item / kItemsPerTile, info);
    __syncthreads();
    const int seq = info[0], row0 = info[1], rows = info[2];
    if (rows == 0)
      break; // items are in tile order: every later one is past the end too
    const int rest = (int)(item % kItemsPerTile);
    const int kvHead = rest / (kGroup / kSub), head0 = kvHead * kGroup + rest % (kGroup / kSub) * kSub;
    const int *table = block_tables + (long long)seq * max_blocks;
    if (warp == 0) { // keys lo .. hi: from the earliest visible position to the latest row
      int lo = 0x7fffffff, hi = -1;
      for (int r = lane; r < rows; r += 32) {
        const int p = positions[row0 + r];
        const int first = kWindow > 0 && p - kWindow + 1 > 0 ? p - kWindow + 1 : 0;
        lo = first < lo ? first : lo;
        hi = p > hi ? p : hi;
      }
#pragma unroll
      for (int m = 16; m > 0; m >>= 1) {
        const int l2 = __shfl_xor_sync(0xffffffffu, lo, m), h2 = __shfl_xor_sync(0xffffffffu, hi, m);
        lo = l2 < lo ? l2 : lo;
        hi = h2 > hi ? h2 : hi;
      }
      if (lane == 0)
        range[0] = lo, range[1] = hi;
    }
    __syncthreads();
    const int lo = range[0], hi = range[1];
    // This lane's two pairs (fragment rows g and g + 8 of the warp's 16): row r, head h.
    int pos[2], first[2], prow[2], phead[2];
    bool valid[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int m = warp * 16 + g + 8 * i, r = m / kSub;
      valid[i] = r < rows;
      prow[i] = row0 + (valid[i] ? r : 0);
      phead[i] = head0 + m % kSub;
      pos[i] = valid[i] ? positions[prow[i]] : -1; // -1: every key masked
      first[i] = kWindow > 0 && pos[i] - kWindow + 1 > 0 ? pos[i] - kWindow + 1 : 0;
    }
    const bool active = warp * 16 / kSub < rows; // the warp has a real pair (warp-uniform)
    // Q as A fragments, pre-scaled and rounded to TF32, for the whole item.
    unsigned qa[kSteps][4];
#pragma unroll
    for (int k = 0; k < kSteps; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int pi = i & 1, d = 8 * k + qd + 4 * (i >> 1);
        qa[k][i] = valid[pi] ? toTf32(q[((long long)prow[pi] * kH + phead[pi]) * kHd + d] * kScale) : 0u;
      }
    float o[kSteps][4];
#pragma unroll
    for (int n = 0; n < kSteps; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[n][i] = 0.0f;
    float mrow[2] = {negInf, negInf}, lrow[2] = {0.0f, 0.0f}; // lrow: this lane's part of the sum
    for (int j0 = lo; j0 <= hi; j0 += kKeys) {
      // The key tile's K and V rows, 4 elements per load, rounded to TF32 once.
      for (int c = tid; c < kKeys * kHd / 4; c += 128) {
        const int key = c / (kHd / 4), d = c % (kHd / 4) * 4, j = j0 + key;
        float kv4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vv4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (j <= hi) {
          const long long r = ((long long)table[j / kBs] * kHkv + kvHead) * kBs + j % kBs;
          cacheRead4(k_cache, K_SCALES, r, d, kv4);
          cacheRead4(v_cache, V_SCALES, r, d, vv4);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ks[key][d + e] = __uint_as_float(toTf32(kv4[e]));
          vs[key][d + e] = __uint_as_float(toTf32(vv4[e]));
        }
      }
      __syncthreads();
      if (active) {
        float sc[kKeys / 8][4];
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            sc[n][i] = 0.0f;
#pragma unroll
          for (int k = 0; k < kSteps; ++k) {
            const unsigned b[2] = {__float_as_uint(ks[8 * n + g][8 * k + qd]),
                                   __float_as_uint(ks[8 * n + g][8 * k + qd + 4])};
            mmaTf32(sc[n], qa[k], b);
          }
        }
        // Mask, then the online softmax of each pair: the quad's 4 lanes hold a pair's 32 keys.
        float mx[2] = {negInf, negInf};
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int pi = i >> 1, j = j0 + 8 * n + 2 * qd + (i & 1);
            if (j < first[pi] || j > pos[pi])
              sc[n][i] = negInf;
            mx[pi] = fmaxf(mx[pi], sc[n][i]);
          }
        float alpha[2], mUse[2];
#pragma unroll
        for (int pi = 0; pi < 2; ++pi) {
          mx[pi] = fmaxf(mx[pi], __shfl_xor_sync(0xffffffffu, mx[pi], 1));
          mx[pi] = fmaxf(mx[pi], __shfl_xor_sync(0xffffffffu, mx[pi], 2));
          const float mNew = fmaxf(mrow[pi], mx[pi]);
          mUse[pi] = mNew == negInf ? 0.0f : mNew; // nothing visible yet: exps of -inf are 0
          alpha[pi] = expf(mrow[pi] - mUse[pi]);
          mrow[pi] = mNew;
          lrow[pi] *= alpha[pi];
        }
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int pi = i >> 1;
            const float e = expf(sc[n][i] - mUse[pi]);
            lrow[pi] += e;
            ps[warp][g + 8 * pi][8 * n + 2 * qd + (i & 1)] = __uint_as_float(toTf32(e));
          }
#pragma unroll
        for (int n = 0; n < kSteps; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            o[n][i] *= alpha[i >> 1];
        __syncwarp();
#pragma unroll
        for (int k = 0; k < kKeys / 8; ++k) {
          const unsigned a[4] = {__float_as_uint(ps[warp][g][8 * k + qd]), __float_as_uint(ps[warp][g + 8][8 * k + qd]),
                                 __float_as_uint(ps[warp][g][8 * k + qd + 4]),
                                 __float_as_uint(ps[warp][g + 8][8 * k + qd + 4])};
#pragma unroll
          for (int n = 0; n < kSteps; ++n) {
            const unsigned b[2] = {__float_as_uint(vs[8 * k + qd][8 * n + g]),
                                   __float_as_uint(vs[8 * k + qd + 4][8 * n + g])};
            mmaTf32(o[n], a, b);
          }
        }
      }
      __syncthreads(); // ks, vs and ps are rewritten by the next key tile
    }
    if (active) {
#pragma unroll
      for (int pi = 0; pi < 2; ++pi) { // the pair's sum over its quad
        lrow[pi] += __shfl_xor_sync(0xffffffffu, lrow[pi], 1);
        lrow[pi] += __shfl_xor_sync(0xffffffffu, lrow[pi], 2);
      }
#pragma unroll
      for (int n = 0; n < kSteps; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pi = i >> 1;
          if (valid[pi])
            out[((long long)prow[pi] * kH + phead[pi]) * kHd + 8 * n + 2 * qd + (i & 1)] = o[n][i] / lrow[pi];
        }
    }
  }
}
)cuda";

// Elements d .. d + 3 of cache row r (d a multiple of 4) in one load, as cacheAt reads them:
// 16 bytes (f32), 8 (bf16, f16: KvElem of detail::kvElementSource, converted exactly) or 4 (fp8,
// likewise; int8).
constexpr const char *kKvRead4 = R"cuda(#define K_SCALES nullptr
#define V_SCALES nullptr
struct alignas(4 * sizeof(KvElem)) Elem4 {
  KvElem v[4];
};
__device__ __forceinline__ void cacheRead4(const KvElem *c, const float *, long long r, int d, float out[4]) {
  const Elem4 x = *reinterpret_cast<const Elem4 *>(c + r * kHd + d);
#pragma unroll
  for (int e = 0; e < 4; ++e)
    out[e] = fromKv(x.v[e]);
}
)cuda";
constexpr const char *kInt8Read4 = R"cuda(#define K_SCALES k_scales
#define V_SCALES v_scales
__device__ __forceinline__ void cacheRead4(const signed char *c, const float *scales, long long r, int d,
                                           float out[4]) {
  const unsigned x = *reinterpret_cast<const unsigned *>(c + r * kHd + d);
  const float s = scales[r];
#pragma unroll
  for (int e = 0; e < 4; ++e)
    out[e] = __fmul_rn((float)(signed char)(x >> (8 * e)), s);
}
)cuda";

// Element d of cache row r (f32: as stored; bf16, f16, fp8: converted exactly; int8: code * the
// row's scale, as the CPU dequantizes).
constexpr const char *kKvRead = R"cuda(#define K_SCALES nullptr
#define V_SCALES nullptr
__device__ __forceinline__ float cacheAt(const KvElem *c, const float *, long long r, int d) {
  return fromKv(c[r * kHd + d]);
}
)cuda";
constexpr const char *kInt8Read = R"cuda(#define K_SCALES k_scales
#define V_SCALES v_scales
__device__ __forceinline__ float cacheAt(const signed char *c, const float *scales, long long r, int d) {
  return __fmul_rn((float)c[r * kHd + d], scales[r]);
}
)cuda";

// The per-row kernel's query load, plain: q pre-scaled into shared memory.
constexpr const char *kLoadQ = R"cuda(    const float *qrow = q + ((long long)row * kH + head0) * kHd;
    for (int i = tid; i < kGroup * kHd; i += kBlock)
      qs[i / kHd][i % kHd] = qrow[i] * kScale;
    __syncthreads();
)cuda";

// With rope_kv_store inside (AttentionParams::rope; decode steps, one row per sequence): the
// rows of the fused projection and the rotation, and the row's own k and v as the cache holds
// them (a chunk that ends at the row's position p reads them from here: they are not in the
// cache before this launch).
constexpr const char *kRopeConstants = R"cuda(
constexpr int kHalf = kHd / 2;
constexpr bool kNeox = ${NEOX};
constexpr int kQWidth = kH * kHd;
constexpr int kKvWidth = kHkv * kHd;
constexpr int kQkvWidth = kQWidth + 2 * kKvWidth; // a row of qkv: q, k, v columns
constexpr bool kRotateKWithQ = ${ROTATE_K}; // f32 cache: the own k rotated in q's loop
${ROTATION}${ROW_STORE})cuda";

// The item's q heads rotated as rope_kv_store rotates them (rotatePair), then scaled as the
// plain load scales rope_kv_store's output; when the chunk ends at p, the kv head's k and v as
// the cache will hold them into kNew / vNew (OWN_BUILD, OWN_READ, OWN_STORE: per cache type,
// below), and the kv head's first item stores them at the row's slot (none for padding, slot <
// 0): rope_kv_store's write, by one block.
constexpr const char *kLoadQRope = R"cuda(    const float *src = qkv + (long long)row * kQkvWidth;
    const float angle = (float)p;
    const bool own = hi == p;
    for (int i = tid; i < (own && kRotateKWithQ ? kGroup + 1 : kGroup) * kHalf; i += kBlock) {
      const int g = i / kHalf;
      if (g < kGroup)
        rotatePair(src + (head0 + g) * kHd, qs[g], i - g * kHalf, angle);
      else
        rotatePair(src + kQWidth + kvHead * kHd, kNew, i - g * kHalf, angle);
    }
    const float *ownV = src + kQWidth + kKvWidth + kvHead * kHd;
    if (own) {${OWN_BUILD}
    }
    __syncthreads();
    for (int i = tid; i < kGroup * kHd; i += kBlock)
      qs[i / kHd][i % kHd] *= kScale;${OWN_READ}
    const long long slot = own && head0 % (kH / kHkv) == 0 ? kv_slots[row] : -1;
    if (slot >= 0) {
      const long long r = (slot / kBs * kHkv + kvHead) * kBs + slot % kBs; // the cache row
      for (int d = tid; d < kHd; d += kBlock) {${OWN_STORE}
      }
    }
    __syncthreads();
)cuda";

// f32, bf16, f16, fp8 cache: k rotated in q's loop, v copied; an f32 cache holds them as they
// are, a narrower one rounded (kOwnReadRounded).
constexpr const char *kOwnBuildF32 = R"cuda(
      for (int d = tid; d < kHd; d += kBlock)
        vNew[d] = ownV[d];)cuda";
constexpr const char *kOwnStoreF32 = R"cuda(
        k_cache[r * kHd + d] = toKv(kNew[d]);
        v_cache[r * kHd + d] = toKv(vNew[d]);)cuda";
// bf16 / f16 / fp8 cache: as f32, k and v then rounded as the cache holds them (toKv: exact back).
constexpr const char *kOwnReadRounded = R"cuda(
    if (own)
      for (int d = tid; d < kHd; d += kBlock) {
        kNew[d] = fromKv(toKv(kNew[d]));
        vNew[d] = fromKv(toKv(vNew[d]));
      })cuda";
// int8 cache: k and v quantized by rope_kv_store's code (warps 0 and 1: storeRowI8 of rotatedAt
// and of v) into shared codes and scales, read back dequantized as cacheAt reads the cache.
constexpr const char *kOwnBuildInt8 = R"cuda(
      if (warp == 0)
        storeRowI8([&](int d) { return rotatedAt(src + kQWidth + kvHead * kHd, d, angle); }, kCodes, &kCodeScale,
                   lane);
      else if (warp == 1)
        storeRowI8([&](int d) { return ownV[d]; }, vCodes, &vCodeScale, lane);)cuda";
constexpr const char *kOwnReadInt8 = R"cuda(
    if (own)
      for (int d = tid; d < kHd; d += kBlock) {
        kNew[d] = __fmul_rn((float)kCodes[d], kCodeScale);
        vNew[d] = __fmul_rn((float)vCodes[d], vCodeScale);
      })cuda";
constexpr const char *kOwnStoreInt8 = R"cuda(
        k_cache[r * kHd + d] = kCodes[d];
        v_cache[r * kHd + d] = vCodes[d];
        if (d == 0) {
          k_scales[r] = kCodeScale;
          v_scales[r] = vCodeScale;
        })cuda";

// Flash-decoding sizes (see the file comment): steps of up to 32 rows (decode batches) split a
// row's positions into up to 32 chunks of at least 256 positions (two tiles): 8K positions
// give Llama-3-8B's 8 kv-head groups 256 blocks at batch 1 instead of 8.
constexpr int64_t kSplitRows = 32;
constexpr int64_t kMaxChunks = 32;
constexpr int64_t kMinChunk = 256;

llmrt::Status checkCache(const char *what, int64_t kvHeads, int64_t headDim, int64_t blockSize) {
  if (kvHeads <= 0 || headDim <= 0 || headDim > 1024 || blockSize <= 0 || blockSize > 4096 ||
      kvHeads * headDim > detail::kMaxDim)
    return llmrt::invalid_argument(std::string(what) + ": kv_heads " + std::to_string(kvHeads) +
                                   ", head_dim " + std::to_string(headDim) + " (at most 1024), block_size " +
                                   std::to_string(blockSize) + " (at most 4096) out of range");
  return llmrt::ok_status();
}

using Bindings = std::vector<std::pair<std::string, std::string>>;

// Bytes per cache element.
int64_t kvElemBytes(const std::string &d) { return d == "int8" || d == "fp8" ? 1 : d == "f32" ? 4 : 2; }

// The bindings both attention templates share: sizes, window, scale and the cache's element type.
Bindings attentionBindings(const AttentionParams &p) {
  const bool i8 = p.cache.kvDtype == "int8";
  return {{"H", std::to_string(p.numHeads)},
          {"HKV", std::to_string(p.cache.numKvHeads)},
          {"HD", std::to_string(p.cache.headDim)},
          {"BS", std::to_string(p.cache.blockSize)},
          {"WINDOW", std::to_string(p.slidingWindow)},
          {"SCALE", detail::floatLiteral(p.scale)},
          {"ELEM", detail::kvElemType(p.cache.kvDtype)},
          {"SCALE_PARAMS_DOC", i8 ? "\n//          const float *k_scales, const float *v_scales," : ""},
          {"SCALE_PARAMS", i8 ? "\n         const float *__restrict__ k_scales, const float *__restrict__ v_scales," : ""}};
}

// "llm_paged_attention_h32_kv8_d128_b16[_w4096][_i8|_bf16|_f16|_fp8]".
std::string attentionPrefix(const AttentionParams &p) {
  return "llm_paged_attention_h" + std::to_string(p.numHeads) + "_kv" + std::to_string(p.cache.numKvHeads) + "_d" +
         std::to_string(p.cache.headDim) + "_b" + std::to_string(p.cache.blockSize) +
         (p.slidingWindow ? "_w" + std::to_string(p.slidingWindow) : std::string()) +
         detail::kvEntrySuffix(p.cache.kvDtype);
}

// The tiled kernel's sizes (kTiledAttentionTemplate): 64 (row, head) pairs per block, key tiles
// of 32; K, V and P tiles in 43.5 KiB of static shared memory at head_dim 128, its largest.
constexpr int64_t kTiledMaxHeadDim = 128;
constexpr int64_t kTiledPairs = 64;

llmrt::StatusOr<KernelSpec> emitTiled(const AttentionParams &p) {
  if (!tiledAttentionApplies(p))
    return llmrt::unimplemented("paged_attention: the tiled tensor-core kernel takes head_dim a multiple of 8 up "
                                "to 128, not " + std::to_string(p.cache.headDim));
  const bool i8 = p.cache.kvDtype == "int8";
  // Query heads per item: the largest power of two dividing the GQA group, up to 8, so that the
  // 64 (row, head) pairs of a block are whole rows.
  const int64_t group = p.numHeads / p.cache.numKvHeads;
  int64_t sub = 8;
  while (group % sub)
    sub /= 2;
  const int64_t items = p.cache.numKvHeads * (group / sub), rows = kTiledPairs / sub;
  Bindings bindings = attentionBindings(p);
  bindings.insert(bindings.end(), {{"SUB", std::to_string(sub)},
                                   {"ROWS", std::to_string(rows)},
                                   {"ITEMS", std::to_string(items)},
                                   {"MMA", detail::kTf32Mma},
                                   {"CACHE_READ", i8 ? std::string(kInt8Read4)
                                                     : detail::kvElementSource(p.cache.kvDtype) + kKvRead4}});
  return detail::finishSpec("paged_attention", attentionPrefix(p) + "_tc",
                            detail::substitute(kTiledAttentionTemplate, bindings), 128,
                            "rows/" + std::to_string(rows) + "*" + std::to_string(items) + " + seqs*" +
                                std::to_string(items));
}

} // namespace

llmrt::StatusOr<KernelSpec> emitKvStoreKernel(const KvCacheParams &p) {
  RETURN_IF_ERROR(checkCache("kv_store", p.numKvHeads, p.headDim, p.blockSize));
  if (!kvCacheHasKernels(p.kvDtype))
    return llmrt::unimplemented("kv_store: kv dtype '" + p.kvDtype + "' has no GPU kernel (f32, bf16, f16, fp8, int8)");
  const bool i8 = p.kvDtype == "int8";
  // int8: one warp per head row (amax is a warp reduction), up to 8 warps.
  const int block = i8 ? 32 * static_cast<int>(std::min<int64_t>(8, p.numKvHeads))
                       : detail::elementwiseBlockSize(p.numKvHeads * p.headDim);
  std::vector<std::pair<std::string, std::string>> sizes = {{"HKV", std::to_string(p.numKvHeads)},
                                                             {"HD", std::to_string(p.headDim)},
                                                             {"BS", std::to_string(p.blockSize)},
                                                             {"BLOCK", std::to_string(block)}};
  std::vector<std::pair<std::string, std::string>> bindings = sizes;
  bindings.emplace_back("CONSTANTS", detail::substitute(kKvStoreConstants, sizes));
  if (i8)
    bindings.emplace_back("ROW_STORE", detail::kInt8RowStore);
  else
    bindings.insert(bindings.end(), {{"KV", p.kvDtype},
                                     {"ELEM", detail::kvElemType(p.kvDtype)},
                                     {"KV_ELEMENT", detail::kvElementSource(p.kvDtype)}});
  std::string body = detail::substitute(i8 ? kKvStoreInt8Template : kKvStoreTemplate, bindings);
  return detail::finishSpec("kv_store",
                            "llm_kv_store_h" + std::to_string(p.numKvHeads) + "_d" + std::to_string(p.headDim) +
                                "_b" + std::to_string(p.blockSize) + detail::kvEntrySuffix(p.kvDtype),
                            body, block, "rows");
}

bool tiledAttentionApplies(const AttentionParams &p) {
  return p.cache.headDim % 8 == 0 && p.cache.headDim <= kTiledMaxHeadDim;
}

llmrt::StatusOr<KernelSpec> emitPagedAttentionKernel(const AttentionParams &p) {
  RETURN_IF_ERROR(checkCache("paged_attention", p.cache.numKvHeads, p.cache.headDim, p.cache.blockSize));
  if (!kvCacheHasKernels(p.cache.kvDtype))
    return llmrt::unimplemented("paged_attention: kv dtype '" + p.cache.kvDtype +
                                "' has no GPU kernel (f32, bf16, f16, fp8, int8)");
  const bool i8 = p.cache.kvDtype == "int8";
  if (p.numHeads <= 0 || p.numHeads % p.cache.numKvHeads != 0 || p.numHeads * p.cache.headDim > detail::kMaxDim)
    return llmrt::invalid_argument("paged_attention: " + std::to_string(p.numHeads) +
                                   " heads are not a multiple of " + std::to_string(p.cache.numKvHeads) +
                                   " kv heads");
  if (!std::isfinite(p.scale) || p.scale <= 0.0f || p.slidingWindow < 0)
    return llmrt::invalid_argument("paged_attention: scale must be finite and > 0, sliding window >= 0");
  if (p.tensorCores && p.rope)
    return llmrt::invalid_argument("paged_attention: the tiled kernel has no rope_kv_store inside (decode steps "
                                   "run the per-row kernel)");
  if (p.tensorCores)
    return emitTiled(p);
  // Threads score one position each per tile; 128 keeps a tile's K rows in
  // flight without idling most threads on short contexts.
  const int block = 128;
  static_assert(kMinChunk % 128 == 0, "chunks are whole tiles");
  // Query heads per item: the largest divisor of the GQA group up to 8 (registers and shared
  // memory grow with it; 8 covers Llama-3's 4 and 70B's 8).
  int64_t sub = 1;
  const int64_t group = p.numHeads / p.cache.numKvHeads;
  for (int64_t g = std::min<int64_t>(group, 8); g >= 1; --g)
    if (group % g == 0) {
      sub = g;
      break;
    }
  // Flash-decoding (see the file comment): the workspace holds a counter per (row, head group)
  // and a part per (row, head group, chunk) for steps of up to kSplitRows rows.
  const int64_t items = p.numHeads / sub;
  const int64_t countersBytes = (kSplitRows * items * 4 + 255) / 256 * 256;
  const int64_t workBytes =
      countersBytes + kSplitRows * items * kMaxChunks * sub * (p.cache.headDim + 2) * int64_t(sizeof(float));
  Bindings bindings = attentionBindings(p);
  bindings.insert(bindings.end(), {{"BLOCK", std::to_string(block)},
                                   {"SUB", std::to_string(sub)},
                                   {"ITEMS", std::to_string(items)},
                                   {"SPLIT_ROWS", std::to_string(kSplitRows)},
                                   {"MAX_CHUNKS", std::to_string(kMaxChunks)},
                                   {"MIN_CHUNK", std::to_string(kMinChunk)},
                                   {"COUNTERS_BYTES", std::to_string(countersBytes)},
                                   {"WORK", std::to_string(workBytes)},
                                   // the first tile's rows, when they are whole 16-byte units
                                   {"PREFETCH_ROWS", p.cache.headDim * kvElemBytes(p.cache.kvDtype) % 16 == 0
                                                         ? std::to_string(block)
                                                         : "0"},
                                   {"CACHE_READ", i8 ? std::string(kInt8Read)
                                                     : detail::kvElementSource(p.cache.kvDtype) + kKvRead}});
  if (p.quantizedOutput && p.cache.headDim % 32 != 0)
    return llmrt::invalid_argument("paged_attention: int8 output rows need a head_dim that is a multiple of 32, not " +
                                   std::to_string(p.cache.headDim));
  // Int8 rows of the output (AttentionParams::quantizedOutput): a warp's 32 dimensions of a head
  // are one sub-block of the row of kH * kHd.
  const bool q8 = p.quantizedOutput;
  bindings.insert(bindings.end(),
                  {{"Q8_DOC", q8 ? " unsigned char *q8," : ""},
                   {"Q8_PARAM", q8 ? " unsigned char *__restrict__ q8," : ""},
                   {"Q8_STORE", q8 ? detail::kQuantizeQ8Store : ""},
                   {"Q8_WRITE", q8 ? "\n            storeQ8Value<kH * kHd>(q8, row, (head0 + g) * kHd + d, y);" : ""}});
  // rope_kv_store inside (AttentionParams::rope): its inputs in place of q, the cache written.
  const bool rope = p.rope.has_value();
  std::string rotation, ropeDoc;
  if (rope) {
    const RopeParams &r = *p.rope;
    if (r.numHeads != p.numHeads || r.headDim != p.cache.headDim || p.cache.headDim % 2 != 0)
      return llmrt::invalid_argument("paged_attention: the rope_kv_store inside rotates " + std::to_string(r.numHeads) +
                                     " heads of " + std::to_string(r.headDim) + ", the attention reads " +
                                     std::to_string(p.numHeads) + " of " + std::to_string(p.cache.headDim) +
                                     " (equal and even)");
    ASSIGN_OR_RETURN(rotation, detail::ropeRotationSource(r));
    char theta[32];
    std::snprintf(theta, sizeof(theta), "%.17g", r.theta);
    ropeDoc = "\n// With rope_kv_store inside (style=" + r.style + " type=" + r.ropeType + " theta=" + theta +
              "): qkv and kv_slots are that step's inputs, the row's k and v are stored into the cache\n"
              "// here; for steps in which every sequence has exactly one row (decode) only.";
    for (auto &b : bindings)
      if (b.first == "SCALE_PARAMS" && i8)
        b.second = "\n         float *__restrict__ k_scales, float *__restrict__ v_scales,";
  }
  bindings.insert(
      bindings.end(),
      {{"Q_NAME", rope ? "qkv" : "q"},
       {"CACHE_CONST", rope ? "" : "const "},
       {"SLOTS_DOC", rope ? " const long long *kv_slots," : ""},
       {"SLOTS_PARAM", rope ? " const long long *__restrict__ kv_slots," : ""},
       {"ROPE_DOC", ropeDoc},
       {"ROPE_CONSTANTS", rope ? detail::substitute(kRopeConstants, {{"NEOX", p.rope->style == "neox" ? "true" : "false"},
                                                                    {"ROTATE_K", i8 ? "false" : "true"},
                                                                    {"ROTATION", rotation},
                                                                    {"ROW_STORE", i8 ? detail::kInt8RowStore : ""}})
                               : ""},
       {"ROPE_SHARED",
        !rope ? ""
        : i8  ? "\n  __shared__ float kNew[kHd], vNew[kHd]; // the row's own k and v, as the cache holds them"
                "\n  __shared__ signed char kCodes[kHd], vCodes[kHd];\n  __shared__ float kCodeScale, vCodeScale;"
              : "\n  __shared__ float kNew[kHd], vNew[kHd]; // the row's own k and v, as the cache holds them"},
       {"LOAD_Q", !rope ? kLoadQ
                        : detail::substitute(kLoadQRope, {{"OWN_BUILD", i8 ? kOwnBuildInt8 : kOwnBuildF32},
                                                          {"OWN_READ", i8                         ? kOwnReadInt8
                                                                       : p.cache.kvDtype == "f32" ? ""
                                                                                                  : kOwnReadRounded},
                                                          {"OWN_STORE", i8 ? kOwnStoreInt8 : kOwnStoreF32}})},
       {"OWN_ROW", rope ? "j == p ? -1 : " : ""},
       {"K_AT", rope ? "r < 0 ? kNew[d] : cacheAt(k_cache, K_SCALES, r, d)" : "cacheAt(k_cache, K_SCALES, r, d)"},
       {"V_AT", rope ? "cacheRow[jj] < 0 ? vNew[d] : cacheAt(v_cache, V_SCALES, cacheRow[jj], d)"
                     : "cacheAt(v_cache, V_SCALES, cacheRow[jj], d)"}});
  KernelSpec spec = detail::finishSpec("paged_attention", attentionPrefix(p) + (rope ? "_rope" : "") + (q8 ? "_q8" : ""),
                                       detail::substitute(kAttentionTemplate, bindings), block,
                                       "rows*" + std::to_string(items) + " x" + std::to_string(kMaxChunks) +
                                           " when rows<=" + std::to_string(kSplitRows));
  spec.workspaceBytes = static_cast<uint64_t>(workBytes);
  return spec;
}

} // namespace llmc

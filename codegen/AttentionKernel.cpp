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
// visible positions j = max(0, p - W + 1) .. p in tiles of kBlock: each
// thread scores one position (q . k_j in index order, q pre-scaled), the
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
// the unsplit path. Tensor-core prefill tiles are the next step of this family.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <algorithm>
#include <cmath>

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

constexpr const char *kKvStoreTemplate = R"cuda(// llmc kernel: kv_store, kv_heads=${HKV} head_dim=${HD} block_size=${BS}
// Params: (const float *k, const float *v, const long long *kv_slots,
//          float *k_cache, float *v_cache, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
${CONSTANTS}
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ k, const float *__restrict__ v,
         const long long *__restrict__ kv_slots, float *__restrict__ k_cache,
         float *__restrict__ v_cache, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long slot = kv_slots[row];
    if (slot < 0)
      continue; // padding
    const long long block = slot / kBs, offset = slot % kBs;
    for (int i = threadIdx.x; i < kWidth; i += kBlock) {
      const int head = i / kHd, d = i % kHd;
      const long long dst = ((block * kHkv + head) * kBs + offset) * kHd + d;
      k_cache[dst] = k[(long long)row * kWidth + i];
      v_cache[dst] = v[(long long)row * kWidth + i];
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

namespace {

constexpr const char *kAttentionTemplate = R"cuda(// llmc kernel: paged_attention, heads=${H} kv_heads=${HKV} head_dim=${HD}
// block_size=${BS} window=${WINDOW} scale=${SCALE}
// Params: (const float *q, const ${ELEM} *k_cache, const ${ELEM} *v_cache,${SCALE_PARAMS_DOC}
//          const int *positions, const int *query_start, const int *block_tables,
//          int max_blocks, int S, float *out, unsigned char *work, int T)
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
constexpr long long kCountersBytes = ${COUNTERS_BYTES};
${CACHE_READ}
${REDUCTIONS}} // namespace

// (kBlock, 1): ptxas's default register budget for 128-thread blocks spilled a few bytes of the
// windowed variant on sm_80; with at least one block per SM it keeps them in registers.
extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ q, const ${ELEM} *__restrict__ k_cache,
         const ${ELEM} *__restrict__ v_cache,${SCALE_PARAMS} const int *__restrict__ positions,
         const int *__restrict__ query_start, const int *__restrict__ block_tables,
         int max_blocks, int S, float *__restrict__ out, unsigned char *__restrict__ work, int T) {
  // One item = (row, kGroup query heads sharing a kv head): they read each K and V row once. Every head keeps its own order of operations (scores in index order, the same
  // reduction trees, V sums in position order), as if it were alone.
  __shared__ float qs[kGroup][kHd];
  __shared__ float probs[kGroup][kBlock];
  __shared__ float red[kBlock];
  __shared__ int isLast;
  const int tid = threadIdx.x;
  int *counters = reinterpret_cast<int *>(work);
  float *parts = reinterpret_cast<float *>(work + kCountersBytes);
  const int chunksPerItem = T <= kSplitRows ? kMaxChunks : 1;
  const long long items = (long long)T * kItemsPerRow * chunksPerItem;
  for (long long item = blockIdx.x; item < items; item += gridDim.x) {
    const int chunk = (int)(item % chunksPerItem);
    const long long rowItem = item / chunksPerItem; // (row, head group)
    const int row = (int)(rowItem / kItemsPerRow), head0 = (int)(rowItem % kItemsPerRow) * kGroup;
    const int kvHead = head0 / (kH / kHkv);
    if (row >= query_start[S])
      continue; // padding rows: output unspecified, never read
    // The row's sequence: the last s with query_start[s] <= row.
    int seq = 0, top = S - 1;
    while (seq < top) {
      const int mid = (seq + top + 1) / 2;
      if (query_start[mid] <= row)
        seq = mid;
      else
        top = mid - 1;
    }
    const int *table = block_tables + (long long)seq * max_blocks;
    const int p = positions[row];
    const int first = kWindow > 0 && p - kWindow + 1 > 0 ? p - kWindow + 1 : 0;
    // This block's positions lo..hi: chunk `chunk` of the row's, chunks of whole tiles.
    const int len = p - first + 1;
    int span = len;
    if (chunksPerItem > 1 && len > kMinChunk) {
      span = (len + kMaxChunks - 1) / kMaxChunks;
      span = span < kMinChunk ? kMinChunk : (span + kBlock - 1) / kBlock * kBlock;
    }
    const int nChunks = (len + span - 1) / span;
    if (chunk >= nChunks)
      continue;
    const int lo = first + chunk * span, hi = p < lo + span - 1 ? p : lo + span - 1;
    const float *qrow = q + ((long long)row * kH + head0) * kHd;
    for (int i = tid; i < kGroup * kHd; i += kBlock)
      qs[i / kHd][i % kHd] = qrow[i] * kScale;
    __syncthreads();
    float acc[kGroup][kPerThread];
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
      float score[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
        score[g] = negInf;
      if (j <= hi) {
        const long long r = ((long long)table[j / kBs] * kHkv + kvHead) * kBs + j % kBs;
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
          score[g] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < kHd; ++d) { // (a full unroll took 200+ registers on sm_80)
          const float kd = cacheAt(k_cache, K_SCALES, r, d);
#pragma unroll
          for (int g = 0; g < kGroup; ++g)
            score[g] += qs[g][d] * kd;
        }
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const float mNew = fmaxf(m[g], blockMax(score[g], red));
        const float e = j <= hi ? expf(score[g] - mNew) : 0.0f;
        probs[g][tid] = e;
        const float alpha = expf(m[g] - mNew); // 0 on the first tile (m = -inf)
        l[g] = l[g] * alpha + blockSum(e, red); // blockSum's barriers publish probs
        m[g] = mNew;
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
          acc[g][i] *= alpha;
      }
      const int n = hi - j0 + 1 < kBlock ? hi - j0 + 1 : kBlock;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int d = tid + i * kBlock;
        if (d < kHd) {
          for (int jj = 0; jj < n; ++jj) {
            const int pos = j0 + jj;
            const long long r = ((long long)table[pos / kBs] * kHkv + kvHead) * kBs + pos % kBs;
            const float vd = cacheAt(v_cache, V_SCALES, r, d);
#pragma unroll
            for (int g = 0; g < kGroup; ++g)
              acc[g][i] += probs[g][jj] * vd;
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
          if (d < kHd)
            orow[d] = acc[g][i] / l[g];
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
            if (d < kHd)
              orow[d] = o[i] / lAll;
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

// Element d of cache row r (f32: as stored; int8: code * the row's scale, as the CPU dequantizes).
constexpr const char *kF32Read = R"cuda(#define K_SCALES nullptr
#define V_SCALES nullptr
__device__ __forceinline__ float cacheAt(const float *c, const float *, long long r, int d) {
  return c[r * kHd + d];
}
)cuda";
constexpr const char *kInt8Read = R"cuda(#define K_SCALES k_scales
#define V_SCALES v_scales
__device__ __forceinline__ float cacheAt(const signed char *c, const float *scales, long long r, int d) {
  return __fmul_rn((float)c[r * kHd + d], scales[r]);
}
)cuda";

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

} // namespace

llmrt::StatusOr<KernelSpec> emitKvStoreKernel(const KvCacheParams &p) {
  RETURN_IF_ERROR(checkCache("kv_store", p.numKvHeads, p.headDim, p.blockSize));
  if (p.kvDtype != "f32" && p.kvDtype != "int8")
    return llmrt::unimplemented("kv_store: kv dtype '" + p.kvDtype + "' has no GPU kernel (f32, int8)");
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
  std::string body = detail::substitute(i8 ? kKvStoreInt8Template : kKvStoreTemplate, bindings);
  return detail::finishSpec("kv_store",
                            "llm_kv_store_h" + std::to_string(p.numKvHeads) + "_d" + std::to_string(p.headDim) +
                                "_b" + std::to_string(p.blockSize) + (i8 ? "_i8" : ""),
                            body, block, "rows");
}

llmrt::StatusOr<KernelSpec> emitPagedAttentionKernel(const AttentionParams &p) {
  RETURN_IF_ERROR(checkCache("paged_attention", p.cache.numKvHeads, p.cache.headDim, p.cache.blockSize));
  if (p.cache.kvDtype != "f32" && p.cache.kvDtype != "int8")
    return llmrt::unimplemented("paged_attention: kv dtype '" + p.cache.kvDtype + "' has no GPU kernel (f32, int8)");
  const bool i8 = p.cache.kvDtype == "int8";
  if (p.numHeads <= 0 || p.numHeads % p.cache.numKvHeads != 0 || p.numHeads * p.cache.headDim > detail::kMaxDim)
    return llmrt::invalid_argument("paged_attention: " + std::to_string(p.numHeads) +
                                   " heads are not a multiple of " + std::to_string(p.cache.numKvHeads) +
                                   " kv heads");
  if (!std::isfinite(p.scale) || p.scale <= 0.0f || p.slidingWindow < 0)
    return llmrt::invalid_argument("paged_attention: scale must be finite and > 0, sliding window >= 0");
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
  std::string body = detail::substitute(kAttentionTemplate, {{"H", std::to_string(p.numHeads)},
                                                             {"HKV", std::to_string(p.cache.numKvHeads)},
                                                             {"HD", std::to_string(p.cache.headDim)},
                                                             {"BS", std::to_string(p.cache.blockSize)},
                                                             {"WINDOW", std::to_string(p.slidingWindow)},
                                                             {"SCALE", detail::floatLiteral(p.scale)},
                                                             {"BLOCK", std::to_string(block)},
                                                             {"SUB", std::to_string(sub)},
                                                             {"ITEMS", std::to_string(items)},
                                                             {"SPLIT_ROWS", std::to_string(kSplitRows)},
                                                             {"MAX_CHUNKS", std::to_string(kMaxChunks)},
                                                             {"MIN_CHUNK", std::to_string(kMinChunk)},
                                                             {"COUNTERS_BYTES", std::to_string(countersBytes)},
                                                             {"WORK", std::to_string(workBytes)},
                                                             {"REDUCTIONS", detail::kBlockReductions},
                                                             {"ELEM", i8 ? "signed char" : "float"},
                                                             {"SCALE_PARAMS_DOC", i8 ? "\n//          const float *k_scales, const float *v_scales," : ""},
                                                             {"SCALE_PARAMS", i8 ? "\n         const float *__restrict__ k_scales, const float *__restrict__ v_scales," : ""},
                                                             {"CACHE_READ", i8 ? kInt8Read : kF32Read}});
  KernelSpec spec = detail::finishSpec("paged_attention",
                                       "llm_paged_attention_h" + std::to_string(p.numHeads) + "_kv" +
                                           std::to_string(p.cache.numKvHeads) + "_d" +
                                           std::to_string(p.cache.headDim) + "_b" + std::to_string(p.cache.blockSize) +
                                           (p.slidingWindow ? "_w" + std::to_string(p.slidingWindow) : std::string()) +
                                           (i8 ? "_i8" : ""),
                                       body, block,
                                       "rows*" + std::to_string(items) + " x" + std::to_string(kMaxChunks) +
                                           " when rows<=" + std::to_string(kSplitRows));
  spec.workspaceBytes = static_cast<uint64_t>(workBytes);
  return spec;
}

} // namespace llmc

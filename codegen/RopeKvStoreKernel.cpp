//===- RopeKvStoreKernel.cpp - llm.rope_kv_store --------------------------===//
//
// One block per row of the fused projection qkv [T, (H + 2 Hkv) * hd]: the q
// columns are rotated into q_out, the k columns rotated straight into the
// paged cache, the v columns copied there (rows with kv_slots[t] < 0 store
// nothing). The rotation is llm.rope's (detail::ropeRotationSource), so the
// values are those of rope + rope + kv_store, bit for bit, with three fewer
// launches per layer and the k row never written to the arena.
//
// f32, bf16, f16 cache: each element as toKv rounds it (the pair's values of rotatedPairBy, the
// v columns), kv_store's rounding.
//
// int8 cache: one warp per kv head stores its rotated k row and its v row as
// kv_store does (detail::kInt8RowStore); each lane rotates its elements of
// the k row into registers (no shared-memory staging, no barrier).
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <algorithm>
#include <cstdio>

namespace llmc {

namespace {

constexpr const char *kConstants = R"cuda(// llmc kernel: rope_kv_store, heads=${H} kv_heads=${HKV} head_dim=${HD} block_size=${BS}
// style=${STYLE} type=${TYPE} theta=${THETA} kv=${KV}
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kH = ${H};
constexpr int kHkv = ${HKV};
constexpr int kHd = ${HD};
constexpr int kHalf = kHd / 2;
constexpr int kBs = ${BS};
constexpr int kBlock = ${BLOCK};
constexpr bool kNeox = ${NEOX};
constexpr int kQWidth = kH * kHd;
constexpr int kKvWidth = kHkv * kHd;
constexpr int kWidth = kQWidth + 2 * kKvWidth;
${ROTATION}${ROW_STORE}
// Rotates row `row`'s q columns into q_out; gives the row (src), its position and its cache
// slot (the return value; < 0 for padding: nothing to store).
__device__ __forceinline__ long long startRow(const float *qkv, const int *positions, const long long *kv_slots,
                                              float *q_out, int row, const float **src, float *pos) {
  *pos = (float)positions[row];
  *src = qkv + (long long)row * kWidth;
  float *q = q_out + (long long)row * kQWidth;
  for (int p = threadIdx.x; p < kH * kHalf; p += kBlock) {
    const int head = p / kHalf;
    rotatePair(*src + head * kHd, q + head * kHd, p - head * kHalf, *pos);
  }
  return kv_slots[row];
}
} // namespace
)cuda";

constexpr const char *kTemplate = R"cuda(${CONSTANTS}${KV_ELEMENT}namespace {
// Pair i of the head at src rotated (rotatePairBy's values) into the cache row at dst.
__device__ __forceinline__ void rotateIntoCache(const float *src, KvElem *dst, int i, float s, float c) {
  int a, b;
  float r0, r1;
  rotatedPairBy(src, i, s, c, &a, &b, &r0, &r1);
  dst[a] = toKv(r0);
  dst[b] = toKv(r1);
}
} // namespace
// Params: (const float *qkv, const int *positions, const long long *kv_slots, float *q_out,
//          ${ELEM} *k_cache, ${ELEM} *v_cache, int T)
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ qkv, const int *__restrict__ positions,
         const long long *__restrict__ kv_slots, float *__restrict__ q_out,
         KvElem *__restrict__ k_cache, KvElem *__restrict__ v_cache, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    if (kBlock % kHalf == 0) {
      // Thread t rotates pair t % kHalf of heads t / kHalf, + kBlock / kHalf, ...: one sine and
      // cosine (the accurate sincosf, ~40 instructions) per thread instead of one per pair, and
      // every head's loads at once.
      const float pos = (float)positions[row];
      const float *src = qkv + (long long)row * kWidth;
      float *q = q_out + (long long)row * kQWidth;
      const long long slot = kv_slots[row];
      const long long block = slot / kBs, offset = slot % kBs;
      const int i = threadIdx.x % kHalf;
      float s, c;
      sincosf(pos * kInvFreq[i], &s, &c);
      const int heads = slot < 0 ? kH : kH + kHkv; // padding: q only
#pragma unroll
      for (int head = threadIdx.x / kHalf; head < kH + kHkv; head += kBlock / kHalf) {
        if (head >= heads)
          break;
        if (head < kH)
          rotatePairBy(src + head * kHd, q + head * kHd, i, s, c);
        else
          rotateIntoCache(src + kQWidth + (head - kH) * kHd,
                          k_cache + ((block * kHkv + head - kH) * kBs + offset) * kHd, i, s, c);
      }
      if (slot < 0)
        continue;
      for (int e = threadIdx.x; e < kKvWidth; e += kBlock) {
        const int head = e / kHd, d = e % kHd;
        v_cache[((block * kHkv + head) * kBs + offset) * kHd + d] = toKv(src[kQWidth + kKvWidth + e]);
      }
      continue;
    }
    const float *src;
    float pos;
    const long long slot = startRow(qkv, positions, kv_slots, q_out, row, &src, &pos);
    if (slot < 0)
      continue; // padding: q only
    const long long block = slot / kBs, offset = slot % kBs;
    for (int p = threadIdx.x; p < kHkv * kHalf; p += kBlock) {
      const int head = p / kHalf, i = p - head * kHalf;
      float s, c;
      sincosf(pos * kInvFreq[i], &s, &c); // as rotatePair
      rotateIntoCache(src + kQWidth + head * kHd, k_cache + ((block * kHkv + head) * kBs + offset) * kHd, i, s, c);
    }
    for (int i = threadIdx.x; i < kKvWidth; i += kBlock) {
      const int head = i / kHd, d = i % kHd;
      v_cache[((block * kHkv + head) * kBs + offset) * kHd + d] = toKv(src[kQWidth + kKvWidth + i]);
    }
  }
}
)cuda";

constexpr const char *kInt8Template = R"cuda(${CONSTANTS}
// Params: (const float *qkv, const int *positions, const long long *kv_slots, float *q_out,
//          signed char *k_cache, signed char *v_cache, float *k_scales, float *v_scales, int T)
// At most one block per SM needs to fit: without the 1, ptxas caps the kernel at 32 registers
// (full occupancy) and spills on sm_80/sm_90; a step launches only T blocks anyway.
extern "C" __global__ void __launch_bounds__(kBlock, 1)
${ENTRY}(const float *__restrict__ qkv, const int *__restrict__ positions,
         const long long *__restrict__ kv_slots, float *__restrict__ q_out,
         signed char *__restrict__ k_cache, signed char *__restrict__ v_cache,
         float *__restrict__ k_scales, float *__restrict__ v_scales, int T) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const float *src;
    float pos;
    const long long slot = startRow(qkv, positions, kv_slots, q_out, row, &src, &pos);
    if (slot < 0)
      continue; // padding: q only
    const long long block = slot / kBs, offset = slot % kBs;
    for (int head = warp; head < kHkv; head += kBlock / 32) {
      const long long r = (block * kHkv + head) * kBs + offset; // the cache row
      const float *k = src + kQWidth + head * kHd;
      const float *v = src + kQWidth + kKvWidth + head * kHd;
      storeRowI8([&](int d) { return rotatedAt(k, d, pos); }, k_cache + r * kHd, k_scales + r, lane);
      storeRowI8([&](int d) { return v[d]; }, v_cache + r * kHd, v_scales + r, lane);
    }
  }
}
)cuda";

} // namespace

llmrt::StatusOr<KernelSpec> emitRopeKvStoreKernel(const RopeKvStoreParams &p) {
  const KvCacheParams &c = p.cache;
  const RopeParams &r = p.rope;
  if (c.numKvHeads <= 0 || c.headDim <= 0 || c.headDim > 1024 || c.headDim % 2 != 0 ||
      c.blockSize <= 0 || c.blockSize > 4096 || r.numHeads <= 0 || r.numHeads % c.numKvHeads != 0 ||
      r.headDim != c.headDim || (r.numHeads + 2 * c.numKvHeads) * c.headDim > detail::kMaxDim)
    return llmrt::invalid_argument(
        "rope_kv_store: heads " + std::to_string(r.numHeads) + " / kv_heads " + std::to_string(c.numKvHeads) +
        ", head_dim " + std::to_string(c.headDim) + " (even, at most 1024, the rotation's " +
        std::to_string(r.headDim) + "), block_size " + std::to_string(c.blockSize) +
        " (at most 4096) out of range");
  if (!kvCacheHasKernels(c.kvDtype))
    return llmrt::unimplemented("rope_kv_store: kv dtype '" + c.kvDtype +
                                "' has no GPU kernel (f32, bf16, f16, fp8, int8)");
  const bool i8 = c.kvDtype == "int8";
  ASSIGN_OR_RETURN(std::string rotation, detail::ropeRotationSource(r));
  // f32: one thread per q pair; int8: the same, and one warp per kv head row (up to 8 warps).
  int block = detail::elementwiseBlockSize(r.numHeads * r.headDim / 2);
  if (i8)
    block = std::max<int>(block, 32 * static_cast<int>(std::min<int64_t>(8, c.numKvHeads)));
  char theta[32];
  std::snprintf(theta, sizeof(theta), "%.17g", r.theta);
  std::string constants = detail::substitute(kConstants, {{"H", std::to_string(r.numHeads)},
                                                          {"HKV", std::to_string(c.numKvHeads)},
                                                          {"HD", std::to_string(c.headDim)},
                                                          {"BS", std::to_string(c.blockSize)},
                                                          {"STYLE", r.style},
                                                          {"TYPE", r.ropeType},
                                                          {"THETA", theta},
                                                          {"KV", c.kvDtype},
                                                          {"BLOCK", std::to_string(block)},
                                                          {"NEOX", r.style == "neox" ? "true" : "false"},
                                                          {"ROTATION", rotation},
                                                          {"ROW_STORE", i8 ? detail::kInt8RowStore : ""}});
  std::string body = i8 ? detail::substitute(kInt8Template, {{"CONSTANTS", constants}})
                        : detail::substitute(kTemplate, {{"CONSTANTS", constants},
                                                         {"KV_ELEMENT", detail::kvElementSource(c.kvDtype)},
                                                         {"ELEM", detail::kvElemType(c.kvDtype)}});
  return detail::finishSpec("rope_kv_store",
                            "llm_rope_kv_store_h" + std::to_string(r.numHeads) + "_" +
                                std::to_string(c.numKvHeads) + "_d" + std::to_string(c.headDim) + "_b" +
                                std::to_string(c.blockSize) + detail::kvEntrySuffix(c.kvDtype),
                            body, block, "rows");
}

} // namespace llmc

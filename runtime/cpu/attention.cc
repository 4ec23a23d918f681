// KV store and causal paged attention over the block tables (layout block_head_slot_dim).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/kernels.h"

namespace llmrt::cpu {
namespace {

inline int64_t slot_offset(const KvLayer& kv, int64_t block, int64_t offset, int head) {
  return ((block * kv.num_kv_heads + head) * kv.block_size + offset) * kv.head_dim;
}

}  // namespace

void kv_store(const float* k, const float* v, int64_t rows, const int64_t* slots,
              const KvLayer& kv, ThreadPool& pool) {
  const int64_t width = static_cast<int64_t>(kv.num_kv_heads) * kv.head_dim;
  const size_t bytes = static_cast<size_t>(kv.head_dim) * sizeof(float);
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        const int64_t dst = slot_offset(kv, block, off, h);
        std::memcpy(kv.k + dst, k + t * width + static_cast<int64_t>(h) * kv.head_dim, bytes);
        std::memcpy(kv.v + dst, v + t * width + static_cast<int64_t>(h) * kv.head_dim, bytes);
      }
    }
  });
}

void paged_attention(const float* q, int64_t rows, const AttentionBatch& batch, const KvLayer& kv,
                     int num_heads, float scale, int sliding_window, float* out, float* scratch,
                     int64_t scratch_stride, ThreadPool& pool) {
  const int hd = kv.head_dim;
  const int group = num_heads / kv.num_kv_heads;
  const int64_t width = static_cast<int64_t>(num_heads) * hd;
  const int64_t bs = kv.block_size;
  pool.parallel_for(rows * num_heads, [&](int64_t b, int64_t e, int worker) {
    float* scores = scratch + worker * scratch_stride;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / num_heads;
      const int h = static_cast<int>(item % num_heads);
      float* o = out + t * width + static_cast<int64_t>(h) * hd;
      const int32_t s = batch.seq_of_row[t];
      if (s < 0) {
        std::memset(o, 0, static_cast<size_t>(hd) * sizeof(float));
        continue;
      }
      const int64_t p = batch.positions[t];
      const int64_t lo = sliding_window > 0 ? std::max<int64_t>(0, p - sliding_window + 1) : 0;
      const int32_t* table =
          batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
      const float* qh = q + t * width + static_cast<int64_t>(h) * hd;
      const int kvh = h / group;
      float mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        const float* kj = kv.k + slot_offset(kv, table[j / bs], j % bs, kvh);
        const float sc = dot(qh, kj, hd) * scale;
        scores[j - lo] = sc;
        mx = std::max(mx, sc);
      }
      float sum = 0.0f;
      for (int64_t j = lo; j <= p; ++j) {
        const float ex = std::exp(scores[j - lo] - mx);
        scores[j - lo] = ex;
        sum += ex;
      }
      std::memset(o, 0, static_cast<size_t>(hd) * sizeof(float));
      for (int64_t j = lo; j <= p; ++j) {
        const float* vj = kv.v + slot_offset(kv, table[j / bs], j % bs, kvh);
        axpy(scores[j - lo], vj, o, hd);
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < hd; ++d) o[d] *= inv;
    }
  });
}

}  // namespace llmrt::cpu

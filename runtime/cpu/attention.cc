// KV store and causal paged attention over the block tables (layout block_head_slot_dim).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"
#include "runtime/quant/quant_format.h"

namespace llmrt::cpu {
namespace {

inline int64_t slot_row(const KvLayer& kv, int64_t block, int64_t offset, int head) {
  return (block * kv.num_kv_heads + head) * kv.block_size + offset;
}

inline int64_t slot_offset(const KvLayer& kv, int64_t block, int64_t offset, int head) {
  return slot_row(kv, block, offset, head) * kv.head_dim;
}

// One head row of an int8 cache.
void store_row_i8(const float* x, int hd, int8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int d = 0; d < hd; ++d) codes[d] = static_cast<int8_t>(std::lrint(x[d] * inv));
  *scale = s;
}

// One head row of an fp8 E4M3 cache, each element rounded to nearest even, saturating.
void store_row_fp8(const float* x, int hd, uint8_t* out) {
  for (int d = 0; d < hd; ++d) out[d] = quant::float_to_e4m3(x[d]);
}

// One head row of a 16-bit cache, each element rounded to nearest even.
void store_row_16(const float* x, int hd, bool bf16, uint16_t* out) {
  if (bf16)
    for (int d = 0; d < hd; ++d) out[d] = quant::float_to_bf16(x[d]);
  else
    for (int d = 0; d < hd; ++d) out[d] = quant::float_to_half(x[d]);
}

// Floats a 16-bit, fp8 or int8 cache's rows are widened into at a time (attention), per thread: at
// least 4 rows, as the executor rejects heads over 1024.
constexpr int64_t kWideFloats = 4096;

// The f32 rows of K or V at (block, offset .. offset + count - 1, head): in place for f32,
// widened into wide (count * head_dim <= kWideFloats) otherwise: exactly for 16-bit and fp8
// caches, code * scale per row for int8 (the rows of a block's head are contiguous, so are their scales).
inline const float* kv_rows(const KvLayer& kv, bool is_k, int64_t block, int64_t offset, int head,
                            int64_t count, float* wide) {
  if (kv.k) return (is_k ? kv.k : kv.v) + slot_offset(kv, block, offset, head);
  if (kv.k8) {
    const int64_t row = slot_row(kv, block, offset, head);
    const int8_t* c = (is_k ? kv.k8 : kv.v8) + row * kv.head_dim;
    const float* s = (is_k ? kv.ks : kv.vs) + row;
    for (int64_t r = 0; r < count; ++r)
      vec::dequant_i8(c + r * kv.head_dim, s[r], kv.head_dim, wide + r * kv.head_dim);
    return wide;
  }
  if (kv.kf8) {
    vec::widen_e4m3((is_k ? kv.kf8 : kv.vf8) + slot_offset(kv, block, offset, head), count * kv.head_dim, wide);
    return wide;
  }
  const uint16_t* e = (is_k ? kv.k16 : kv.v16) + slot_offset(kv, block, offset, head);
  const int64_t n = count * kv.head_dim;
  if (kv.bf16)
    vec::widen_bf16(e, n, wide);
  else
    vec::widen_f16(e, n, wide);
  return wide;
}

// Head h of one token's k and v rows into the cache at `slot`.
void store_head(const float* kx, const float* vx, int64_t slot, int h, const KvLayer& kv) {
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
  if (kv.k8) {
    const int64_t row = slot_row(kv, block, off, h);
    store_row_i8(kx, kv.head_dim, kv.k8 + row * kv.head_dim, kv.ks + row);
    store_row_i8(vx, kv.head_dim, kv.v8 + row * kv.head_dim, kv.vs + row);
    return;
  }
  const int64_t dst = slot_offset(kv, block, off, h);
  if (kv.kf8) {
    store_row_fp8(kx, kv.head_dim, kv.kf8 + dst);
    store_row_fp8(vx, kv.head_dim, kv.vf8 + dst);
    return;
  }
  if (kv.k16) {
    store_row_16(kx, kv.head_dim, kv.bf16, kv.k16 + dst);
    store_row_16(vx, kv.head_dim, kv.bf16, kv.v16 + dst);
    return;
  }
  const size_t bytes = static_cast<size_t>(kv.head_dim) * sizeof(float);
  std::memcpy(kv.k + dst, kx, bytes);
  std::memcpy(kv.v + dst, vx, bytes);
}

}  // namespace

void kv_store(const float* k, const float* v, int64_t rows, const int64_t* slots,
              const KvLayer& kv, ThreadPool& pool) {
  const int64_t width = static_cast<int64_t>(kv.num_kv_heads) * kv.head_dim;
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      if (slots[t] < 0) continue;
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        const int64_t at = t * width + static_cast<int64_t>(h) * kv.head_dim;
        store_head(k + at, v + at, slots[t], h, kv);
      }
    }
  });
}

void rope_kv_store(const float* qkv, int64_t rows, int num_heads, const int32_t* positions,
                   const float* inv_freq, bool interleaved, const int64_t* slots, const KvLayer& kv,
                   float* q, ThreadPool& pool) {
  const int hd = kv.head_dim;
  const int64_t q_width = static_cast<int64_t>(num_heads) * hd;
  const int64_t kv_width = static_cast<int64_t>(kv.num_kv_heads) * hd;
  const int64_t width = q_width + 2 * kv_width;
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    float cs[kMaxRopeHeadDim / 2];
    float sn[kMaxRopeHeadDim / 2];
    float k_rot[kMaxRopeHeadDim];
    for (int64_t t = b; t < e; ++t) {
      const float* row = qkv + t * width;
      rope_angles(positions[t], inv_freq, hd / 2, cs, sn);
      rope_heads(row, num_heads, hd, cs, sn, interleaved, q + t * q_width);
      if (slots[t] < 0) continue;
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        const int64_t at = static_cast<int64_t>(h) * hd;
        rope_heads(row + q_width + at, 1, hd, cs, sn, interleaved, k_rot);
        store_head(k_rot, row + q_width + kv_width + at, slots[t], h, kv);
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
    alignas(64) float wide_scratch[kWideFloats];  // a 16-bit, fp8 or int8 cache's rows, widened
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
      // Rows of a block run at a time: all of it in place (f32), what fits the widening buffer
      // otherwise (the same numbers as an f32 cache holding the rounded / dequantized values).
      // A block holds a head's slots as contiguous rows: one linear_range per run (the same
      // products and order as dot(), several keys at a time).
      const int64_t run_cap = kv.k ? bs : std::max<int64_t>(1, kWideFloats / hd);
      for (int64_t j = lo; j <= p;) {
        const int64_t cnt = std::min<int64_t>({bs - j % bs, p + 1 - j, run_cap});
        linear_range(qh, nullptr, 0, 1, hd, kv_rows(kv, true, table[j / bs], j % bs, kvh, cnt, wide_scratch),
                     cnt, nullptr, scores + (j - lo), cnt);
        j += cnt;
      }
      for (int64_t j = lo; j <= p; ++j) {
        const float sc = scores[j - lo] * scale;
        scores[j - lo] = sc;
        mx = std::max(mx, sc);
      }
      vec::exp_shifted(scores, p - lo + 1, mx);
      float sum = 0.0f;
      for (int64_t j = lo; j <= p; ++j) sum += scores[j - lo];
      std::memset(o, 0, static_cast<size_t>(hd) * sizeof(float));
      for (int64_t j = lo; j <= p;) {  // per run of contiguous V rows
        const int64_t cnt = std::min<int64_t>({bs - j % bs, p + 1 - j, run_cap});
        axpy_rows(scores + (j - lo), cnt, kv_rows(kv, false, table[j / bs], j % bs, kvh, cnt, wide_scratch), hd,
                  o, hd);
        j += cnt;
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < hd; ++d) o[d] *= inv;
    }
  });
}

}  // namespace llmrt::cpu

// KV store and causal paged attention over the block tables (layout block_head_slot_dim).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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
  auto lo_of = [&](int64_t p) { return sliding_window > 0 ? std::max<int64_t>(0, p - sliding_window + 1) : 0; };
  // A unit: (token, head) rows of one sequence and one kv head, their scores taken together (each
  // K row loaded once for all of them, and widened once for narrow caches). Each score is a dot
  // product in linear_range's canonical order, so a row's numbers do not depend on its unit.
  // Rows per unit: what the scratch holds, R rows of at most the longest span + R - 1 (their
  // spans' union under a sliding window).
  int64_t longest = 1;
  for (int64_t t = 0; t < rows; ++t)
    if (batch.seq_of_row[t] >= 0)
      longest = std::max<int64_t>(longest, batch.positions[t] - lo_of(batch.positions[t]) + 1);
  int64_t cap = 1;
  while (cap < kAttentionUnitRows && (cap + 1) * (longest + cap) <= scratch_stride) ++cap;
  // Runs of rows of one sequence (a step's rows of a sequence are adjacent); padding rows alone.
  struct Run { int64_t t0, t1; };
  struct Unit { int64_t t0, t1; int h0; };
  static thread_local std::vector<Run> runs;  // (the caller's thread; kept to spare the allocations)
  static thread_local std::vector<Unit> units;
  runs.clear();
  units.clear();
  for (int64_t t = 0; t < rows;) {
    int64_t e = t + 1;
    if (batch.seq_of_row[t] >= 0)
      while (e < rows && batch.seq_of_row[e] == batch.seq_of_row[t]) ++e;
    runs.push_back({t, e});
    t = e;
  }
  // A GQA group's heads share a unit where that leaves units enough for the threads (not at a
  // batch-1 decode step, whose num_heads one-row items keep every thread busy).
  auto units_for = [&](int64_t heads) {
    const int64_t tokens = std::max<int64_t>(1, cap / heads);
    int64_t n = 0;
    for (const Run& r : runs) n += (r.t1 - r.t0 + tokens - 1) / tokens;
    return n * (num_heads / heads);
  };
  const int64_t heads = cap >= group && units_for(group) >= 2 * pool.num_threads() ? group : 1;
  const int64_t tokens = std::max<int64_t>(1, cap / heads);
  for (const Run& r : runs)
    for (int64_t t = r.t0; t < r.t1; t += tokens)
      for (int h = 0; h < num_heads; h += static_cast<int>(heads))
        units.push_back({t, std::min(r.t1, t + tokens), h});
  const std::vector<Unit>& todo = units;  // this thread's list, for the workers
  pool.parallel_for(static_cast<int64_t>(todo.size()), [&](int64_t b, int64_t e, int worker) {
    float* scores = scratch + worker * scratch_stride;
    alignas(64) float wide_scratch[kWideFloats];  // a 16-bit, fp8 or int8 cache's rows, widened
    int32_t idx[kAttentionUnitRows];              // the unit's q rows (token-major)
    for (int64_t ui = b; ui < e; ++ui) {
      const Unit& u = todo[ui];
      const int32_t s = batch.seq_of_row[u.t0];
      if (s < 0) {
        for (int64_t t = u.t0; t < u.t1; ++t)
          std::memset(out + t * width + static_cast<int64_t>(u.h0) * hd, 0,
                      static_cast<size_t>(heads * hd) * sizeof(float));
        continue;
      }
      const int32_t* table = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
      const int kvh = u.h0 / group;
      int64_t lo_u = INT64_MAX, p_u = 0, n = 0;
      for (int64_t t = u.t0; t < u.t1; ++t) {
        lo_u = std::min(lo_u, lo_of(batch.positions[t]));
        p_u = std::max<int64_t>(p_u, batch.positions[t]);
        for (int64_t h = 0; h < heads; ++h) idx[n++] = static_cast<int32_t>(t * num_heads + u.h0 + h);
      }
      const int64_t span = p_u - lo_u + 1;  // each row's scores: a row of `span` at scores + i * span
      // Rows of a block run at a time: all of it in place (f32), what fits the widening buffer
      // otherwise (the same numbers as an f32 cache holding the rounded / dequantized values).
      // A block holds a head's slots as contiguous rows: one linear_range per run.
      const int64_t run_cap = kv.k ? bs : std::max<int64_t>(1, kWideFloats / hd);
      for (int64_t j = lo_u; j <= p_u;) {
        const int64_t cnt = std::min<int64_t>({bs - j % bs, p_u + 1 - j, run_cap});
        linear_range(q, idx, 0, n, hd, kv_rows(kv, true, table[j / bs], j % bs, kvh, cnt, wide_scratch), cnt,
                     nullptr, scores + (j - lo_u), span);
        j += cnt;
      }
      // Each row's softmax over its own span, in place.
      float* sc[kAttentionUnitRows];
      float* o[kAttentionUnitRows];
      int64_t lo_r[kAttentionUnitRows], p_r[kAttentionUnitRows];
      float inv[kAttentionUnitRows];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = idx[i] / num_heads;
        p_r[i] = batch.positions[t];
        lo_r[i] = lo_of(p_r[i]);
        sc[i] = scores + i * span + (lo_r[i] - lo_u);  // this row's scores, from position lo_r[i]
        o[i] = out + static_cast<int64_t>(idx[i]) * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= p_r[i] - lo_r[i]; ++j) {
          sc[i][j] *= scale;
          mx = std::max(mx, sc[i][j]);
        }
        vec::exp_shifted(sc[i], p_r[i] - lo_r[i] + 1, mx);
        float sum = 0.0f;
        for (int64_t j = 0; j <= p_r[i] - lo_r[i]; ++j) sum += sc[i][j];
        inv[i] = 1.0f / sum;
        std::memset(o[i], 0, static_cast<size_t>(hd) * sizeof(float));
      }
      // P V a run of V rows at a time, read (and widened) once for the unit: the rows that take all
      // of a run together, the others their part of it; every row's sums in position order.
      for (int64_t j = lo_u; j <= p_u;) {
        const int64_t cnt = std::min<int64_t>({bs - j % bs, p_u + 1 - j, run_cap});
        const float* vr = kv_rows(kv, false, table[j / bs], j % bs, kvh, cnt, wide_scratch);
        const float* a_all[kAttentionUnitRows];
        float* y_all[kAttentionUnitRows];
        int m = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j0 = std::max(j, lo_r[i]), j1 = std::min(j + cnt - 1, p_r[i]);
          if (j0 > j1) continue;
          if (j0 == j && j1 == j + cnt - 1) {
            a_all[m] = sc[i] + (j - lo_r[i]);
            y_all[m++] = o[i];
          } else {
            axpy_rows(sc[i] + (j0 - lo_r[i]), j1 - j0 + 1, vr + (j0 - j) * hd, hd, o[i], hd);
          }
        }
        if (m > 0) vec::axpy_rows_multi(a_all, m, cnt, vr, hd, y_all, hd);
        j += cnt;
      }
      for (int64_t i = 0; i < n; ++i)
        for (int d = 0; d < hd; ++d) o[i][d] *= inv[i];
    }
  });
}

}  // namespace llmrt::cpu

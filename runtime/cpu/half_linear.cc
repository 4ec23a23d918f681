// Linear, logits and embedding over dense f16 / bf16 weight matrices (llmc --weight-dtype).
//
// Each block of weight rows is widened to f32 (exact: every f16 and bf16 value is an f32 value)
// into the worker's scratch, then the f32 kernel runs on it: the results are bit-identical to a
// plan holding the same values in f32, and the weights stream from memory at half the bytes.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"
#include "runtime/quant/quant_format.h"

namespace llmrt::cpu {
namespace {

void widen(const HalfMatrix& w, int64_t row, int64_t count, float* out) {
  const uint16_t* src = w.data + row * w.k;
  const int64_t n = count * w.k;
  if (w.bf16)
    vec::widen_bf16(src, n, out);
  else
    vec::widen_f16(src, n, out);
}

}  // namespace

void linear_h(const float* x, const int32_t* rows, int64_t num_rows, const HalfMatrix& w,
              const float* bias, float* y, QuantScratch& sc, ThreadPool& pool) {
  if (num_rows <= 0 || w.n <= 0) return;
  sc.ensure(num_rows, w.k, pool.num_threads());
  split_linear_work(num_rows, w.n, pool, [&](int64_t t0, int64_t t1, int64_t n0, int64_t n1, int worker) {
    float* deq = sc.deq + static_cast<int64_t>(worker) * QuantScratch::kDeqRows * w.k;
    for (int64_t j = n0; j < n1; j += QuantScratch::kDeqRows) {
      const int64_t cnt = std::min<int64_t>(QuantScratch::kDeqRows, n1 - j);
      widen(w, j, cnt, deq);
      linear_range(x, rows, t0, t1, w.k, deq, cnt, bias ? bias + j : nullptr, y + j, w.n);
    }
  });
}

void embedding_h(const int32_t* tokens, int64_t num_tokens, const HalfMatrix& table, float* out,
                 ThreadPool& pool) {
  pool.parallel_for(num_tokens, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) widen(table, tokens[t], 1, out + t * table.k);
  });
}

}  // namespace llmrt::cpu

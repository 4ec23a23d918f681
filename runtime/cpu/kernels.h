// CPU kernels of the forward program (runtime/plan/PROGRAM.md), fp32 storage and accumulation.
//
// Numerical contract (the "reference" contract of the CPU backend):
//  * Every dot product of length n is computed in the canonical lane-8 order: eight partial sums,
//    lane l accumulating elements k = l, l+8, ... (k < n & ~7) with fused multiply-adds, then
//    combined as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the n % 8 tail elements are added
//    in order with fused multiply-adds. dot() below is that function; linear, logits, rms_norm
//    (sum of squares) and attention scores all use it. The AVX2 and scalar implementations are
//    bit-identical.
//  * Softmax: max, exp and sum run over the attended positions in increasing order; the output is
//    accumulated over positions in increasing order with fused multiply-adds (axpy), then
//    multiplied by 1 / sum.
//  * Threads split rows, output columns and heads only, never a reduction, so results do not
//    depend on the thread count, on which other rows are in the batch, or on chunking.
// Kernels trust their arguments (the executor validates plans and batches first).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/quant/quant_format.h"

namespace llmrt::cpu {

// ---- primitives (runtime dispatch between AVX2+FMA and scalar) ----

/// Canonical lane-8 dot product (see the contract above).
float dot(const float* a, const float* b, int64_t n);
/// y[i] = fma(a, x[i], y[i]).
void axpy(float a, const float* x, float* y, int64_t n);
/// y += a[j] * x_j for j < count in increasing j, x_j = x + j * x_stride: the same fused
/// multiply-adds as count calls of axpy (y stays in registers on the SIMD path).
void axpy_rows(const float* a, int64_t count, const float* x, int64_t x_stride, float* y, int64_t n);

// ---- embedding.cc ----

/// out[t, :] = table[tokens[t], :]. table is [vocab, dim].
void embedding(const int32_t* tokens, int64_t num_tokens, const float* table, int64_t dim,
               float* out, ThreadPool& pool);

// ---- rms_norm.cc ----

/// Grouped RMSNorm over rows of width `dim`: each group of `group` columns is normalized
/// separately, y = x / sqrt(mean(x^2) + eps) * w, w has `group` entries. dim % group == 0.
/// y may equal x (in place).
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* w, int64_t group, float eps,
              float* y, ThreadPool& pool);
/// sum = x + residual; normed = rms_norm(sum) with w[dim]. sum may equal x or residual.
void add_rms_norm(const float* x, const float* residual, int64_t rows, int64_t dim,
                  const float* w, float eps, float* normed, float* sum, ThreadPool& pool);

// ---- add.cc, silu_mul.cc, split.cc ----

/// c = a + b over rows x width elements. c may equal a or b.
void add(const float* a, const float* b, int64_t rows, int64_t width, float* c, ThreadPool& pool);
/// out[t, i] = silu(gate[t, i]) * up[t, i], i < inter; gate/up rows have the given strides
/// (fused gate_up: gate = gu, up = gu + inter, both strides 2 * inter).
void silu_mul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
              int64_t rows, int64_t inter, float* out, ThreadPool& pool);
/// Column gather: y[t, j] = x[t, perm[j]] (perm a permutation of 0..width-1).
void permute_columns(const float* x, int64_t rows, int64_t width, const int32_t* perm, float* y,
                     ThreadPool& pool);
/// Column split: outs[i][t, :] = x[t, off_i : off_i + sizes[i]].
void split(const float* x, int64_t rows, int64_t width, std::span<const int64_t> sizes,
           float* const* outs, ThreadPool& pool);

// ---- linear.cc ----

/// y[t, :] = x[r(t), :] . w^T + bias, with r(t) = rows ? rows[t] : t, for t < num_rows.
/// x rows have width k, w is [n, k], bias is [n] or null, y is [num_rows, n].
void linear(const float* x, const int32_t* rows, int64_t num_rows, int64_t k, const float* w,
            int64_t n, const float* bias, float* y, ThreadPool& pool);

/// One thread's share of linear(): rows t0..t1 of x against the ncols weight rows at w; y points
/// at output column 0 of the range with row stride y_stride; bias at its first entry or null.
void linear_range(const float* x, const int32_t* rows, int64_t t0, int64_t t1, int64_t k,
                  const float* w, int64_t ncols, const float* bias, float* y, int64_t y_stride);

/// How linear kernels share work: threads take contiguous ranges of output columns (16 at a
/// time); with fewer column blocks than threads (tiny n) they take token ranges instead. Neither
/// splits a dot product. body(t0, t1, n0, n1, worker).
template <typename Body>
void split_linear_work(int64_t num_rows, int64_t n, ThreadPool& pool, Body&& body) {
  constexpr int64_t kUnit = 16;
  const int64_t units = (n + kUnit - 1) / kUnit;
  if (units >= pool.num_threads() || num_rows == 1) {
    pool.parallel_for(units, [&](int64_t b, int64_t e, int worker) {
      body(0, num_rows, b * kUnit, e * kUnit < n ? e * kUnit : n, worker);
    });
  } else {
    pool.parallel_for(num_rows, [&](int64_t b, int64_t e, int worker) { body(b, e, 0, n, worker); });
  }
}

// ---- quant_linear.cc: linear over quantized weights (runtime/quant/quant_format.h) ----
//
// Two numerical contracts; the plan records which one it was compiled for (--cpu-kernels):
//  * reference: each weight row is dequantized to f32 (exactly: quant_format.h), then the f32
//    linear above runs, so the results are bit-identical to a plan holding the dequantized
//    weights as f32.
//  * fast (llama.cpp's way): activations are quantized per block of 32 to int8 on the fly,
//      amax = max |x_i|, d = amax / 127, id = d != 0 ? 1 / d : 0, q_i = lrint(x_i * id)
//      (round to nearest even), isum = sum q_i, s = d * float(isum);
//    against weight group codes c_i (sym int4: nibble - 8; sym int8: the int8; zp: q - z;
//    min: q; nl: kNlGrid[nibble]) each block b gives the exact integer P_b = sum over its 32 elements of c_i * q_i;
//    in block order acc = fma(dw * dx_b, float(P_b), acc) and msum = fma(m, s_b, msum) (min
//    formats; else msum = 0); y = acc + msum, then + bias. Scales of 16 (int8 groups, int4 /
//    int8 sub-scales) split a block in two: P_b's halves, each with its scale dw, in element
//    order; min formats then take msum = fma(m, s_h, msum) per half with s_h = d_b * float(the
//    half's sum of q_i), in the same order. With sub-scales
//    dw and m are the sub-block's d * sc_j and dmin * mc_j (exact f32 products), so the
//    results are those of the expanded format (quant::expand_row). (|P_b| < 2^24,
//    so float(P_b) is exact.) The scalar implementation is the oracle; the SIMD ones (cpu_interleaved8 layout:
//    8 weight rows per 32-bit lane, no horizontal sums; AVX-512: two tiles, 16 rows, at a time)
//    are bit-identical.
//  Threads split output columns or tokens only (split_linear_work), so a row's result never
//  depends on the batch.

enum class CpuContract : uint8_t { kReference = 0, kFast = 1 };
const char* contract_name(CpuContract c);
StatusOr<CpuContract> parse_contract(std::string_view name);

/// A quantized [n, k] matrix in the cpu_row_groups or cpu_interleaved8 layout.
struct QuantMatrix {
  const uint8_t* data = nullptr;
  quant::Format format;
  int64_t n = 0, k = 0;
  int64_t row_bytes = 0;  // of one row (a tile of a tiled layout is kTileRows rows)
  quant::Layout layout = quant::Layout::kRowGroups;
};

/// Scratch of the quantized kernels, sized once (ensure) so the decode loop never allocates.
class QuantScratch {
 public:
  /// Makes room for `rows` activation rows of width up to k_max and `threads` workers.
  void ensure(int64_t rows, int64_t k_max, int threads);
  int8_t* qx = nullptr;     // [rows, k] int8 activations
  float* dx = nullptr;      // [rows, k / 32] block scales
  float* sx = nullptr;      // [rows, k / 32] d * sum(q)
  int32_t* ix = nullptr;    // [rows, k / 32] sum(q)
  int32_t* ih = nullptr;    // [rows, k / 16] sum(q) per half block (the tiles of 16-element scales)
  float* sh = nullptr;      // [rows, k / 16] d * float(sum(q)) per half block (their mins' steps)
  float* deq = nullptr;     // per thread: kDeqRows rows of k floats (reference contract)
  uint8_t* rowbuf = nullptr;  // per thread: one row of any format in the row layout
  int64_t rowbuf_stride = 0;
  static constexpr int64_t kDeqRows = 16;
  int64_t rows_cap = 0, k_cap = 0;
  int threads_cap = 0;
  /// Bytes held.
  size_t bytes() const;

 private:
  std::vector<int8_t> qx_;
  std::vector<float> dx_, sx_, sh_, deq_;
  std::vector<int32_t> ix_, ih_;
  std::vector<uint8_t> rowbuf_;
};

/// y[t, :] = x[r(t), :] . dequant(w)^T + bias under `contract` (see above).
void linear_q(const float* x, const int32_t* rows, int64_t num_rows, const QuantMatrix& w,
              const float* bias, float* y, CpuContract contract, QuantScratch& scratch,
              ThreadPool& pool);
/// out[t, :] = dequantized row tokens[t] of the [vocab, dim] table.
void embedding_q(const int32_t* tokens, int64_t num_tokens, const QuantMatrix& table, float* out,
                 QuantScratch& scratch, ThreadPool& pool);

/// Test hooks: the fast contract's activation quantization and one output element, scalar
/// (dot_q_fast_scalar reads cpu_row_groups and cpu_interleaved8; other layouts are unpacked to
/// rows first, as linear_q does).
void quantize_activations_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s,
                                 int32_t* sums = nullptr);
float dot_q_fast_scalar(const QuantMatrix& w, int64_t row, const int8_t* qx, const float* dx,
                        const float* sx);

// ---- half_linear.cc: dense f16 / bf16 weights, widened to f32 row block by row block ----

struct HalfMatrix {
  const uint16_t* data = nullptr;  // [n, k] row-major
  bool bf16 = true;                // else IEEE f16
  int64_t n = 0, k = 0;
};
/// linear() over the widened weights: bit-identical to linear() on f32 weights of equal value.
/// rows as in linear() (logits pass their indices). Uses scratch.deq.
void linear_h(const float* x, const int32_t* rows, int64_t num_rows, const HalfMatrix& w,
              const float* bias, float* y, QuantScratch& scratch, ThreadPool& pool);
/// out[t, :] = widened row tokens[t] of the [vocab, dim] table.
void embedding_h(const int32_t* tokens, int64_t num_tokens, const HalfMatrix& table, float* out,
                 ThreadPool& pool);

// ---- logits.cc ----

/// out[i, :] = x[indices[i], :] . w^T for i < num_indices; w is [vocab, dim].
void logits(const float* x, int64_t dim, const int32_t* indices, int64_t num_indices,
            const float* w, int64_t vocab, float* out, ThreadPool& pool);

// ---- rope.cc ----

struct RopeConfig {
  int head_dim = 0;
  double theta = 10000.0;
  bool interleaved = false;       // false: "neox" (rotate halves); true: rotate adjacent pairs
  enum class Type { kDefault, kLinear, kLlama3 } type = Type::kDefault;
  double factor = 1.0;            // linear, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position = 8192;  // llama3
};
/// Parses "default" | "linear" | "llama3".
StatusOr<RopeConfig::Type> parse_rope_type(std::string_view name);
/// The head_dim / 2 inverse frequencies, as Hugging Face transformers computes them
/// (_compute_default/linear/llama3_parameters), in f32. Errors on invalid parameters.
StatusOr<std::vector<float>> rope_inv_freq(const RopeConfig& config);
inline constexpr int kMaxRopeHeadDim = 1024;
/// cs[i], sn[i] = cos, sin of position * inv_freq[i] (f32), for i < half.
void rope_angles(int32_t position, const float* inv_freq, int half, float* cs, float* sn);
/// Rotates the num_heads heads of one row x into y (y may equal x) by rope_angles' cs, sn.
void rope_heads(const float* x, int num_heads, int head_dim, const float* cs, const float* sn,
                bool interleaved, float* y);
/// Rotates every head of every row: angle_i = positions[t] * inv_freq[i] (f32).
/// y may equal x (in place).
void rope(const float* x, int64_t rows, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, bool interleaved, float* y, ThreadPool& pool);

// ---- attention.cc ----

/// One layer of the paged KV cache, layout block_head_slot_dim:
/// [num_blocks, num_kv_heads, block_size, head_dim].
/// With an int8 cache (k8/v8 set, k/v null) every (block, head, slot) row of head_dim codes has
/// one f32 scale in ks/vs ([num_blocks, num_kv_heads, block_size]): value = code * scale, the
/// scale amax / 127 of that row alone, so a later token never overflows an earlier scale.
/// With a 16-bit cache (k16/v16 set, k/v null) every element is a bf16 (bf16 true) or IEEE
/// half, rounded to nearest even when stored; read back exactly.
struct KvLayer {
  float* k = nullptr;
  float* v = nullptr;
  uint16_t* k16 = nullptr;
  uint16_t* v16 = nullptr;
  bool bf16 = false;
  uint8_t* kf8 = nullptr;  // fp8 E4M3 cache (quant::float_to_e4m3)
  uint8_t* vf8 = nullptr;
  int8_t* k8 = nullptr;
  int8_t* v8 = nullptr;
  float* ks = nullptr;
  float* vs = nullptr;
  int64_t num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
};

/// K/V[slot] = k/v[t] for every t with slots[t] >= 0. k, v are [rows, num_kv_heads * head_dim].
/// int8 cache: each head's row is stored as codes lrint(x / s), s = amax / 127 (0 for all-zero);
/// 16-bit cache: each element rounded to nearest even (quant::float_to_bf16 / float_to_half);
/// fp8 cache: each element rounded to nearest even E4M3, saturating at +-448 (quant::float_to_e4m3).
void kv_store(const float* k, const float* v, int64_t rows, const int64_t* slots,
              const KvLayer& kv, ThreadPool& pool);

/// rope + kv_store of a fused projection qkv[rows, (num_heads + 2 * num_kv_heads) * head_dim]
/// (columns q, k, v): q[t] = rope(q columns), and for every t with slots[t] >= 0 K[slot] =
/// rope(k columns), V[slot] = v columns. The same numbers as rope of q, rope of k and kv_store.
void rope_kv_store(const float* qkv, int64_t rows, int num_heads, const int32_t* positions,
                   const float* inv_freq, bool interleaved, const int64_t* slots, const KvLayer& kv,
                   float* q, ThreadPool& pool);

/// (token, head) rows of one sequence and kv head that paged_attention scores together, at most.
inline constexpr int64_t kAttentionUnitRows = 12;

/// What attention needs to know about the batch (validated by the executor).
struct AttentionBatch {
  const int32_t* positions = nullptr;     // [rows]
  const int32_t* seq_of_row = nullptr;    // [rows], -1 for padding rows (output zeroed)
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
};

/// Causal GQA over the paged cache (int8 caches are dequantized, code * scale, and 16-bit and fp8
/// caches widened exactly, a block's run of rows at a time, then the f32 kernels: their results are the
/// bits of an f32 cache holding the dequantized / rounded values): row t of sequence s at position p attends to positions
/// max(0, p - window + 1) .. p (window 0 = all), head h reads kv head h / (num_heads / kv heads).
/// q and out are [rows, num_heads * head_dim]. scratch holds pool.num_threads() * scratch_stride
/// floats with scratch_stride >= the longest attended span; with R (longest + R - 1) floats it
/// scores up to R <= kAttentionUnitRows (token, head) rows of a sequence and a kv head together (the
/// same numbers: each score a dot product in linear_range's order).
void paged_attention(const float* q, int64_t rows, const AttentionBatch& batch, const KvLayer& kv,
                     int num_heads, float scale, int sliding_window, float* out, float* scratch,
                     int64_t scratch_stride, ThreadPool& pool);

}  // namespace llmrt::cpu

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

namespace llmrt::cpu {

// ---- primitives (runtime dispatch between AVX2+FMA and scalar) ----

/// Canonical lane-8 dot product (see the contract above).
float dot(const float* a, const float* b, int64_t n);
/// y[i] = fma(a, x[i], y[i]).
void axpy(float a, const float* x, float* y, int64_t n);

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
/// Column split: outs[i][t, :] = x[t, off_i : off_i + sizes[i]].
void split(const float* x, int64_t rows, int64_t width, std::span<const int64_t> sizes,
           float* const* outs, ThreadPool& pool);

// ---- linear.cc ----

/// y[t, :] = x[r(t), :] . w^T + bias, with r(t) = rows ? rows[t] : t, for t < num_rows.
/// x rows have width k, w is [n, k], bias is [n] or null, y is [num_rows, n].
void linear(const float* x, const int32_t* rows, int64_t num_rows, int64_t k, const float* w,
            int64_t n, const float* bias, float* y, ThreadPool& pool);

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
/// Rotates every head of every row: angle_i = positions[t] * inv_freq[i] (f32).
/// y may equal x (in place).
void rope(const float* x, int64_t rows, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, bool interleaved, float* y, ThreadPool& pool);

// ---- attention.cc ----

/// One layer of the paged KV cache, layout block_head_slot_dim:
/// [num_blocks, num_kv_heads, block_size, head_dim].
struct KvLayer {
  float* k = nullptr;
  float* v = nullptr;
  int64_t num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
};

/// K/V[slot] = k/v[t] for every t with slots[t] >= 0. k, v are [rows, num_kv_heads * head_dim].
void kv_store(const float* k, const float* v, int64_t rows, const int64_t* slots,
              const KvLayer& kv, ThreadPool& pool);

/// What attention needs to know about the batch (validated by the executor).
struct AttentionBatch {
  const int32_t* positions = nullptr;     // [rows]
  const int32_t* seq_of_row = nullptr;    // [rows], -1 for padding rows (output zeroed)
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
};

/// Causal GQA over the paged cache: row t of sequence s at position p attends to positions
/// max(0, p - window + 1) .. p (window 0 = all), head h reads kv head h / (num_heads / kv heads).
/// q and out are [rows, num_heads * head_dim]. scratch holds pool.num_threads() * scratch_stride
/// floats with scratch_stride >= the longest attended span.
void paged_attention(const float* q, int64_t rows, const AttentionBatch& batch, const KvLayer& kv,
                     int num_heads, float scale, int sliding_window, float* out, float* scratch,
                     int64_t scratch_stride, ThreadPool& pool);

}  // namespace llmrt::cpu

//===- KernelFamilies.h - Kernel generators per family ----------*- C++ -*-===//
//
// One generator per kernel family (one family per .cpp file), taking plain
// parameters, so they can be used and tested without MLIR. KernelEmitter.h
// extracts these parameters from `llm` ops. Errors (sizes out of range,
// unknown RoPE style/type) are InvalidArgument / Unimplemented statuses.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_KERNELFAMILIES_H
#define LLMC_CODEGEN_KERNELFAMILIES_H

#include "codegen/KernelSpec.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc {

/// llm.embedding: tokens[T] (i32), table[vocab, dim] -> [T, dim] f32. The table is stored as
/// `table`: "f32", "f16", "bf16" or a quantized format in the cuda_mma_n8 layout.
struct EmbeddingParams {
  int64_t vocab = 0;
  int64_t dim = 0;
  std::string table = "f32";
};
llmrt::StatusOr<KernelSpec> emitEmbeddingKernel(const EmbeddingParams &p);

/// llm.rms_norm: x[T, dim], w[group] -> [T, dim], normalizing each group of
/// `group` columns (dim % group == 0). llm.add_rms_norm uses group == dim.
/// Params (const float *x, const float *w, float *out[, unsigned char *q8], int T).
///
/// quantizedOutput (group == dim, dim % 32 == 0; also SiluMulParams): the kernel takes one more
/// pointer before T, `q8`, and when it is not null also writes its (normed) output as the int8
/// rows a quantize_q8 kernel would write from it (emitQuantizeQ8Kernel, bit for bit) -- the
/// input of an int8-activation GEMV that reads this output, without a kernel of its own
/// (Step.quantized_output). A null q8 skips them.
struct RmsNormParams {
  int64_t dim = 0;
  int64_t group = 0;
  float eps = 0.0f;
  bool quantizedOutput = false;
};
llmrt::StatusOr<KernelSpec> emitRmsNormKernel(const RmsNormParams &p);
/// llm.add_rms_norm: x, residual [T, dim], w[dim] -> normed, sum. Params (const float *x,
/// const float *residual, const float *w, float *normed, float *sum[, unsigned char *q8], int T).
llmrt::StatusOr<KernelSpec> emitAddRmsNormKernel(const RmsNormParams &p);

/// llm.rope with Hugging Face semantics.
struct RopeParams {
  int64_t numHeads = 0;
  int64_t headDim = 0;
  double theta = 10000.0;
  std::string style = "neox";       // "neox" (rotate halves) | "interleaved"
  std::string ropeType = "default"; // "default" | "linear" | "llama3"
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPosition = 8192;
};
/// The inverse frequency of each rotation pair (headDim / 2 values) with the
/// rope type folded in, as HF's rope init functions compute them (fp32).
llmrt::StatusOr<std::vector<float>> computeRopeInvFreq(const RopeParams &p);
llmrt::StatusOr<KernelSpec> emitRopeKernel(const RopeParams &p);

/// llm.silu_mul: gate[T, inter] * up[T, inter], or fused gate_up[T, 2*inter]
/// (gate first) -> [T, inter]. Params (const float *gate, const float *up, float *out
/// [, unsigned char *q8], int T), fused (const float *gate_up, float *out[, q8], int T);
/// quantizedOutput (inter % 32 == 0) as RmsNormParams's.
struct SiluMulParams {
  int64_t inter = 0;
  bool fused = false;
  bool quantizedOutput = false;
};
llmrt::StatusOr<KernelSpec> emitSiluMulKernel(const SiluMulParams &p);

/// llm.linear: x[T, k] * w[n, k]^T (+ bias[n]) -> y[T, n]; llm.logits the
/// same over gathered rows (gatherRows: output row r reads x row rows[r]).
/// weight: "f32" | "f16" | "bf16" (dense row-major) or a quantized format
/// name (runtime/quant/quant_format.h) stored in the cuda_mma_n8 layout.
/// Kernel params: (const float *x, const unsigned char *w, const float *bias,
/// const int *rows, float *y, int T); bias / rows are unused (may be null)
/// unless `bias` / `gatherRows`.
/// LinearParams::l2PrefetchBytes by default: a third of an H100's / H200's 50 MB L2, what the
/// memory bus moves in ~4 us (a norm kernel's time at batch 1), so a prefetch is neither evicted
/// by the GEMV's own stream before it is read nor larger than the idle time it fills.
inline constexpr int64_t kDefaultL2PrefetchBytes = int64_t(16) << 20;
struct LinearParams {
  int64_t n = 0;
  int64_t k = 0;
  std::string weight = "f32";
  bool bias = false;
  bool gatherRows = false;
  /// The tensor-core kernel (TF32 mma.sync, f32 accumulation; sm_80+; operands rounded to 10
  /// mantissa bits) instead of the f32 CUDA-core one. Plans add it next to the CUDA-core kernel
  /// for steps of at least kTensorCoreMinRows rows.
  bool tensorCores = false;
  /// The quantized CUDA-core GEMV over int8 activations (the CPU's fast contract): x is then
  /// quantize_q8's output for the step's rows (gathered there for logits), and each sub-block's
  /// 32 products are exact integer sums (dp4a) scaled once by the weight and activation scales.
  /// Invalid with dense weights or tensorCores.
  bool int8Activations = false;
  /// The CUDA-core kernels' weight bytes that their blocks ask the L2 for before waiting on the
  /// kernel before them (sm_90+, where the runtime launches them overlapped with it), in all:
  /// quantized, an equal share of each tile's first bytes; dense, the first blocks' rows. 0: none.
  int64_t l2PrefetchBytes = kDefaultL2PrefetchBytes;
  /// The SiLU-mul epilogue (CUDA-core GEMV of a fused gate|up projection, n = 2 x siluInter,
  /// siluInter % 32 == 0): the kernel writes h = silu(y[:, :siluInter]) * y[:, siluInter:]
  /// ([T, siluInter], the silu_mul kernel's values bit for bit from the same y) instead of y,
  /// and, quantized weights only, when its extra `unsigned char *q8` parameter (after y) is not
  /// null, h's int8 rows as quantize_q8 writes them (dense: q8 must be null). Quantized: blocks
  /// of 8 warps, one tile each over the whole K (y's values those of the GEMV with one warp per
  /// tile); dense: a warp per column of h (its gate and up rows, as the plain GEMV sums them).
  /// 0: the plain GEMV.
  int64_t siluInter = 0;
  /// The add_rms_norm after it (CUDA-core GEMV, not with siluInter; addRmsNorm->dim == n, one
  /// group over the row): the kernel still writes y, then takes that step's parameters after y --
  /// (const float *other, const float *w, float *normed, float *sum, unsigned char *q8) with
  /// `other` its input that is not y (x + residual: either order, the same sum) and q8 as
  /// RmsNormParams::quantizedOutput's (null: none) -- and the workspace (KernelSpec::
  /// workspaceBytes, before T). Its last block to finish does the add_rms_norm of all T rows,
  /// the add_rms_norm kernel's values bit for bit (codegen/RmsNormKernel.cpp): one launch
  /// instead of two where a decode step's rows are few (each row is one block's work then).
  std::optional<RmsNormParams> addRmsNorm;
};
llmrt::StatusOr<KernelSpec> emitLinearKernel(const LinearParams &p);
/// Warps per block (each item's K split over them) of the quantized CUDA-core GEMV of [n, k]:
/// about 4096 warps over a token chunk's tiles, at most 8 and one per 128-element span. 1 for
/// 2048+ tiles (Llama-3-8B's gate|up: 3584), the shapes whose SiLU-mul epilogue keeps the GEMV's
/// work distribution (KernelEmitter: emitSiluLinearKernel).
int quantizedGemvWarps(int64_t n, int64_t k);
/// Rows from which a linear / logits step launches its tensor-core kernel.
inline constexpr int kTensorCoreMinRows = 16;
/// The same for quantized weights. Measured on an H200 (Llama-3-8B shapes, int4-g128): at 32 rows
/// the CUDA-core GEMV decodes 609 tok/s against the tensor-core tiles' 501 (the tiles cost one
/// 64-token pass whatever the rows, the GEMV one pass per 4 rows, so they cross near 40 rows); at
/// 512 rows the tiles prefill 1031 tok/s against 729. Decode batches of up to 32 rows keep the GEMV.
inline constexpr int kQuantTensorCoreMinRows = 33;

/// quantize_q8: rows of `k` f32 activations (k % 32 == 0) quantized as the CPU's fast contract
/// quantizes them (runtime/cpu/kernels.h, quantize_activations_scalar; bit for bit): per block of
/// 32 values b, d = amax / 127, codes q = rint(x / d) in int8, s = d * sum(q). Output row t
/// (q8RowBytes(k) bytes, from x row rows[t] when gatherRows, else row t): for each span of 128
/// values (the last one padded) its 128 code bytes, in the lanes' fragment order of the
/// cuda_mma_n8 weight layout: sub-block j of span s at s * 128 + 32 q + 8 j for lane quad q =
/// 0..3, holding elements 2q, 2q+16, 2q+1, 2q+17, 2q+8, 2q+24, 2q+9, 2q+25 of the sub-block;
/// then d of every block (f32 [spans * 4] at spans * 128), then s (the same, after them).
/// Params (const float *x, const int *rows, unsigned char *out, int T).
llmrt::StatusOr<KernelSpec> emitQuantizeQ8Kernel(int64_t k, bool gatherRows);
inline constexpr int64_t q8RowBytes(int64_t k) { return (k + 127) / 128 * 160; }

/// dequant_bf16: a quantized weight [n, k] in the cuda_mma_n8 layout written out as the bf16
/// [n, k] row-major matrix a GEMM library multiplies (Step.library_weight_kernel): each element
/// its exact dequantized value (quant_format.h) rounded to nearest even. Params
/// (const unsigned char *w, unsigned short *out, int T); the runtime launches it with T = n
/// (the grid rule counts weight rows).
llmrt::StatusOr<KernelSpec> emitDequantBf16Kernel(const std::string &weight, int64_t n, int64_t k);
/// Rows from which a linear step over quantized weights calls the GEMM library (its weight
/// dequantized to bf16, then cuBLASLt), when the plan gives it one (`llmc compile --quant-gemm`).
/// Estimated from the H200 run of 2026-12-04 (Llama-3-8B shapes, int4-g128), not yet measured
/// with this path: the GEMV costs one weight pass per 4 rows (batch 1: 6.1 ms a step, batch 32:
/// 52 ms), the library path about a bf16 step (9 ms at 32 rows) plus the dequantization (~0.5 +
/// 2 bytes per weight moved, ~5 ms): it wins from about 8 rows on the measured GEMV; 16 leaves
/// room for a faster one.
inline constexpr int kQuantLibraryMinRows = 16;

/// The paged KV cache as the kernels see it (PROGRAM.md: per layer K and V
/// [num_blocks, kv_heads, block_size, head_dim]; kvDtype "f32", "bf16", "f16" or "fp8" (E4M3;
/// the elements' bit patterns, rounded to nearest even when stored), or "int8": codes in that
/// shape plus one f32 scale per [block, head, slot], passed after the caches).
struct KvCacheParams {
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t blockSize = 0;
  std::string kvDtype = "f32";
};
/// llm.kv_store: params (const float *k, const float *v, const long long
/// *kv_slots, float *k_cache, float *v_cache, int T); padding rows (slot < 0)
/// are skipped.
llmrt::StatusOr<KernelSpec> emitKvStoreKernel(const KvCacheParams &p);

/// llm.rope_kv_store: the fused projection qkv[T, (H + 2 Hkv) hd] (columns q, k, v) -> rotated
/// q[T, H hd] and the rotated k / the v rows written into the cache as kv_store writes them.
/// Params (const float *qkv, const int *positions, const long long *kv_slots, float *q_out,
/// k_cache, v_cache[, float *k_scales, float *v_scales for int8], int T).
struct RopeKvStoreParams {
  RopeParams rope; // numHeads: the q heads
  KvCacheParams cache;
};
llmrt::StatusOr<KernelSpec> emitRopeKvStoreKernel(const RopeKvStoreParams &p);

/// llm.paged_attention: causal GQA over the cache, optional sliding window.
/// Params (const float *q, const float *k_cache, const float *v_cache, const
/// int *positions, const int *query_start, const int *block_tables, int
/// max_blocks, int S, float *out, unsigned char *work, int T); `work` is the
/// spec's workspace (split long contexts of small steps, flash-decoding).
struct AttentionParams {
  KvCacheParams cache;
  int64_t numHeads = 0;
  float scale = 1.0f;
  int64_t slidingWindow = 0; // 0 = none
  /// The tiled prefill kernel (FlashAttention-style, TF32 mma.sync with f32 accumulation and an
  /// f32 softmax; sm_80+) instead of the per-row one: its params lack `work`, its grid rule
  /// counts sequences ("rows/<c>*<k> + seqs*<k>"). Plans add it next to the per-row kernel for
  /// steps of at least kTiledAttentionMinRows rows. Unimplemented unless tiledAttentionApplies.
  bool tensorCores = false;
  /// The per-row kernel only (head_dim % 32 == 0): as RmsNormParams's, the q8 pointer between
  /// `out` and `work`.
  bool quantizedOutput = false;
  /// The per-row kernel with the llm.rope_kv_store that writes its q inside (rope: that step's
  /// rotation; numHeads and headDim equal these): for steps in which every sequence has exactly
  /// one row (decode), which it runs in one launch instead of two. Params (const float *qkv,
  /// k_cache, v_cache[, float *k_scales, float *v_scales], const int *positions, const long long
  /// *kv_slots, const int *query_start, ...as above): qkv and kv_slots those of rope_kv_store,
  /// the caches written (the row's rotated k and its v at its slot, as rope_kv_store writes them;
  /// none for slot < 0). The results, output and cache, are those of rope_kv_store then the
  /// plain kernel, bit for bit: q is rotated and then scaled by the same operations, and the row's
  /// own position reads its k and v from shared memory as the cache would hold them. Rows past
  /// query_start[S] store nothing.
  std::optional<RopeParams> rope;
};
llmrt::StatusOr<KernelSpec> emitPagedAttentionKernel(const AttentionParams &p);
/// Whether the tiled kernel takes these sizes (head_dim a multiple of 8, at most 128).
bool tiledAttentionApplies(const AttentionParams &p);

/// Whether the cache kernels (kv_store, rope_kv_store, paged_attention) keep a KV cache of this
/// element type: "f32", "bf16", "f16", "fp8" (E4M3) or "int8".
bool kvCacheHasKernels(const std::string &kvDtype);
/// Rows from which a paged-attention step launches its tiled kernel: smaller steps (decode
/// batches, whose long contexts the per-row kernel splits over blocks) keep the per-row one.
inline constexpr int kTiledAttentionMinRows = 33;

/// The summary of each logits row for sampling (runtime/sampler/logits_summary.h):
/// (const float *logits, unsigned char *out[, unsigned char *work], int L), rows of `vocab`
/// (at most kMaxLogitsSummaryVocab: plans of longer rows have no summary kernel, and the runtime
/// copies their rows).
inline constexpr int64_t kMaxLogitsSummaryVocab = 524288;
llmrt::StatusOr<KernelSpec> emitLogitsSummaryKernel(int64_t vocab);

/// The sampler's draws from rows of `vocab` logits (runtime/sampler/sampler.h, DeviceDraw):
/// (const float *logits, const unsigned char *summaries, const unsigned char *draws,
///  int *tokens, int n), a block per draw; needs the rows' summaries (their max).
llmrt::StatusOr<KernelSpec> emitSamplingKernel(int64_t vocab);

/// A dense GEMM library's input (cuBLASLt multiplies operands of one type): rows of `width` f32
/// activations written as bf16 bit patterns, rounded to nearest even:
/// (const float *x, unsigned short *y, int T).
llmrt::StatusOr<KernelSpec> emitToBf16Kernel(int64_t width);

/// llm.add: (const float *a, const float *b, float *out, int T), rows of
/// `width`.
llmrt::StatusOr<KernelSpec> emitAddKernel(int64_t width);
/// llm.split of rows of `width` into results of `sizes` columns (in order,
/// summing to width): (const float *x, float *out0, ..., float *outN-1, int T).
llmrt::StatusOr<KernelSpec> emitSplitKernel(int64_t width, const std::vector<int64_t> &sizes);
/// llm.permute_columns: (const float *x, const int *perm, float *out[, unsigned char *q8], int T);
/// quantizedOutput (width % 32 == 0) as RmsNormParams's (the input permuted for a GPTQ
/// act-order GEMV).
llmrt::StatusOr<KernelSpec> emitPermuteColumnsKernel(int64_t width, bool quantizedOutput = false);

} // namespace llmc

#endif // LLMC_CODEGEN_KERNELFAMILIES_H

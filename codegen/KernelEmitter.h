//===- KernelEmitter.h - CUDA kernels for `llm` ops -------------*- C++ -*-===//
//
// Emits a specialized CUDA kernel (KernelSpec.h) for one `llm` op. Works on
// the generic mlir::Operation (op name, attributes, operand/result tensor
// shapes), so it does not depend on the dialect's generated classes.
//
// Supported ops (PROGRAM.md): llm.embedding (the table dense, or quantized in
// the cuda_mma_n8 layout), llm.rms_norm {eps},
// llm.add_rms_norm {eps}, llm.rope {num_heads, head_dim, theta, style,
// rope_type, factor, low_freq_factor, high_freq_factor,
// original_max_position}, llm.silu_mul (1 or 2 operands), llm.linear and
// llm.logits (dense weights, or quantized ones in the cuda_mma_n8 layout; the
// module attribute llm.gpu_tensor_cores = false keeps them off the tensor-core
// path; llm.gpu_gemv_l2_prefetch_bytes sets LinearParams::l2PrefetchBytes),
// llm.kv_store, llm.rope_kv_store (the rope attributes and the cache ones) and
// llm.paged_attention (f32 or int8 KV cache), llm.add, llm.split,
// llm.permute_columns. Activations must be f32 tensors [rows, width] with a
// static width; rows may be dynamic. hasKernel() is false where no kernel
// reads the op's storage (quantized weights or tables in a CPU layout): such
// steps run without a GPU kernel.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_KERNELEMITTER_H
#define LLMC_CODEGEN_KERNELEMITTER_H

#include "codegen/KernelSpec.h"

#include <optional>

#include "mlir/Support/LogicalResult.h"

namespace mlir {
class Operation;
} // namespace mlir

namespace llmc {

/// True when `op`'s kind has a GPU kernel family here (by op name only; the
/// op may still fail emitKernel when its shapes or attributes are invalid).
bool hasKernel(mlir::Operation *op);

/// Kernel for `op`, specialized from its attributes and static shapes.
/// failure() with an error diagnostic on `op` when the op has no GPU kernel
/// (e.g. llm.linear, handled by cuBLASLt later: callers check hasKernel and
/// skip those) or when its shapes/attributes cannot be specialized.
mlir::FailureOr<KernelSpec> emitKernel(mlir::Operation *op);

/// A second kernel of `op` for steps of at least batchedMinRows(op) rows
/// (KernelFamilies.h): the tensor-core linear / logits kernel, or the tiled
/// prefill paged-attention kernel where its sizes apply, unless the module
/// says llm.gpu_tensor_cores = false; none for other ops.
mlir::FailureOr<std::optional<KernelSpec>> emitBatchedKernel(mlir::Operation *op);
/// Rows from which a step of `op` launches its batched kernel:
/// kTiledAttentionMinRows for llm.paged_attention, kQuantTensorCoreMinRows for a linear or logits
/// step over quantized weights, else kTensorCoreMinRows.
int batchedMinRows(mlir::Operation *op);

/// Whether steps of `op` of libraryMinRows(op) rows or more call a dense GEMM library
/// (cuBLASLt, loaded by the runtime) instead of the generated tensor-core kernel, which the plan
/// keeps as the fallback: llm.linear with dense bf16 or f32 weights, unless the module says
/// llm.gpu_tensor_cores = false or llm.gpu_dense_gemm = "generated"; llm.linear with quantized
/// weights in the cuda_mma_n8 layout (dequantized to bf16 for the call), unless
/// llm.gpu_tensor_cores = false or llm.gpu_quant_gemm = "generated". f16 weights stay on the
/// generated kernels (their library path would round the f32 activations to f16, whose range
/// they may exceed).
bool usesGemmLibrary(mlir::Operation *op);
/// The fewest rows at which a library step calls the library: kQuantLibraryMinRows for quantized
/// weights, else batchedMinRows(op).
int libraryMinRows(mlir::Operation *op);
/// The kernel writing a library step's input in the library's operand type: to_bf16 for bf16
/// and quantized weights; none for f32 weights (the library reads f32 with TF32 tensor cores) or
/// steps that do not use the library.
mlir::FailureOr<std::optional<KernelSpec>> emitLibraryInputKernel(mlir::Operation *op);
/// The kernel writing a library step's weight in the library's operand type: dequant_bf16 for
/// quantized weights; none for dense ones or steps that do not use the library.
mlir::FailureOr<std::optional<KernelSpec>> emitLibraryWeightKernel(mlir::Operation *op);

/// Whether the CUDA-core GEMV of `op` (its emitKernel) reads int8 activations (the fast
/// contract, LinearParams::int8Activations): llm.linear / llm.logits over quantized weights in
/// the cuda_mma_n8 layout, unless the module says llm.gpu_quant_gemv = "f32".
bool usesInt8Activations(mlir::Operation *op);
/// The kernel writing those activations from the step's input before the GEMV (quantize_q8,
/// Step.input_quant_kernel); none when !usesInt8Activations(op).
mlir::FailureOr<std::optional<KernelSpec>> emitInputQuantKernel(mlir::Operation *op);

/// Whether `op`'s kernel also writes its output as those int8 rows (Step.quantized_output,
/// RmsNormParams / SiluMulParams::quantizedOutput), sparing the quantize_q8 kernel of the GEMV
/// that reads it next: llm.rms_norm (one group over the row), llm.add_rms_norm (its normed
/// result), llm.silu_mul, llm.permute_columns (GPTQ act-order) and llm.paged_attention (its
/// per-row kernel; head_dim a multiple of 32) whose result 0 (a multiple of 32 wide) is the input
/// of an llm.linear that usesInt8Activations. (The logits' input keeps its own kernel: it
/// gathers rows.)
bool writesQuantizedOutput(mlir::Operation *op);

/// The decode kernel of an llm.linear whose result, a fused gate|up 64·m wide, is read only by
/// the llm.silu_mul just after it (Step.silu_kernel): the GEMV with the SiLU-mul epilogue
/// (LinearParams::siluInter), writing that silu_mul's result (and, quantized weights only, its
/// int8 rows) instead of its own; the runtime then skips the silu_mul launch. Quantized weights
/// (cuda_mma_n8): only for shapes whose plain GEMV has one warp per tile (quantizedGemvWarps:
/// 2048+ tiles, 7B-class models and up, or one 128-wide span), whose work the epilogue's blocks
/// then split alike; dense weights: unless the silu_mul writes int8 rows. None otherwise.
mlir::FailureOr<std::optional<KernelSpec>> emitSiluLinearKernel(mlir::Operation *op);

/// The decode kernel of an llm.linear whose result is an input (x or residual) of the
/// llm.add_rms_norm just after it (Step.norm_kernel): the GEMV with the add_rms_norm epilogue
/// (LinearParams::addRmsNorm), which still writes its result and then, in its last block to
/// finish, that add_rms_norm's results (the add_rms_norm kernel's bits, its int8 rows where that
/// kernel writes them); the runtime then skips the add_rms_norm launch. None otherwise.
mlir::FailureOr<std::optional<KernelSpec>> emitNormLinearKernel(mlir::Operation *op);

/// The decode kernel of an llm.paged_attention whose q is the result of the llm.rope_kv_store
/// just before it, used by nothing else (AttentionParams::rope, Step.rope_kernel): the per-row
/// kernel doing that step's work too, for steps in which every sequence has one row; the runtime
/// then skips the rope_kv_store launch. Requires the same cache (kv operand = the store's result),
/// layer, heads and cache attributes, positions = @forward's positions argument; none otherwise.
mlir::FailureOr<std::optional<KernelSpec>> emitRopeAttentionKernel(mlir::Operation *op);

} // namespace llmc

#endif // LLMC_CODEGEN_KERNELEMITTER_H

//===- LLMDialect.h - the `llm` dialect: types and ops ----------*- C++ -*-===//
//
// The one header to include for the `llm` dialect: the dialect class
// (llmc::llm::LLMDialect), the types (BatchType, KvCacheType) and every op
// (WeightOp, WeightConcatOp, EmbeddingOp, RmsNormOp, AddOp, AddRmsNormOp,
// LinearOp, PermuteColumnsOp, SplitOp, RopeOp, KvStoreOp, PagedAttentionOp, SiluMulOp, LogitsOp).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_IR_LLMDIALECT_H
#define LLMC_IR_LLMDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/LLMOpsDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/LLMOpsTypes.h.inc"

#define GET_OP_CLASSES
#include "ir/LLMOps.h.inc"

namespace llmc::llm {

/// The name of the layout written by --llm-kv-cache-layout (PROGRAM.md).
inline constexpr llvm::StringLiteral kKvLayoutBlockHeadSlotDim = "block_head_slot_dim";

/// Width of a row-major activation `[rows, d1, ...]`: product of dims after the
/// first (1 for rank 1); -1 if any of them is dynamic.
int64_t rowWidth(mlir::RankedTensorType type);

/// True if `v` is produced by llm.weight or llm.weight_concat.
bool isWeightValue(mlir::Value v);

/// Whether a `quant` storage is dense f16 / bf16 rather than a quantized format.
bool isDenseHalf(llvm::StringRef storage);

/// The plan storage format of weight value `v` (the `quant` attribute of its
/// llm.weight / llm.weight_concat), "" for f32.
llvm::StringRef weightQuant(mlir::Value v);

} // namespace llmc::llm

#endif // LLMC_IR_LLMDIALECT_H

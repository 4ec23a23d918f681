//===- WeightUtils.h - helpers shared by the fusion passes ------*- C++ -*-===//

#ifndef LLMC_PASSES_WEIGHTUTILS_H
#define LLMC_PASSES_WEIGHTUTILS_H

#include "ir/LLMDialect.h"

#include "mlir/IR/Location.h"

namespace llmc {

/// Moves the ops that define the weight value `w` (llm.weight, and
/// llm.weight_concat with its operands, recursively) right before `before`
/// when they sit later in the same block. Weights have no side effects and no
/// operands other than weights, so this only makes them dominate `before`.
/// Returns false (and moves nothing) if `w` is defined later in the block by an
/// op that is not a weight, i.e. it cannot dominate `before`.
inline bool hoistWeightBefore(mlir::Value w, mlir::Operation *before) {
  mlir::Operation *def = w.getDefiningOp();
  if (!def || def->getBlock() != before->getBlock() ||
      def->isBeforeInBlock(before))
    return true;
  if (!llm::isWeightValue(w))
    return false;
  for (mlir::Value operand : def->getOperands())
    if (!hoistWeightBefore(operand, before))
      return false;
  def->moveBefore(before);
  return true;
}

/// The fused location of `ops` (for ops built from several originals).
template <typename OpRange>
mlir::Location fusedLocOf(mlir::MLIRContext *ctx, OpRange &&ops) {
  llvm::SmallVector<mlir::Location> locs;
  for (auto op : ops)
    locs.push_back(op->getLoc());
  return mlir::FusedLoc::get(ctx, locs);
}

} // namespace llmc

#endif // LLMC_PASSES_WEIGHTUTILS_H

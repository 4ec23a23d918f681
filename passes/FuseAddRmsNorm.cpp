//===- FuseAddRmsNorm.cpp - --llm-fuse-add-rmsnorm ------------------------===//
//
// %s = add %a, %b ; %n = rms_norm %s, %w  ->  %n, %s2 = add_rms_norm %a, %b, %w
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/WeightUtils.h"

#include "mlir/IR/Builders.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEADDRMSNORM
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// The first (program order) plain rms_norm in the add's block that
/// normalizes the add's result, or null.
RmsNormOp findPlainNorm(AddOp add) {
  RmsNormOp best;
  int64_t width = rowWidth(cast<RankedTensorType>(add.getType()));
  for (Operation *user : add->getUsers()) {
    auto norm = dyn_cast<RmsNormOp>(user);
    if (!norm || norm.getX() != add.getResult() ||
        norm->getBlock() != add->getBlock())
      continue;
    auto w = cast<RankedTensorType>(norm.getWeight().getType());
    if (w.getRank() != 1 || w.getDimSize(0) != width)
      continue; // per-head (grouped) norm
    if (!best || norm->isBeforeInBlock(best))
      best = norm;
  }
  return best;
}

void fuse(AddOp add) {
  RmsNormOp norm = findPlainNorm(add);
  if (!norm)
    return;
  // The fused op takes the add's place, so the norm weight must dominate it.
  if (!hoistWeightBefore(norm.getWeight(), add))
    return;
  OpBuilder b(add);
  Location loc =
      fusedLocOf(add.getContext(), ArrayRef<Operation *>{add, norm});
  auto fused = b.create<AddRmsNormOp>(loc, norm.getType(), add.getType(),
                                      add.getLhs(), add.getRhs(),
                                      norm.getWeight(), norm.getEpsAttr());
  norm.getResult().replaceAllUsesWith(fused.getNormed());
  norm.erase();
  add.getResult().replaceAllUsesWith(fused.getSum());
  add.erase();
}

struct FuseAddRmsNormPass
    : llmc::impl::FuseAddRmsNormBase<FuseAddRmsNormPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation()->walk([&](AddOp op) { adds.push_back(op); });
    for (AddOp add : adds)
      fuse(add);
  }
};

} // namespace

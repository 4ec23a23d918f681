//===- FuseGateUp.cpp - --llm-fuse-gate-up --------------------------------===//
//
// silu_mul(linear(x, wg), linear(x, wu)) -> silu_mul(linear(x, concat(wg, wu))).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/WeightUtils.h"

#include "mlir/IR/Builders.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEGATEUP
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// Fuses `op` if it matches; returns true when it rewrote the IR.
bool fuse(SiluMulOp op) {
  if (op.getInputs().size() != 2)
    return false;
  auto gate = op.getInputs()[0].getDefiningOp<LinearOp>();
  auto up = op.getInputs()[1].getDefiningOp<LinearOp>();
  if (!gate || !up || gate == up)
    return false;
  if (gate.getX() != up.getX() || gate.getBias() || up.getBias())
    return false;
  // The projections must feed nothing else, so they can be removed.
  if (!gate->hasOneUse() || !up->hasOneUse())
    return false;
  if (!isWeightValue(gate.getWeight()) || !isWeightValue(up.getWeight()))
    return false;
  // Only weights of one storage format concatenate.
  if (weightQuant(gate.getWeight()) != weightQuant(up.getWeight()))
    return false;
  if (gate->getBlock() != op->getBlock() || up->getBlock() != op->getBlock())
    return false;

  Location loc = fusedLocOf(op.getContext(), ArrayRef<Operation *>{gate, up});
  OpBuilder b(op);
  Value weight = b.create<WeightConcatOp>(
      loc, ValueRange{gate.getWeight(), up.getWeight()}, /*axis=*/0);
  auto fused = b.create<LinearOp>(loc, gate.getX(), weight);
  auto silu = b.create<SiluMulOp>(op.getLoc(), op.getType(),
                                  ValueRange{fused.getResult()});
  op.getResult().replaceAllUsesWith(silu.getResult());
  op.erase();
  gate.erase();
  up.erase();
  return true;
}

struct FuseGateUpPass : llmc::impl::FuseGateUpBase<FuseGateUpPass> {
  void runOnOperation() override {
    SmallVector<SiluMulOp> ops;
    getOperation()->walk([&](SiluMulOp op) { ops.push_back(op); });
    for (SiluMulOp op : ops)
      fuse(op);
  }
};

} // namespace

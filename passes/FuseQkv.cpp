//===- FuseQkv.cpp - --llm-fuse-qkv ---------------------------------------===//
//
// Linears that read the same activation (q/k/v projections) become one linear
// over a concatenated weight, followed by a column split.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/WeightUtils.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEQKV
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// A linear may join a group when its weights are weights (so they can be
/// concatenated) and its result does not feed silu_mul (gate/up projections
/// belong to --llm-fuse-gate-up).
bool isCandidate(LinearOp lin) {
  if (!isWeightValue(lin.getWeight()))
    return false;
  if (lin.getBias() && !isWeightValue(lin.getBias()))
    return false;
  return llvm::none_of(lin->getUsers(),
                       [](Operation *user) { return isa<SiluMulOp>(user); });
}

void fuseGroup(Value x, ArrayRef<LinearOp> group) {
  LinearOp first = group.front();
  MLIRContext *ctx = first.getContext();
  bool withBias = static_cast<bool>(first.getBias());
  SmallVector<Value> weights, biases;
  SmallVector<int64_t> sizes;
  SmallVector<Type> resultTypes;
  for (LinearOp lin : group) {
    hoistWeightBefore(lin.getWeight(), first);
    weights.push_back(lin.getWeight());
    sizes.push_back(cast<RankedTensorType>(lin.getWeight().getType()).getDimSize(0));
    resultTypes.push_back(lin.getType());
    if (withBias) {
      hoistWeightBefore(lin.getBias(), first);
      biases.push_back(lin.getBias());
    }
  }
  Location loc = fusedLocOf(ctx, group);
  OpBuilder b(first);
  Value weight = b.create<WeightConcatOp>(loc, weights, /*axis=*/0);
  Value bias =
      withBias ? Value(b.create<WeightConcatOp>(loc, biases, /*axis=*/0)) : Value();
  auto fused = b.create<LinearOp>(loc, x, weight, bias);
  auto split = b.create<SplitOp>(loc, resultTypes, fused.getResult(),
                                 b.getDenseI64ArrayAttr(sizes));
  for (auto [i, lin] : llvm::enumerate(group)) {
    LinearOp old = lin;
    old.getResult().replaceAllUsesWith(split.getResult(i));
    old.erase();
  }
}

void fuseInBlock(Block &block) {
  // Program order within each group, groups in order of their first linear.
  // Weights stored in different formats are not concatenated: group by input
  // and storage format.
  llvm::MapVector<std::pair<Value, StringRef>, SmallVector<LinearOp>> groups;
  for (Operation &op : block)
    if (auto lin = dyn_cast<LinearOp>(op); lin && isCandidate(lin))
      groups[{lin.getX(), weightQuant(lin.getWeight())}].push_back(lin);
  for (auto &[key, group] : groups) {
    Value x = key.first;
    if (group.size() < 2)
      continue;
    bool withBias = static_cast<bool>(group.front().getBias());
    if (llvm::any_of(group, [&](LinearOp lin) {
          return static_cast<bool>(lin.getBias()) != withBias;
        }))
      continue; // mixed biased/unbiased: not fused
    fuseGroup(x, group);
  }
}

struct FuseQkvPass : llmc::impl::FuseQkvBase<FuseQkvPass> {
  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks)
      fuseInBlock(*block);
  }
};

} // namespace

//===- FuseRopeKvStore.cpp - --llm-fuse-rope-kv-store ---------------------===//
//
//   %q, %k, %v = split %qkv ; %qr = rope %q ; %kr = rope %k ;
//   %kv2 = kv_store %kr, %v, %kv
//     ->  %qr, %kv2 = rope_kv_store %qkv, %positions, %kv
//
// Four steps become one that reads each fused projection row once: at decode
// time these are small launches whose cost is their count, not their bytes.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/WeightUtils.h"

#include "mlir/IR/Builders.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEROPEKVSTORE
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// The single user of `v`, or null.
Operation *onlyUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// Both ropes rotate with the same frequencies and positions.
bool sameRotation(RopeOp a, RopeOp b) {
  return a.getPositions() == b.getPositions() &&
         a.getHeadDim() == b.getHeadDim() &&
         a.getTheta().convertToDouble() == b.getTheta().convertToDouble() &&
         a.getStyle() == b.getStyle() && a.getRopeType() == b.getRopeType() &&
         a.getFactor().convertToDouble() == b.getFactor().convertToDouble() &&
         a.getLowFreqFactor().convertToDouble() ==
             b.getLowFreqFactor().convertToDouble() &&
         a.getHighFreqFactor().convertToDouble() ==
             b.getHighFreqFactor().convertToDouble() &&
         a.getOriginalMaxPosition() == b.getOriginalMaxPosition();
}

void fuse(KvStoreOp store) {
  auto ropeK = store.getK().getDefiningOp<RopeOp>();
  auto split = store.getV().getDefiningOp<SplitOp>();
  if (!ropeK || !split || split->getNumResults() != 3 ||
      store.getV() != split->getResult(2) ||
      ropeK.getX() != split->getResult(1) || !ropeK->hasOneUse() ||
      !split->getResult(1).hasOneUse() || !split->getResult(2).hasOneUse())
    return;
  auto ropeQ = dyn_cast_or_null<RopeOp>(onlyUser(split->getResult(0)));
  if (!ropeQ || !sameRotation(ropeQ, ropeK))
    return;
  const int64_t hd = store.getHeadDimAttr().getInt();
  const int64_t kvHeads = store.getNumKvHeadsAttr().getInt();
  const int64_t heads = ropeQ.getNumHeadsAttr().getInt();
  ArrayRef<int64_t> sizes = split.getSizes();
  if (ropeK.getHeadDimAttr().getInt() != hd ||
      ropeK.getNumHeadsAttr().getInt() != kvHeads || kvHeads <= 0 ||
      heads % kvHeads != 0 || sizes[0] != heads * hd ||
      sizes[1] != kvHeads * hd || sizes[2] != kvHeads * hd)
    return;
  // The fused op takes the store's place: everything that reads the rotated
  // q must come after it (attention does).
  Block *block = store->getBlock();
  if (ropeQ->getBlock() != block || ropeK->getBlock() != block ||
      split->getBlock() != block)
    return;
  for (Operation *user : ropeQ->getUsers()) {
    Operation *inBlock = block->findAncestorOpInBlock(*user);
    if (!inBlock || !store->isBeforeInBlock(inBlock))
      return;
  }

  OpBuilder b(store);
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute a : ropeQ->getAttrs())
    if (!a.getName().getValue().starts_with("llm."))
      attrs.push_back(a); // num_heads, head_dim and the rotation
  for (StringRef name :
       {"layer", "num_kv_heads", "block_size", "kv_dtype", "layout"})
    if (Attribute a = store->getAttr(name))
      attrs.push_back(b.getNamedAttr(name, a));
  Location loc = fusedLocOf(store.getContext(),
                            ArrayRef<Operation *>{split, ropeQ, ropeK, store});
  auto fused = b.create<RopeKvStoreOp>(
      loc, TypeRange{ropeQ.getType(), store.getType()},
      ValueRange{split.getX(), ropeQ.getPositions(), store.getKv(),
                 store.getBatch()},
      attrs);
  ropeQ.getResult().replaceAllUsesWith(fused.getQ());
  store.getResult().replaceAllUsesWith(fused.getKvOut());
  store.erase();
  ropeK.erase();
  ropeQ.erase();
  split.erase();
}

struct FuseRopeKvStorePass
    : llmc::impl::FuseRopeKvStoreBase<FuseRopeKvStorePass> {
  void runOnOperation() override {
    SmallVector<KvStoreOp> stores;
    getOperation()->walk([&](KvStoreOp op) { stores.push_back(op); });
    for (KvStoreOp store : stores)
      fuse(store);
  }
};

} // namespace

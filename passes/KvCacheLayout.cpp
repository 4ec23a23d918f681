//===- KvCacheLayout.cpp - --llm-kv-cache-layout --------------------------===//
//
// Fixes block size, dtype and layout of the paged KV cache on every cache op
// and records the cache geometry as the module attribute `llm.kv_spec`.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace llmc {
#define GEN_PASS_DEF_KVCACHELAYOUT
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// The geometry one cache op states.
struct CacheGeometry {
  Operation *op;
  int64_t layer;
  int64_t kvHeads;
  int64_t headDim;
};

struct KvCacheLayoutPass : llmc::impl::KvCacheLayoutBase<KvCacheLayoutPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (kvDtype != "f32" && kvDtype != "bf16" && kvDtype != "f16" && kvDtype != "fp8" && kvDtype != "int8") {
      // Located at the module but without dumping it (no op attached).
      mlir::emitError(module.getLoc())
          << "kv dtype " << std::string(kvDtype)
                         << " not supported (supported: f32, bf16, f16, fp8, int8)";
      return signalPassFailure();
    }
    if (blockSize <= 0) {
      mlir::emitError(module.getLoc())
          << "kv block size must be positive, got "
          << static_cast<int64_t>(blockSize);
      return signalPassFailure();
    }

    SmallVector<CacheGeometry> ops;
    module.walk([&](Operation *op) {
      if (auto store = dyn_cast<KvStoreOp>(op))
        ops.push_back({op, store.getLayerAttr().getInt(),
                       store.getNumKvHeadsAttr().getInt(),
                       store.getHeadDimAttr().getInt()});
      else if (auto attn = dyn_cast<PagedAttentionOp>(op))
        ops.push_back({op, attn.getLayerAttr().getInt(),
                       attn.getNumKvHeadsAttr().getInt(),
                       attn.getHeadDimAttr().getInt()});
    });
    if (ops.empty())
      return; // nothing reads or writes a cache

    const CacheGeometry &ref = ops.front();
    llvm::DenseSet<int64_t> stored;
    int64_t maxLayer = 0;
    for (const CacheGeometry &g : ops) {
      if (g.kvHeads != ref.kvHeads || g.headDim != ref.headDim) {
        InFlightDiagnostic diag = g.op->emitOpError()
                                  << "at layer " << g.layer << " has num_kv_heads "
                                  << g.kvHeads << " and head_dim " << g.headDim
                                  << ", but the KV cache has num_kv_heads "
                                  << ref.kvHeads << " and head_dim "
                                  << ref.headDim;
        diag.attachNote(ref.op->getLoc()) << "cache geometry first set here";
        return signalPassFailure();
      }
      if (isa<KvStoreOp>(g.op))
        stored.insert(g.layer);
      maxLayer = std::max(maxLayer, g.layer);
    }
    for (const CacheGeometry &g : ops)
      if (isa<PagedAttentionOp>(g.op) && !stored.contains(g.layer)) {
        g.op->emitOpError() << "reads KV-cache layer " << g.layer
                            << ", which no llm.kv_store writes";
        return signalPassFailure();
      }

    Builder b(module.getContext());
    IntegerAttr blockAttr = b.getI64IntegerAttr(blockSize);
    StringAttr dtypeAttr = b.getStringAttr(kvDtype);
    StringAttr layoutAttr = b.getStringAttr(kKvLayoutBlockHeadSlotDim);
    for (const CacheGeometry &g : ops) {
      if (auto store = dyn_cast<KvStoreOp>(g.op)) {
        store.setBlockSizeAttr(blockAttr);
        store.setKvDtypeAttr(dtypeAttr);
        store.setLayoutAttr(layoutAttr);
      } else {
        auto attn = cast<PagedAttentionOp>(g.op);
        attn.setBlockSizeAttr(blockAttr);
        attn.setKvDtypeAttr(dtypeAttr);
        attn.setLayoutAttr(layoutAttr);
      }
    }
    NamedAttribute entries[] = {
        b.getNamedAttr("num_layers", b.getI64IntegerAttr(maxLayer + 1)),
        b.getNamedAttr("num_kv_heads", b.getI64IntegerAttr(ref.kvHeads)),
        b.getNamedAttr("head_dim", b.getI64IntegerAttr(ref.headDim)),
        b.getNamedAttr("block_size", blockAttr),
        b.getNamedAttr("kv_dtype", dtypeAttr),
        b.getNamedAttr("layout", layoutAttr),
    };
    module->setAttr("llm.kv_spec", b.getDictionaryAttr(entries));
  }
};

} // namespace

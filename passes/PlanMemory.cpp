//===- PlanMemory.cpp - --llm-plan-memory ---------------------------------===//
//
// Static activation memory plan. Offsets and sizes are bytes per row of
// capacity: with T_cap rows a value lives at arena + offset * T_cap, so one
// arena of arena_bytes_per_token * T_cap serves every step (PROGRAM.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

#include <map>

namespace llmc {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

constexpr int64_t kSlotAlign = 64;

/// Best-fit allocator over [0, end) with coalescing of freed blocks.
class Arena {
public:
  int64_t allocate(int64_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second))
        best = it;
    if (best != free_.end()) {
      int64_t offset = best->first, rest = best->second - size;
      free_.erase(best);
      if (rest > 0)
        free_[offset + size] = rest;
      return offset;
    }
    // Grow; reuse a free block that touches the end.
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == end_) {
        int64_t offset = last->first;
        free_.erase(last);
        end_ = offset + size;
        return offset;
      }
    }
    int64_t offset = end_;
    end_ += size;
    return offset;
  }

  void release(int64_t offset, int64_t size) {
    auto [it, inserted] = free_.emplace(offset, size);
    assert(inserted && "double free in the arena");
    (void)inserted;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  int64_t size() const { return end_; }

private:
  std::map<int64_t, int64_t> free_; // offset -> size
  int64_t end_ = 0;
};

struct PlanMemoryPass : llmc::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (!llvm::hasSingleElement(func.getBody())) {
      func.emitOpError("llm-plan-memory needs a single-block function body");
      return signalPassFailure();
    }
    Block &body = func.front();
    DenseMap<Operation *, int64_t> order;
    int64_t index = 0;
    for (Operation &op : body)
      order[&op] = index++;

    // Values to free after the op at each index (their last use).
    struct Live {
      int64_t offset, size;
    };
    DenseMap<int64_t, SmallVector<Live>> dyingAt;
    Arena arena;
    MLIRContext *ctx = func.getContext();
    auto i64 = [&](int64_t v) -> Attribute {
      return IntegerAttr::get(IntegerType::get(ctx, 64), v);
    };
    for (Operation &op : body) {
      int64_t at = order[&op];
      // Weights live in the weight section, not in the arena.
      bool isWeight = isa<WeightOp, WeightConcatOp>(op);
      SmallVector<Attribute> offsets;
      bool any = false;
      for (OpResult result : op.getResults()) {
        auto type = dyn_cast<RankedTensorType>(result.getType());
        if (!type || isWeight) {
          offsets.push_back(i64(-1));
          continue;
        }
        int64_t width = rowWidth(type);
        Type elem = type.getElementType();
        unsigned bits = elem.isIntOrFloat() ? elem.getIntOrFloatBitWidth() : 0;
        if (width < 0 || bits == 0 || bits % 8 != 0) {
          op.emitOpError() << "result #" << result.getResultNumber()
                           << " of type " << type
                           << " has no static row size to plan";
          return signalPassFailure();
        }
        int64_t bytes = std::max<int64_t>(
            llvm::alignTo(width * (bits / 8), kSlotAlign), kSlotAlign);
        int64_t last = at; // unused results die right after their op
        for (Operation *user : result.getUsers()) {
          Operation *inBody = body.findAncestorOpInBlock(*user);
          if (!inBody)
            continue;
          last = std::max(last, order[inBody]);
          // A rope_kv_store's qkv lives as long as its q: the GPU's decode attention may do that
          // step's work, reading qkv in place of q (plan Step.rope_kernel), so its output must
          // not take qkv's place.
          if (isa<RopeKvStoreOp>(inBody) && inBody->getOperand(0) == result)
            for (Operation *qUser : inBody->getResult(0).getUsers())
              if (Operation *q = body.findAncestorOpInBlock(*qUser))
                last = std::max(last, order[q]);
          // A linear's input lives as long as the silu_mul reading its result (a fused gate|up
          // only): the GPU's decode GEMV may do that step's work, reading x while it writes the
          // silu_mul's output (plan Step.silu_kernel).
          if (isa<LinearOp>(inBody) && inBody->getOperand(0) == result && inBody->getResult(0).hasOneUse())
            if (auto silu = dyn_cast<SiluMulOp>(*inBody->getResult(0).getUsers().begin());
                silu && silu->getNumOperands() == 1)
              if (Operation *s = body.findAncestorOpInBlock(*silu))
                last = std::max(last, order[s]);
        }
        int64_t offset = arena.allocate(bytes);
        offsets.push_back(i64(offset));
        dyingAt[last].push_back({offset, bytes});
        any = true;
      }
      if (any)
        op.setAttr("llm.arena_offsets", ArrayAttr::get(ctx, offsets));
      // Free after this op's outputs are placed: they never overlap its inputs.
      if (auto it = dyingAt.find(at); it != dyingAt.end()) {
        for (const Live &l : it->second)
          arena.release(l.offset, l.size);
        dyingAt.erase(it);
      }
    }
    func->setAttr("llm.arena_bytes_per_token",
                  IntegerAttr::get(IntegerType::get(ctx, 64), arena.size()));
  }
};

} // namespace

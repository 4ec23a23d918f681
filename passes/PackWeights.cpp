//===- PackWeights.cpp - --llm-pack-weights -------------------------------===//
//
// Decides the storage format of every weight matrix (f32, f16 or bf16, the
// checkpoint's quantized blocks, or round-to-nearest quantization) and the
// backend layout.
// The bytes themselves are produced by the plan writer while it streams the
// weights (the IR never holds weight data).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "runtime/quant/quant_format.h"

#include "mlir/IR/Builders.h"

namespace llmc {
#define GEN_PASS_DEF_PACKWEIGHTS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;
using namespace llmc;
using namespace llmc::llm;

namespace {

/// Whether `w` is used only as the matrix of linear/logits/embedding ops;
/// `embeddingLike` tells whether one of them is an embedding or logits.
bool isMatrix(WeightOp w, bool &embeddingLike) {
  embeddingLike = false;
  if (cast<RankedTensorType>(w.getType()).getRank() != 2 || w->use_empty())
    return false;
  for (OpOperand &use : w->getUses()) {
    Operation *user = use.getOwner();
    if (isa<LinearOp>(user) && use.getOperandNumber() == 1)
      continue;
    if (isa<EmbeddingOp, LogitsOp>(user) && use.getOperandNumber() == 1) {
      embeddingLike = true;
      continue;
    }
    return false;
  }
  return true;
}

/// `f` with a group that divides rows of k elements: the largest multiple of
/// 32 not above f.group that divides k (32 always does when k % 32 == 0); a
/// group of 16 (int8 sym) or a whole row as it is, where rows of k fit it.
/// With sub-scales the largest multiple of the sub-block above it, else groups
/// of the sub-block without sub-scales (f16/bf16 scales as asked).
std::optional<llmrt::quant::Format> fitGroup(llmrt::quant::Format f, int64_t k) {
  if (f.sub != 0) {
    for (int64_t g = f.group; g > f.sub; g -= f.sub)
      if (k % g == 0) {
        f.group = g;
        return f;
      }
    f.group = f.sub;
    f.sub = 0;
  }
  if (f.group == 0 || f.group < llmrt::quant::kSubBlock)
    return llmrt::quant::row_bytes(f, k).ok() ? std::optional(f) : std::nullopt;
  for (int64_t g = f.group; g >= llmrt::quant::kSubBlock; g -= llmrt::quant::kSubBlock)
    if (k % g == 0) {
      f.group = g;
      return f;
    }
  return std::nullopt;
}

struct PackWeightsPass : llmc::impl::PackWeightsBase<PackWeightsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const char *layoutName = nullptr;
    if (target == "cpu") {
      if (layout.empty() || layout == "interleaved8")
        layoutName = llmrt::quant::kLayoutInterleaved8;
      else if (layout == "row-groups")
        layoutName = llmrt::quant::kLayoutRowGroups;
    } else if (target == "cuda") {
      if (layout.empty() || layout == "cuda-mma")
        layoutName = llmrt::quant::kLayoutCudaMma8;
    } else {
      module.emitError() << "--llm-pack-weights: unknown target '" << target
                         << "' (supported: cpu, cuda)";
      return signalPassFailure();
    }
    if (!layoutName) {
      module.emitError() << "--llm-pack-weights: unknown layout '" << layout
                         << "' for target " << target
                         << " (supported: interleaved8, row-groups for cpu; "
                            "cuda-mma for cuda)";
      return signalPassFailure();
    }
    std::optional<llmrt::quant::Format> rtn;
    if (!quantize.empty()) {
      auto f = llmrt::quant::parse_format(quantize);
      if (!f.ok()) {
        module.emitError() << "--llm-pack-weights: " << f.status().message();
        return signalPassFailure();
      }
      rtn = *f;
    }
    if (denseDtype != "f32" && denseDtype != "f16" && denseDtype != "bf16") {
      module.emitError() << "--llm-pack-weights: unknown dense-dtype '" << denseDtype
                         << "' (supported: f32, f16, bf16)";
      return signalPassFailure();
    }
    Builder b(module.getContext());
    module.walk([&](WeightOp w) {
      bool embeddingLike = false;
      std::string chosen;
      if (isMatrix(w, embeddingLike)) {
        int64_t k = cast<RankedTensorType>(w.getType()).getDimSize(1);
        if (w.getSourceQuantAttr() && !dequantize) {
          chosen = w.getSourceQuantAttr().getValue().str();
        } else if (rtn && (!embeddingLike || quantizeEmbeddings))
          if (auto f = fitGroup(*rtn, k))
            chosen = llmrt::quant::format_name(*f);
        if (chosen.empty() && denseDtype != "f32")
          chosen = denseDtype;
      }
      if (chosen.empty())
        w.removeQuantAttr();
      else
        w.setQuantAttr(b.getStringAttr(chosen));
    });
    module->setAttr("llm.weight_layout", b.getStringAttr(layoutName));
  }
};

} // namespace

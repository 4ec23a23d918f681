//===- KernelEmitter.cpp - CUDA kernels for `llm` ops ---------------------===//
//
// Reads op names, attributes and tensor shapes from the generic Operation and
// hands plain parameters to the family generators (KernelFamilies.h). This is
// the only codegen file that includes MLIR headers.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelEmitter.h"

#include "codegen/KernelFamilies.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include <optional>

using namespace mlir;

namespace llmc {

namespace {

enum class Elem { F32, I32 };

/// The shape of `v`, checked to be a ranked tensor of `rank` dims of `elem`
/// whose dims after the first (the row dim) are static.
FailureOr<SmallVector<int64_t, 2>> shapeOf(Operation *op, Value v,
                                           StringRef what, unsigned rank,
                                           Elem elem, bool rowsStatic = false) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != rank)
    return op->emitOpError() << "GPU codegen: " << what << " must be a rank-"
                             << rank << " tensor, got " << v.getType();
  Type et = type.getElementType();
  bool ok = elem == Elem::F32 ? et.isF32() : et.isSignlessInteger(32);
  if (!ok)
    return op->emitOpError()
           << "GPU codegen: " << what << " must have element type "
           << (elem == Elem::F32 ? "f32" : "i32") << ", got " << et;
  for (unsigned d = rowsStatic ? 0 : 1; d < rank; ++d)
    if (type.isDynamicDim(d))
      return op->emitOpError() << "GPU codegen: dim " << d << " of " << what
                               << " must be static, got " << v.getType();
  return SmallVector<int64_t, 2>(type.getShape().begin(),
                                 type.getShape().end());
}

LogicalResult checkCounts(Operation *op, unsigned operands, unsigned results) {
  if (op->getNumOperands() != operands || op->getNumResults() != results)
    return op->emitOpError() << "GPU codegen: expected " << operands
                             << " operands and " << results
                             << " results, got " << op->getNumOperands()
                             << " and " << op->getNumResults();
  return success();
}

/// A result (or second operand) must be [rows, width] f32.
LogicalResult checkWidth(Operation *op, Value v, StringRef what,
                         int64_t width) {
  auto shape = shapeOf(op, v, what, 2, Elem::F32);
  if (failed(shape))
    return failure();
  if ((*shape)[1] != width)
    return op->emitOpError() << "GPU codegen: " << what << " has width "
                             << (*shape)[1] << ", expected " << width;
  return success();
}

/// A numeric attribute given as a float or an integer.
FailureOr<double> numberAttr(Operation *op, StringRef name,
                             std::optional<double> fallback = std::nullopt) {
  Attribute attr = op->getAttr(name);
  if (!attr) {
    if (fallback)
      return *fallback;
    return op->emitOpError() << "GPU codegen: missing attribute '" << name
                             << "'";
  }
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return static_cast<double>(i.getValue().getSExtValue());
  return op->emitOpError() << "GPU codegen: attribute '" << name
                           << "' must be a number, got " << attr;
}

FailureOr<int64_t> intAttr(Operation *op, StringRef name,
                           std::optional<int64_t> fallback = std::nullopt) {
  Attribute attr = op->getAttr(name);
  if (!attr) {
    if (fallback)
      return *fallback;
    return op->emitOpError() << "GPU codegen: missing attribute '" << name
                             << "'";
  }
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getValue().getSExtValue();
  return op->emitOpError() << "GPU codegen: attribute '" << name
                           << "' must be an integer, got " << attr;
}

FailureOr<std::string> stringAttr(Operation *op, StringRef name,
                                  StringRef fallback) {
  Attribute attr = op->getAttr(name);
  if (!attr)
    return fallback.str();
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.getValue().str();
  return op->emitOpError() << "GPU codegen: attribute '" << name
                           << "' must be a string, got " << attr;
}

FailureOr<KernelSpec> fromStatus(Operation *op,
                                 llmrt::StatusOr<KernelSpec> spec) {
  if (!spec.ok())
    return op->emitOpError() << "GPU codegen: " << spec.status().message();
  return std::move(spec).value();
}

std::string weightStorage(Operation *op, Value v);

FailureOr<KernelSpec> emitEmbedding(Operation *op) {
  if (failed(checkCounts(op, 2, 1)))
    return failure();
  if (failed(shapeOf(op, op->getOperand(0), "tokens", 1, Elem::I32)))
    return failure();
  auto table =
      shapeOf(op, op->getOperand(1), "table", 2, Elem::F32, /*rowsStatic=*/true);
  if (failed(table) || failed(checkWidth(op, op->getResult(0), "result",
                                         (*table)[1])))
    return failure();
  EmbeddingParams p{(*table)[0], (*table)[1], weightStorage(op, op->getOperand(1))};
  if (p.table.empty())
    return op->emitOpError() << "GPU codegen: quantized table in a CPU layout (compile with --weight-layout cuda-mma)";
  return fromStatus(op, emitEmbeddingKernel(p));
}

FailureOr<KernelSpec> emitRmsNormFamily(Operation *op, bool withAdd) {
  if (failed(checkCounts(op, withAdd ? 3 : 2, withAdd ? 2 : 1)))
    return failure();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x))
    return failure();
  int64_t width = (*x)[1];
  Value weight = op->getOperand(withAdd ? 2 : 1);
  auto w = shapeOf(op, weight, "weight", 1, Elem::F32, /*rowsStatic=*/true);
  if (failed(w))
    return failure();
  if (withAdd && failed(checkWidth(op, op->getOperand(1), "residual", width)))
    return failure();
  for (OpResult r : op->getResults())
    if (failed(checkWidth(op, r, "result", width)))
      return failure();
  auto eps = numberAttr(op, "eps");
  if (failed(eps))
    return failure();
  RmsNormParams p{width, (*w)[0], static_cast<float>(*eps), writesQuantizedOutput(op)};
  return fromStatus(op, withAdd ? emitAddRmsNormKernel(p)
                                : emitRmsNormKernel(p));
}

/// The rotation attributes of llm.rope / llm.rope_kv_store.
FailureOr<RopeParams> ropeParams(Operation *op) {
  RopeParams p;
  auto heads = intAttr(op, "num_heads");
  auto headDim = intAttr(op, "head_dim");
  auto theta = numberAttr(op, "theta");
  auto style = stringAttr(op, "style", "neox");
  auto ropeType = stringAttr(op, "rope_type", "default");
  if (failed(heads) || failed(headDim) || failed(theta) || failed(style) ||
      failed(ropeType))
    return failure();
  p.numHeads = *heads;
  p.headDim = *headDim;
  p.theta = *theta;
  p.style = *style;
  p.ropeType = *ropeType;
  // Scaling parameters are required only by the rope types that use them.
  bool scaled = p.ropeType == "linear" || p.ropeType == "llama3";
  bool llama3 = p.ropeType == "llama3";
  auto factor = numberAttr(op, "factor",
                           scaled ? std::nullopt : std::optional<double>(1.0));
  auto low = numberAttr(op, "low_freq_factor",
                        llama3 ? std::nullopt : std::optional<double>(1.0));
  auto high = numberAttr(op, "high_freq_factor",
                         llama3 ? std::nullopt : std::optional<double>(4.0));
  auto original =
      intAttr(op, "original_max_position",
              llama3 ? std::nullopt : std::optional<int64_t>(8192));
  if (failed(factor) || failed(low) || failed(high) || failed(original))
    return failure();
  p.factor = *factor;
  p.lowFreqFactor = *low;
  p.highFreqFactor = *high;
  p.originalMaxPosition = *original;
  return p;
}

FailureOr<KernelSpec> emitRope(Operation *op) {
  if (failed(checkCounts(op, 2, 1)))
    return failure();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x) ||
      failed(shapeOf(op, op->getOperand(1), "positions", 1, Elem::I32)) ||
      failed(checkWidth(op, op->getResult(0), "result", (*x)[1])))
    return failure();
  auto p = ropeParams(op);
  if (failed(p))
    return failure();
  if (p->numHeads <= 0 || p->headDim <= 0 ||
      (*x)[1] != p->numHeads * p->headDim)
    return op->emitOpError()
           << "GPU codegen: x width " << (*x)[1] << " != num_heads "
           << p->numHeads << " * head_dim " << p->headDim;
  return fromStatus(op, emitRopeKernel(*p));
}

FailureOr<KernelSpec> emitSiluMul(Operation *op) {
  unsigned n = op->getNumOperands();
  if (n != 1 && n != 2)
    return op->emitOpError()
           << "GPU codegen: expected 1 (fused gate_up) or 2 operands, got " << n;
  if (failed(checkCounts(op, n, 1)))
    return failure();
  auto first = shapeOf(op, op->getOperand(0), n == 1 ? "gate_up" : "gate", 2,
                       Elem::F32);
  if (failed(first))
    return failure();
  int64_t inter = (*first)[1];
  if (n == 1) {
    if (inter % 2 != 0)
      return op->emitOpError()
             << "GPU codegen: fused gate_up width " << inter << " is odd";
    inter /= 2;
  } else if (failed(checkWidth(op, op->getOperand(1), "up", inter))) {
    return failure();
  }
  if (failed(checkWidth(op, op->getResult(0), "result", inter)))
    return failure();
  return fromStatus(op, emitSiluMulKernel({inter, n == 1, writesQuantizedOutput(op)}));
}

/// The storage of weight operand `v` as the linear and embedding kernels name
/// it: "f32", "f16" or "bf16" for a dense weight, the format name for
/// a quantized one in the cuda_mma_n8 layout, "" for a quantized one in a
/// CPU layout (no GPU kernel reads those).
std::string weightStorage(Operation *op, Value v) {
  Operation *def = v.getDefiningOp();
  StringAttr quant = def ? def->getAttrOfType<StringAttr>("quant") : StringAttr();
  if (!quant || quant.getValue().empty())
    return "f32";
  if (quant.getValue() == "f16" || quant.getValue() == "bf16") // dense, row-major in any layout
    return quant.getValue().str();
  ModuleOp module = op->getParentOfType<ModuleOp>();
  StringAttr layout = module ? module->getAttrOfType<StringAttr>("llm.weight_layout") : StringAttr();
  if (!layout || layout.getValue() != "cuda_mma_n8")
    return "";
  return quant.getValue().str();
}

FailureOr<KernelSpec> emitLinearFamily(Operation *op, bool logits, bool tensorCores = false, int64_t siluInter = 0,
                                       std::optional<RmsNormParams> addRmsNorm = std::nullopt) {
  const unsigned n = op->getNumOperands();
  if (!logits && n != 2 && n != 3)
    return op->emitOpError() << "GPU codegen: linear takes x, weight and an optional bias, got " << n
                             << " operands";
  if (failed(checkCounts(op, logits ? 3 : n, 1))) // logits: x, weight, batch
    return failure();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  auto w = shapeOf(op, op->getOperand(1), "weight", 2, Elem::F32, /*rowsStatic=*/true);
  if (failed(x) || failed(w))
    return failure();
  if ((*w)[1] != (*x)[1])
    return op->emitOpError() << "GPU codegen: weight width " << (*w)[1] << " != x width " << (*x)[1];
  if (failed(checkWidth(op, op->getResult(0), "result", (*w)[0])))
    return failure();
  LinearParams p;
  p.n = (*w)[0];
  p.k = (*w)[1];
  p.weight = weightStorage(op, op->getOperand(1));
  if (p.weight.empty())
    return op->emitOpError() << "GPU codegen: quantized weight in a CPU layout (compile with --weight-layout cuda-mma)";
  p.bias = !logits && n == 3;
  p.tensorCores = tensorCores;
  p.gatherRows = logits;
  p.int8Activations = !tensorCores && usesInt8Activations(op);
  p.siluInter = siluInter;
  p.addRmsNorm = addRmsNorm;
  if (ModuleOp module = op->getParentOfType<ModuleOp>())
    if (auto bytes = module->getAttrOfType<IntegerAttr>("llm.gpu_gemv_l2_prefetch_bytes"))
      p.l2PrefetchBytes = bytes.getInt();
  if (p.bias && failed(shapeOf(op, op->getOperand(2), "bias", 1, Elem::F32, /*rowsStatic=*/true)))
    return failure();
  return fromStatus(op, emitLinearKernel(p));
}

FailureOr<KvCacheParams> cacheParams(Operation *op) {
  auto kvHeads = intAttr(op, "num_kv_heads");
  auto headDim = intAttr(op, "head_dim");
  auto blockSize = intAttr(op, "block_size");
  auto dtype = stringAttr(op, "kv_dtype", "f32");
  auto layout = stringAttr(op, "layout", "");
  if (failed(kvHeads) || failed(headDim) || failed(blockSize) || failed(dtype) || failed(layout))
    return failure();
  if (*layout != "block_head_slot_dim")
    return op->emitOpError() << "GPU codegen: KV layout '" << *layout << "' (expected block_head_slot_dim)";
  return KvCacheParams{*kvHeads, *headDim, *blockSize, *dtype};
}

FailureOr<KernelSpec> emitKvStore(Operation *op) {
  auto cache = cacheParams(op);
  if (failed(cache))
    return failure();
  for (unsigned i = 0; i < 2; ++i)
    if (failed(checkWidth(op, op->getOperand(i), i ? "v" : "k", cache->numKvHeads * cache->headDim)))
      return failure();
  return fromStatus(op, emitKvStoreKernel(*cache));
}

FailureOr<KernelSpec> emitRopeKvStore(Operation *op) {
  auto cache = cacheParams(op);
  auto rope = ropeParams(op);
  if (failed(cache) || failed(rope))
    return failure();
  const int64_t qWidth = rope->numHeads * cache->headDim;
  if (failed(shapeOf(op, op->getOperand(1), "positions", 1, Elem::I32)) ||
      failed(checkWidth(op, op->getOperand(0), "qkv", qWidth + 2 * cache->numKvHeads * cache->headDim)) ||
      failed(checkWidth(op, op->getResult(0), "q", qWidth)))
    return failure();
  return fromStatus(op, emitRopeKvStoreKernel({*rope, *cache}));
}

FailureOr<AttentionParams> attentionParams(Operation *op) {
  auto cache = cacheParams(op);
  auto heads = intAttr(op, "num_heads");
  auto scale = numberAttr(op, "scale");
  auto window = intAttr(op, "sliding_window", 0);
  if (failed(cache) || failed(heads) || failed(scale) || failed(window))
    return failure();
  if (failed(checkWidth(op, op->getOperand(0), "q", *heads * cache->headDim)) ||
      failed(checkWidth(op, op->getResult(0), "result", *heads * cache->headDim)))
    return failure();
  AttentionParams p;
  p.cache = *cache;
  p.numHeads = *heads;
  p.scale = static_cast<float>(*scale);
  p.slidingWindow = *window;
  return p;
}

FailureOr<KernelSpec> emitPagedAttention(Operation *op) {
  FailureOr<AttentionParams> p = attentionParams(op);
  if (failed(p))
    return failure();
  p->quantizedOutput = writesQuantizedOutput(op); // (the per-row kernel; the tiled one never)
  return fromStatus(op, emitPagedAttentionKernel(*p));
}

FailureOr<KernelSpec> emitAdd(Operation *op) {
  if (failed(checkCounts(op, 2, 1)))
    return failure();
  auto a = shapeOf(op, op->getOperand(0), "a", 2, Elem::F32);
  if (failed(a) || failed(checkWidth(op, op->getOperand(1), "b", (*a)[1])) ||
      failed(checkWidth(op, op->getResult(0), "result", (*a)[1])))
    return failure();
  return fromStatus(op, emitAddKernel((*a)[1]));
}

FailureOr<KernelSpec> emitSplit(Operation *op) {
  if (op->getNumOperands() != 1)
    return op->emitOpError() << "GPU codegen: split takes one operand";
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x))
    return failure();
  std::vector<int64_t> sizes;
  for (OpResult r : op->getResults()) {
    auto shape = shapeOf(op, r, "result", 2, Elem::F32);
    if (failed(shape))
      return failure();
    sizes.push_back((*shape)[1]);
  }
  return fromStatus(op, emitSplitKernel((*x)[1], sizes));
}

FailureOr<KernelSpec> emitPermuteColumns(Operation *op) {
  if (failed(checkCounts(op, 1, 1)))
    return failure();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x) || failed(checkWidth(op, op->getResult(0), "result", (*x)[1])))
    return failure();
  return fromStatus(op, emitPermuteColumnsKernel((*x)[1], writesQuantizedOutput(op)));
}

} // namespace

bool hasKernel(Operation *op) {
  StringRef name = op->getName().getStringRef();
  if (name == "llm.embedding" || name == "llm.linear" || name == "llm.logits")
    return op->getNumOperands() >= 2 && !weightStorage(op, op->getOperand(1)).empty();
  if (name == "llm.kv_store" || name == "llm.rope_kv_store" || name == "llm.paged_attention") {
    auto dtype = op->getAttrOfType<StringAttr>("kv_dtype");
    return !dtype || kvCacheHasKernels(dtype.getValue().str());
  }
  return name == "llm.rms_norm" || name == "llm.add_rms_norm" || name == "llm.rope" ||
         name == "llm.silu_mul" || name == "llm.add" || name == "llm.split" ||
         name == "llm.permute_columns";
}

FailureOr<std::optional<KernelSpec>> emitBatchedKernel(Operation *op) {
  StringRef name = op->getName().getStringRef();
  if (name != "llm.linear" && name != "llm.logits" && name != "llm.paged_attention")
    return std::optional<KernelSpec>();
  if (ModuleOp module = op->getParentOfType<ModuleOp>())
    if (auto tc = module->getAttrOfType<BoolAttr>("llm.gpu_tensor_cores"); tc && !tc.getValue())
      return std::optional<KernelSpec>();
  FailureOr<KernelSpec> spec = failure();
  if (name == "llm.paged_attention") {
    FailureOr<AttentionParams> p = attentionParams(op);
    if (failed(p))
      return failure();
    if (!tiledAttentionApplies(*p)) // the per-row kernel runs every step
      return std::optional<KernelSpec>();
    p->tensorCores = true;
    spec = fromStatus(op, emitPagedAttentionKernel(*p));
  } else {
    spec = emitLinearFamily(op, name == "llm.logits", /*tensorCores=*/true);
  }
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

namespace {
// A weight storage that is neither dense nor empty (a quantized format in the cuda_mma_n8 layout).
bool quantizedStorage(const std::string &w) { return !w.empty() && w != "f32" && w != "f16" && w != "bf16"; }
} // namespace

bool usesGemmLibrary(Operation *op) {
  if (op->getName().getStringRef() != "llm.linear" || !hasKernel(op))
    return false;
  const std::string w = weightStorage(op, op->getOperand(1));
  const bool quantized = quantizedStorage(w);
  if (ModuleOp module = op->getParentOfType<ModuleOp>()) {
    if (auto tc = module->getAttrOfType<BoolAttr>("llm.gpu_tensor_cores"); tc && !tc.getValue())
      return false;
    const char *choice = quantized ? "llm.gpu_quant_gemm" : "llm.gpu_dense_gemm";
    if (auto g = module->getAttrOfType<StringAttr>(choice); g && g.getValue() == "generated")
      return false;
  }
  return w == "bf16" || w == "f32" || quantized;
}

int libraryMinRows(Operation *op) {
  return quantizedStorage(weightStorage(op, op->getOperand(1))) ? kQuantLibraryMinRows : batchedMinRows(op);
}

FailureOr<std::optional<KernelSpec>> emitLibraryWeightKernel(Operation *op) {
  if (!usesGemmLibrary(op))
    return std::optional<KernelSpec>();
  const std::string w = weightStorage(op, op->getOperand(1));
  if (!quantizedStorage(w))
    return std::optional<KernelSpec>();
  auto shape = shapeOf(op, op->getOperand(1), "weight", 2, Elem::F32, /*rowsStatic=*/true);
  if (failed(shape))
    return failure();
  FailureOr<KernelSpec> spec = fromStatus(op, emitDequantBf16Kernel(w, (*shape)[0], (*shape)[1]));
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

bool usesInt8Activations(Operation *op) {
  const llvm::StringRef name = op->getName().getStringRef();
  if ((name != "llm.linear" && name != "llm.logits") || op->getNumOperands() < 2 ||
      !quantizedStorage(weightStorage(op, op->getOperand(1))))
    return false;
  if (ModuleOp module = op->getParentOfType<ModuleOp>())
    if (auto g = module->getAttrOfType<StringAttr>("llm.gpu_quant_gemv"); g && g.getValue() == "f32")
      return false;
  return true;
}

bool writesQuantizedOutput(Operation *op) {
  const llvm::StringRef name = op->getName().getStringRef();
  if ((name != "llm.rms_norm" && name != "llm.add_rms_norm" && name != "llm.silu_mul" &&
       name != "llm.permute_columns" && name != "llm.paged_attention") ||
      op->getNumResults() == 0)
    return false;
  if (name == "llm.paged_attention") { // a head's dimensions in whole blocks of 32
    auto headDim = op->getAttrOfType<IntegerAttr>("head_dim");
    if (!headDim || headDim.getInt() % 32 != 0)
      return false;
  }
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || type.getRank() != 2 || type.isDynamicDim(1) || type.getDimSize(1) % 32 != 0)
    return false;
  if (name == "llm.rms_norm") { // one group over the row (not a per-head norm)
    auto w = op->getNumOperands() > 1 ? dyn_cast<RankedTensorType>(op->getOperand(1).getType()) : RankedTensorType();
    if (!w || w.getRank() != 1 || w.getDimSize(0) != type.getDimSize(1))
      return false;
  }
  for (OpOperand &use : op->getResult(0).getUses())
    if (use.getOperandNumber() == 0 && use.getOwner()->getName().getStringRef() == "llm.linear" &&
        usesInt8Activations(use.getOwner()))
      return true;
  return false;
}

FailureOr<std::optional<KernelSpec>> emitInputQuantKernel(Operation *op) {
  if (!usesInt8Activations(op))
    return std::optional<KernelSpec>();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x))
    return failure();
  FailureOr<KernelSpec> spec =
      fromStatus(op, emitQuantizeQ8Kernel((*x)[1], op->getName().getStringRef() == "llm.logits"));
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

FailureOr<std::optional<KernelSpec>> emitLibraryInputKernel(Operation *op) {
  if (!usesGemmLibrary(op))
    return std::optional<KernelSpec>();
  const std::string w = weightStorage(op, op->getOperand(1));
  if (w != "bf16" && !quantizedStorage(w))
    return std::optional<KernelSpec>();
  auto x = shapeOf(op, op->getOperand(0), "x", 2, Elem::F32);
  if (failed(x))
    return failure();
  FailureOr<KernelSpec> spec = fromStatus(op, emitToBf16Kernel((*x)[1]));
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

int batchedMinRows(Operation *op) {
  const llvm::StringRef name = op->getName().getStringRef();
  if (name == "llm.paged_attention")
    return kTiledAttentionMinRows;
  // Quantized weights (a format other than dense f32/f16/bf16): their own threshold.
  if ((name == "llm.linear" || name == "llm.logits") && op->getNumOperands() > 1) {
    const std::string w = weightStorage(op, op->getOperand(1));
    if (w != "f32" && w != "f16" && w != "bf16")
      return kQuantTensorCoreMinRows;
  }
  return kTensorCoreMinRows;
}

FailureOr<std::optional<KernelSpec>> emitSiluLinearKernel(Operation *op) {
  const std::optional<KernelSpec> none;
  if (op->getName().getStringRef() != "llm.linear" || !hasKernel(op) || op->getNumResults() != 1)
    return none;
  Operation *silu = op->getNextNode();
  if (!silu || silu->getName().getStringRef() != "llm.silu_mul" || silu->getNumOperands() != 1 ||
      silu->getOperand(0) != op->getResult(0) || !op->getResult(0).hasOneUse() || !hasKernel(silu))
    return none;
  // Dense weights: a warp per column of h cannot write a 32-value block's int8 rows.
  const bool quantized = quantizedStorage(weightStorage(op, op->getOperand(1)));
  if (!quantized && writesQuantizedOutput(silu))
    return none;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  auto x = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!type || type.getRank() != 2 || type.isDynamicDim(1) || type.getDimSize(1) % 64 != 0 || !x ||
      x.getRank() != 2 || x.isDynamicDim(1))
    return none;
  // Only where the plain GEMV has one warp per tile too (its K split over none): a smaller
  // gate|up keeps its K split, which the epilogue's whole-K warps would give up.
  if (quantized && quantizedGemvWarps(type.getDimSize(1), x.getDimSize(1)) != 1)
    return none;
  FailureOr<KernelSpec> spec = emitLinearFamily(op, /*logits=*/false, /*tensorCores=*/false, type.getDimSize(1) / 2);
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

FailureOr<std::optional<KernelSpec>> emitNormLinearKernel(Operation *op) {
  const std::optional<KernelSpec> none;
  if (op->getName().getStringRef() != "llm.linear" || !hasKernel(op) || op->getNumResults() != 1)
    return none;
  Operation *norm = op->getNextNode();
  // (Weights are no steps: the norm's weight comes between.)
  while (norm && (norm->getName().getStringRef() == "llm.weight" || norm->getName().getStringRef() == "llm.weight_concat"))
    norm = norm->getNextNode();
  if (!norm || norm->getName().getStringRef() != "llm.add_rms_norm" || norm->getNumOperands() != 3 ||
      norm->getNumResults() != 2 || !hasKernel(norm) ||
      (norm->getOperand(0) == op->getResult(0)) == (norm->getOperand(1) == op->getResult(0)))
    return none;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  auto w = dyn_cast<RankedTensorType>(norm->getOperand(2).getType());
  if (!type || type.getRank() != 2 || type.isDynamicDim(1) || !w || w.getRank() != 1 ||
      w.getDimSize(0) != type.getDimSize(1))
    return none;
  FailureOr<double> eps = numberAttr(norm, "eps"); // (the add_rms_norm's own kernel reads it alike)
  if (failed(eps))
    return failure();
  const RmsNormParams p{type.getDimSize(1), type.getDimSize(1), static_cast<float>(*eps), writesQuantizedOutput(norm)};
  FailureOr<KernelSpec> spec = emitLinearFamily(op, /*logits=*/false, /*tensorCores=*/false, 0, p);
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

FailureOr<std::optional<KernelSpec>> emitRopeAttentionKernel(Operation *op) {
  const std::optional<KernelSpec> none;
  if (op->getName().getStringRef() != "llm.paged_attention" || !hasKernel(op))
    return none;
  // (operand and result counts: the dialect's verifier)
  Operation *store = op->getOperand(0).getDefiningOp();
  if (!store || store->getName().getStringRef() != "llm.rope_kv_store" || store != op->getPrevNode() ||
      op->getOperand(0) != store->getResult(0) || !store->getResult(0).hasOneUse() ||
      op->getOperand(1) != store->getResult(1) || !hasKernel(store))
    return none;
  // Positions: @forward's (the runtime's positions buffer, which the attention reads too).
  auto positions = dyn_cast<BlockArgument>(store->getOperand(1));
  if (!positions || positions.getArgNumber() != 1 || !positions.getOwner()->isEntryBlock() ||
      positions.getOwner()->getParentOp()->getName().getStringRef() != "func.func")
    return none;
  auto layer = op->getAttrOfType<IntegerAttr>("layer"), storeLayer = store->getAttrOfType<IntegerAttr>("layer");
  if (!layer || !storeLayer || layer.getInt() != storeLayer.getInt())
    return none;
  FailureOr<AttentionParams> p = attentionParams(op);
  FailureOr<KvCacheParams> cache = cacheParams(store);
  FailureOr<RopeParams> rope = ropeParams(store);
  if (failed(p) || failed(cache) || failed(rope))
    return failure();
  if (cache->numKvHeads != p->cache.numKvHeads || cache->headDim != p->cache.headDim ||
      cache->blockSize != p->cache.blockSize || cache->kvDtype != p->cache.kvDtype || rope->numHeads != p->numHeads)
    return none;
  p->quantizedOutput = writesQuantizedOutput(op);
  p->rope = *rope;
  FailureOr<KernelSpec> spec = fromStatus(op, emitPagedAttentionKernel(*p));
  if (failed(spec))
    return failure();
  return std::optional<KernelSpec>(std::move(*spec));
}

FailureOr<KernelSpec> emitKernel(Operation *op) {
  StringRef name = op->getName().getStringRef();
  if (name == "llm.embedding")
    return emitEmbedding(op);
  if (name == "llm.rms_norm")
    return emitRmsNormFamily(op, /*withAdd=*/false);
  if (name == "llm.add_rms_norm")
    return emitRmsNormFamily(op, /*withAdd=*/true);
  if (name == "llm.rope")
    return emitRope(op);
  if (name == "llm.silu_mul")
    return emitSiluMul(op);
  if (name == "llm.linear")
    return emitLinearFamily(op, /*logits=*/false);
  if (name == "llm.logits")
    return emitLinearFamily(op, /*logits=*/true);
  if (name == "llm.kv_store")
    return emitKvStore(op);
  if (name == "llm.rope_kv_store")
    return emitRopeKvStore(op);
  if (name == "llm.paged_attention")
    return emitPagedAttention(op);
  if (name == "llm.add")
    return emitAdd(op);
  if (name == "llm.split")
    return emitSplit(op);
  if (name == "llm.permute_columns")
    return emitPermuteColumns(op);
  return op->emitOpError() << "has no GPU kernel in codegen (supported: "
                              "llm.embedding, llm.rms_norm, llm.add_rms_norm, "
                              "llm.rope, llm.silu_mul, llm.linear, llm.logits, "
                              "llm.kv_store, llm.rope_kv_store, llm.paged_attention, llm.add, "
                              "llm.split, llm.permute_columns)";
}

} // namespace llmc

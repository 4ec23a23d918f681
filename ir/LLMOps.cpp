//===- LLMOps.cpp - `llm` op verifiers, builders and folders --------------===//
//
// Verifiers check what the runtime relies on (PROGRAM.md): activations are
// 2-D f32 tensors [rows, width] with a static width, weights are statically
// shaped f32 tensors, widths agree with the head geometry, and attributes are
// consistent. Every failure names the operand/attribute and the values seen.
//
//===----------------------------------------------------------------------===//

#include "ir/LLMDialect.h"
#include "runtime/quant/quant_format.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <vector>

using namespace mlir;
using namespace llmc::llm;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

int64_t llmc::llm::rowWidth(RankedTensorType type) {
  int64_t width = 1;
  for (int64_t d : type.getShape().drop_front()) {
    if (ShapedType::isDynamic(d))
      return -1;
    width *= d;
  }
  return width;
}

bool llmc::llm::isWeightValue(Value v) {
  Operation *def = v.getDefiningOp();
  return def && isa<WeightOp, WeightConcatOp>(def);
}

namespace {

/// Checks that `type` is an activation: 2-D f32 [rows, width], static width.
LogicalResult expectActivation(Operation *op, Type type, StringRef what,
                               int64_t &width) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || t.getRank() != 2 || !t.getElementType().isF32() ||
      t.isDynamicDim(1))
    return op->emitOpError()
           << what
           << " must be a 2-D f32 tensor [rows, width] with a static width, got "
           << type;
  width = t.getDimSize(1);
  return success();
}

/// Checks that two activations have compatible row counts (equal when both
/// are static).
LogicalResult expectSameRows(Operation *op, Type a, StringRef aWhat, Type b,
                             StringRef bWhat) {
  int64_t ra = cast<RankedTensorType>(a).getDimSize(0);
  int64_t rb = cast<RankedTensorType>(b).getDimSize(0);
  if (!ShapedType::isDynamic(ra) && !ShapedType::isDynamic(rb) && ra != rb)
    return op->emitOpError() << "row count of " << aWhat << " (" << ra
                             << ") differs from row count of " << bWhat << " ("
                             << rb << ")";
  return success();
}

/// Checks that `type` is a statically shaped f32 tensor of rank `rank`.
LogicalResult expectStaticF32(Operation *op, Type type, StringRef what,
                              int64_t rank, ArrayRef<int64_t> &shape) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || t.getRank() != rank || !t.hasStaticShape() ||
      !t.getElementType().isF32())
    return op->emitOpError() << what << " must be a statically shaped " << rank
                             << "-D f32 tensor, got " << type;
  shape = t.getShape();
  return success();
}

/// Checks that `type` is a 1-D i32 tensor (tokens, positions).
LogicalResult expectI32Vector(Operation *op, Type type, StringRef what) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || t.getRank() != 1 || !t.getElementType().isInteger(32))
    return op->emitOpError() << what << " must be a 1-D i32 tensor, got "
                             << type;
  return success();
}

LogicalResult expectPositive(Operation *op, IntegerAttr attr, StringRef what) {
  if (attr.getInt() <= 0)
    return op->emitOpError() << what << " must be positive, got "
                             << attr.getInt();
  return success();
}

LogicalResult expectNonNegative(Operation *op, IntegerAttr attr,
                                StringRef what) {
  if (attr.getInt() < 0)
    return op->emitOpError() << what << " must be non-negative, got "
                             << attr.getInt();
  return success();
}

/// `block_size`, `kv_dtype` and `layout` come together (--llm-kv-cache-layout).
LogicalResult verifyKvLayoutAttrs(Operation *op, IntegerAttr blockSize,
                                  StringAttr kvDtype, StringAttr layout) {
  int present = (blockSize ? 1 : 0) + (kvDtype ? 1 : 0) + (layout ? 1 : 0);
  if (present == 0)
    return success();
  if (present != 3)
    return op->emitOpError(
        "block_size, kv_dtype and layout must be set together");
  if (blockSize.getInt() <= 0)
    return op->emitOpError() << "block_size must be positive, got "
                             << blockSize.getInt();
  StringRef dtype = kvDtype.getValue();
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16" && dtype != "fp8" && dtype != "int8")
    return op->emitOpError() << "kv_dtype must be one of f32, f16, bf16, fp8, int8, got '"
                             << dtype << "'";
  if (layout.getValue() != kKvLayoutBlockHeadSlotDim)
    return op->emitOpError() << "unknown kv layout '" << layout.getValue()
                             << "' (expected '" << kKvLayoutBlockHeadSlotDim
                             << "')";
  return success();
}

/// Result type [rows(x), width] f32.
RankedTensorType activationType(Value x, int64_t width) {
  int64_t rows = ShapedType::kDynamic;
  if (auto t = dyn_cast<RankedTensorType>(x.getType()); t && t.getRank() >= 1)
    rows = t.getDimSize(0);
  return RankedTensorType::get({rows, width},
                               Float32Type::get(x.getContext()));
}

int64_t dimOr(Type type, unsigned dim, int64_t fallback) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || t.getRank() <= dim)
    return fallback;
  return t.getDimSize(dim);
}

} // namespace

//===----------------------------------------------------------------------===//
// WeightOp / WeightConcatOp
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError("name must not be empty");
  auto t = cast<RankedTensorType>(getResult().getType());
  if (t.getRank() < 1 || !t.hasStaticShape() || !t.getElementType().isF32())
    return emitOpError()
           << "result must be a statically shaped f32 tensor of rank >= 1, got "
           << t;
  for (auto [attr, what] : {std::pair{getSourceQuantAttr(), "source_quant"},
                            std::pair{getQuantAttr(), "quant"}}) {
    if (!attr)
      continue;
    if (llvm::StringRef(what) == "quant" && isDenseHalf(attr.getValue())) {
      if (t.getRank() != 2)
        return emitOpError() << what << " needs a 2-D weight, got " << t;
      continue;
    }
    auto f = llmrt::quant::parse_format(attr.getValue().str());
    if (!f.ok())
      return emitOpError() << what << ": " << f.status().message();
    if (t.getRank() != 2)
      return emitOpError() << what << " needs a 2-D weight, got " << t;
    auto rb = llmrt::quant::row_bytes(*f, t.getDimSize(1));
    if (!rb.ok())
      return emitOpError() << what << ": " << rb.status().message();
  }
  return success();
}

bool llmc::llm::isDenseHalf(llvm::StringRef storage) {
  return storage == "f16" || storage == "bf16";
}

llvm::StringRef llmc::llm::weightQuant(Value v) {
  Operation *def = v.getDefiningOp();
  StringAttr q;
  if (auto w = dyn_cast_or_null<WeightOp>(def))
    q = w.getQuantAttr();
  else if (auto c = dyn_cast_or_null<WeightConcatOp>(def))
    q = c.getQuantAttr();
  return q ? q.getValue() : llvm::StringRef();
}

void WeightConcatOp::build(OpBuilder &b, OperationState &state,
                           ValueRange inputs, int64_t axis) {
  SmallVector<int64_t> shape;
  Type elem = b.getF32Type();
  if (!inputs.empty())
    if (auto t0 = dyn_cast<RankedTensorType>(inputs[0].getType())) {
      shape.assign(t0.getShape().begin(), t0.getShape().end());
      elem = t0.getElementType();
      if (axis >= 0 && axis < t0.getRank()) {
        shape[axis] = 0;
        for (Value in : inputs)
          shape[axis] += dimOr(in.getType(), axis, 0);
      }
    }
  StringRef quant = inputs.empty() ? StringRef() : weightQuant(inputs[0]);
  build(b, state, RankedTensorType::get(shape, elem), inputs,
        b.getI64IntegerAttr(axis),
        quant.empty() ? StringAttr() : b.getStringAttr(quant));
}

LogicalResult WeightConcatOp::verify() {
  auto inputs = getInputs();
  if (inputs.size() < 2)
    return emitOpError() << "needs at least two inputs, got " << inputs.size();
  for (auto [i, in] : llvm::enumerate(inputs))
    if (!isWeightValue(in))
      return emitOpError() << "operand #" << i
                           << " must be produced by llm.weight or "
                              "llm.weight_concat";
  StringRef quant = getQuantAttr() ? getQuantAttr().getValue() : StringRef();
  for (auto [i, in] : llvm::enumerate(inputs))
    if (weightQuant(in) != quant)
      return emitOpError() << "operand #" << i << " is stored as '"
                           << weightQuant(in) << "' but the concatenation as '"
                           << quant
                           << "': only weights of one scheme concatenate";
  auto t0 = cast<RankedTensorType>(inputs[0].getType());
  int64_t rank = t0.getRank();
  int64_t axis = getAxisAttr().getInt();
  if (!quant.empty() && !isDenseHalf(quant) && axis != 0)
    return emitOpError() << "quantized weights concatenate along axis 0 only";
  if (axis < 0 || axis >= rank)
    return emitOpError() << "axis " << axis << " is out of range for rank "
                         << rank;
  int64_t sum = 0;
  for (auto [i, in] : llvm::enumerate(inputs)) {
    ArrayRef<int64_t> shape;
    if (failed(expectStaticF32(*this, in.getType(),
                               "operand #" + std::to_string(i), rank, shape)))
      return failure();
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && shape[d] != t0.getDimSize(d))
        return emitOpError() << "operand #" << i << " has dim " << d << " = "
                             << shape[d] << " but operand #0 has "
                             << t0.getDimSize(d);
    sum += shape[axis];
  }
  ArrayRef<int64_t> rshape;
  if (failed(expectStaticF32(*this, getResult().getType(), "result", rank,
                             rshape)))
    return failure();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t want = d == axis ? sum : t0.getDimSize(d);
    if (rshape[d] != want)
      return emitOpError() << "result dim " << d << " must be " << want
                           << (d == axis ? " (sum of the operands along axis)"
                                         : " (as in the operands)")
                           << ", got " << rshape[d];
  }
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

void EmbeddingOp::build(OpBuilder &b, OperationState &state, Value tokens,
                        Value table) {
  int64_t rows = dimOr(tokens.getType(), 0, ShapedType::kDynamic);
  int64_t width = dimOr(table.getType(), 1, ShapedType::kDynamic);
  build(b, state, RankedTensorType::get({rows, width}, b.getF32Type()), tokens,
        table);
}

LogicalResult EmbeddingOp::verify() {
  if (failed(expectI32Vector(*this, getTokens().getType(), "tokens")))
    return failure();
  ArrayRef<int64_t> table;
  if (failed(expectStaticF32(*this, getTable().getType(), "table", 2, table)))
    return failure();
  int64_t width;
  if (failed(expectActivation(*this, getResult().getType(), "result", width)))
    return failure();
  if (width != table[1])
    return emitOpError() << "result width " << width
                         << " must equal the table's row size " << table[1];
  return expectSameRows(*this, getTokens().getType(), "tokens",
                        getResult().getType(), "result");
}

//===----------------------------------------------------------------------===//
// RmsNormOp / AddOp / AddRmsNormOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyEps(Operation *op, double eps) {
  if (!std::isfinite(eps) || eps < 0)
    return op->emitOpError() << "eps must be finite and non-negative, got "
                             << eps;
  return success();
}

void RmsNormOp::build(OpBuilder &b, OperationState &state, Value x,
                      Value weight, double eps) {
  build(b, state, x.getType(), x, weight, b.getF64FloatAttr(eps));
}

LogicalResult RmsNormOp::verify() {
  int64_t width, outWidth;
  ArrayRef<int64_t> w;
  if (failed(expectActivation(*this, getX().getType(), "x", width)) ||
      failed(expectStaticF32(*this, getWeight().getType(), "weight", 1, w)) ||
      failed(expectActivation(*this, getResult().getType(), "result",
                              outWidth)) ||
      failed(verifyEps(*this, getEps().convertToDouble())))
    return failure();
  if (w[0] <= 0 || width % w[0] != 0)
    return emitOpError() << "x width " << width
                         << " is not a multiple of the weight size " << w[0];
  if (outWidth != width)
    return emitOpError() << "result width " << outWidth
                         << " must equal x width " << width;
  return expectSameRows(*this, getX().getType(), "x", getResult().getType(),
                        "result");
}

void AddOp::build(OpBuilder &b, OperationState &state, Value lhs, Value rhs) {
  build(b, state, lhs.getType(), lhs, rhs);
}

LogicalResult AddOp::verify() {
  int64_t a, c, r;
  if (failed(expectActivation(*this, getLhs().getType(), "lhs", a)) ||
      failed(expectActivation(*this, getRhs().getType(), "rhs", c)) ||
      failed(expectActivation(*this, getResult().getType(), "result", r)))
    return failure();
  if (a != c || a != r)
    return emitOpError() << "widths must agree, got lhs " << a << ", rhs " << c
                         << ", result " << r;
  if (failed(expectSameRows(*this, getLhs().getType(), "lhs",
                            getRhs().getType(), "rhs")))
    return failure();
  return expectSameRows(*this, getLhs().getType(), "lhs",
                        getResult().getType(), "result");
}

void AddRmsNormOp::build(OpBuilder &b, OperationState &state, Value x,
                         Value residual, Value weight, double eps) {
  build(b, state, x.getType(), x.getType(), x, residual, weight,
        b.getF64FloatAttr(eps));
}

LogicalResult AddRmsNormOp::verify() {
  int64_t x, r, n, s;
  ArrayRef<int64_t> w;
  if (failed(expectActivation(*this, getX().getType(), "x", x)) ||
      failed(expectActivation(*this, getResidual().getType(), "residual", r)) ||
      failed(expectStaticF32(*this, getWeight().getType(), "weight", 1, w)) ||
      failed(expectActivation(*this, getNormed().getType(), "normed", n)) ||
      failed(expectActivation(*this, getSum().getType(), "sum", s)) ||
      failed(verifyEps(*this, getEps().convertToDouble())))
    return failure();
  if (x != r || x != n || x != s)
    return emitOpError() << "widths must agree, got x " << x << ", residual "
                         << r << ", normed " << n << ", sum " << s;
  if (w[0] != x)
    return emitOpError() << "weight size " << w[0]
                         << " must equal the width " << x
                         << " (add_rms_norm is a plain RMSNorm)";
  if (failed(expectSameRows(*this, getX().getType(), "x",
                            getResidual().getType(), "residual")) ||
      failed(expectSameRows(*this, getX().getType(), "x",
                            getNormed().getType(), "normed")))
    return failure();
  return expectSameRows(*this, getX().getType(), "x", getSum().getType(),
                        "sum");
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

void LinearOp::build(OpBuilder &b, OperationState &state, Value x,
                     Value weight, Value bias) {
  int64_t n = dimOr(weight.getType(), 0, ShapedType::kDynamic);
  build(b, state, activationType(x, n), x, weight, bias);
}

LogicalResult LinearOp::verify() {
  int64_t k, n;
  ArrayRef<int64_t> w;
  if (failed(expectActivation(*this, getX().getType(), "x", k)) ||
      failed(expectStaticF32(*this, getWeight().getType(), "weight", 2, w)) ||
      failed(expectActivation(*this, getResult().getType(), "result", n)))
    return failure();
  if (w[1] != k)
    return emitOpError() << "weight is [" << w[0] << ", " << w[1]
                         << "] ([out, in]) but x has width " << k;
  if (n != w[0])
    return emitOpError() << "result width " << n
                         << " must equal the weight's output size " << w[0];
  if (Value bias = getBias()) {
    ArrayRef<int64_t> bshape;
    if (failed(expectStaticF32(*this, bias.getType(), "bias", 1, bshape)))
      return failure();
    if (bshape[0] != w[0])
      return emitOpError() << "bias size " << bshape[0]
                           << " must equal the weight's output size " << w[0];
  }
  return expectSameRows(*this, getX().getType(), "x", getResult().getType(),
                        "result");
}

//===----------------------------------------------------------------------===//
// PermuteColumnsOp
//===----------------------------------------------------------------------===//

LogicalResult PermuteColumnsOp::verify() {
  int64_t k, n;
  if (failed(expectActivation(*this, getX().getType(), "x", k)) ||
      failed(expectActivation(*this, getResult().getType(), "result", n)))
    return failure();
  if (n != k)
    return emitOpError() << "result width " << n << " must equal x's width " << k;
  ArrayRef<int64_t> perm = getPerm();
  if (static_cast<int64_t>(perm.size()) != k)
    return emitOpError() << "perm has " << perm.size() << " entries but x has width " << k;
  std::vector<bool> seen(k, false);
  for (auto [j, p] : llvm::enumerate(perm)) {
    if (p < 0 || p >= k)
      return emitOpError() << "perm[" << j << "] = " << p << " is outside [0, " << k << ")";
    if (seen[p])
      return emitOpError() << "perm[" << j << "] = " << p << " repeats an earlier entry";
    seen[p] = true;
  }
  return expectSameRows(*this, getX().getType(), "x", getResult().getType(), "result");
}

//===----------------------------------------------------------------------===//
// SplitOp
//===----------------------------------------------------------------------===//

void SplitOp::build(OpBuilder &b, OperationState &state, Value x,
                    ArrayRef<int64_t> sizes) {
  SmallVector<Type> types;
  for (int64_t s : sizes)
    types.push_back(activationType(x, s));
  build(b, state, types, x, b.getDenseI64ArrayAttr(sizes));
}

LogicalResult SplitOp::verify() {
  int64_t width;
  if (failed(expectActivation(*this, getX().getType(), "x", width)))
    return failure();
  ArrayRef<int64_t> sizes = getSizes();
  if (sizes.empty())
    return emitOpError("sizes must not be empty");
  int64_t sum = 0;
  for (auto [i, s] : llvm::enumerate(sizes)) {
    if (s <= 0)
      return emitOpError() << "size #" << i << " must be positive, got " << s;
    sum += s;
  }
  if (sum != width)
    return emitOpError() << "sizes sum to " << sum << " but x has width "
                         << width;
  if (getNumResults() != sizes.size())
    return emitOpError() << "has " << getNumResults() << " results but "
                         << sizes.size() << " sizes";
  for (auto [i, r] : llvm::enumerate(getResults())) {
    int64_t rw;
    std::string what = "result #" + std::to_string(i);
    if (failed(expectActivation(*this, r.getType(), what, rw)))
      return failure();
    if (rw != sizes[i])
      return emitOpError() << what << " has width " << rw << " but size #"
                           << i << " is " << sizes[i];
    if (failed(expectSameRows(*this, getX().getType(), "x", r.getType(),
                              what)))
      return failure();
  }
  return success();
}

LogicalResult SplitOp::fold(FoldAdaptor, SmallVectorImpl<OpFoldResult> &results) {
  // A split into one piece is the input itself.
  if (getNumResults() != 1 || getResult(0).getType() != getX().getType())
    return failure();
  results.push_back(getX());
  return success();
}

//===----------------------------------------------------------------------===//
// RopeOp
//===----------------------------------------------------------------------===//

/// The rotation attributes shared by llm.rope and llm.rope_kv_store.
template <typename RopeLikeOp>
static LogicalResult verifyRopeAttrs(RopeLikeOp op) {
  double theta = op.getTheta().convertToDouble();
  if (!std::isfinite(theta) || theta <= 0)
    return op.emitOpError() << "theta must be positive, got " << theta;
  StringRef style = op.getStyle();
  if (style != "neox" && style != "interleaved")
    return op.emitOpError() << "style must be 'neox' or 'interleaved', got '"
                            << style << "'";
  StringRef type = op.getRopeType();
  double factor = op.getFactor().convertToDouble();
  if (type == "default")
    return success();
  if (type != "linear" && type != "llama3")
    return op.emitOpError()
           << "rope_type must be 'default', 'linear' or 'llama3', got '"
           << type << "'";
  if (!std::isfinite(factor) || factor <= 0)
    return op.emitOpError() << "factor must be positive for rope_type '"
                            << type << "', got " << factor;
  if (type == "llama3") {
    double lo = op.getLowFreqFactor().convertToDouble();
    double hi = op.getHighFreqFactor().convertToDouble();
    if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi))
      return op.emitOpError() << "llama3 rope needs 0 < low_freq_factor < "
                                 "high_freq_factor, got "
                              << lo << " and " << hi;
    if (op.getOriginalMaxPositionAttr().getInt() <= 0)
      return op.emitOpError() << "llama3 rope needs a positive "
                                 "original_max_position, got "
                              << op.getOriginalMaxPositionAttr().getInt();
  }
  return success();
}

LogicalResult RopeOp::verify() {
  int64_t width, outWidth;
  if (failed(expectActivation(*this, getX().getType(), "x", width)) ||
      failed(expectI32Vector(*this, getPositions().getType(), "positions")) ||
      failed(expectActivation(*this, getResult().getType(), "result",
                              outWidth)) ||
      failed(expectPositive(*this, getNumHeadsAttr(), "num_heads")) ||
      failed(expectPositive(*this, getHeadDimAttr(), "head_dim")))
    return failure();
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  if (headDim % 2 != 0)
    return emitOpError() << "head_dim must be even, got " << headDim;
  if (width != heads * headDim)
    return emitOpError() << "x width " << width << " must equal num_heads * "
                         << "head_dim = " << heads << " * " << headDim;
  if (outWidth != width)
    return emitOpError() << "result width " << outWidth
                         << " must equal x width " << width;
  if (failed(expectSameRows(*this, getX().getType(), "x",
                            getPositions().getType(), "positions")) ||
      failed(expectSameRows(*this, getX().getType(), "x",
                            getResult().getType(), "result")))
    return failure();
  return verifyRopeAttrs(*this);
}

//===----------------------------------------------------------------------===//
// KvStoreOp / PagedAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult KvStoreOp::verify() {
  int64_t kw, vw;
  if (failed(expectActivation(*this, getK().getType(), "k", kw)) ||
      failed(expectActivation(*this, getV().getType(), "v", vw)) ||
      failed(expectNonNegative(*this, getLayerAttr(), "layer")) ||
      failed(expectPositive(*this, getNumKvHeadsAttr(), "num_kv_heads")) ||
      failed(expectPositive(*this, getHeadDimAttr(), "head_dim")))
    return failure();
  int64_t heads = getNumKvHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  if (kw != heads * headDim || vw != heads * headDim)
    return emitOpError() << "k and v widths (" << kw << ", " << vw
                         << ") must equal num_kv_heads * head_dim = " << heads
                         << " * " << headDim;
  if (failed(expectSameRows(*this, getK().getType(), "k", getV().getType(),
                            "v")))
    return failure();
  return verifyKvLayoutAttrs(*this, getBlockSizeAttr(), getKvDtypeAttr(),
                             getLayoutAttr());
}

LogicalResult PagedAttentionOp::verify() {
  int64_t qw, ow;
  if (failed(expectActivation(*this, getQ().getType(), "q", qw)) ||
      failed(expectActivation(*this, getResult().getType(), "result", ow)) ||
      failed(expectNonNegative(*this, getLayerAttr(), "layer")) ||
      failed(expectPositive(*this, getNumHeadsAttr(), "num_heads")) ||
      failed(expectPositive(*this, getNumKvHeadsAttr(), "num_kv_heads")) ||
      failed(expectPositive(*this, getHeadDimAttr(), "head_dim")) ||
      failed(expectNonNegative(*this, getSlidingWindowAttr(),
                               "sliding_window")))
    return failure();
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t kvHeads = getNumKvHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " must be a multiple of num_kv_heads " << kvHeads;
  if (qw != heads * headDim)
    return emitOpError() << "q width " << qw << " must equal num_heads * "
                         << "head_dim = " << heads << " * " << headDim;
  if (ow != qw)
    return emitOpError() << "result width " << ow << " must equal q width "
                         << qw;
  double scale = getScale().convertToDouble();
  if (!std::isfinite(scale) || scale <= 0)
    return emitOpError() << "scale must be positive, got " << scale;
  if (failed(expectSameRows(*this, getQ().getType(), "q",
                            getResult().getType(), "result")))
    return failure();
  return verifyKvLayoutAttrs(*this, getBlockSizeAttr(), getKvDtypeAttr(),
                             getLayoutAttr());
}

LogicalResult RopeKvStoreOp::verify() {
  int64_t width, qWidth;
  if (failed(expectActivation(*this, getQkv().getType(), "qkv", width)) ||
      failed(expectI32Vector(*this, getPositions().getType(), "positions")) ||
      failed(expectActivation(*this, getQ().getType(), "q", qWidth)) ||
      failed(expectNonNegative(*this, getLayerAttr(), "layer")) ||
      failed(expectPositive(*this, getNumHeadsAttr(), "num_heads")) ||
      failed(expectPositive(*this, getNumKvHeadsAttr(), "num_kv_heads")) ||
      failed(expectPositive(*this, getHeadDimAttr(), "head_dim")))
    return failure();
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t kvHeads = getNumKvHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  if (headDim % 2 != 0)
    return emitOpError() << "head_dim must be even, got " << headDim;
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " must be a multiple of num_kv_heads " << kvHeads;
  if (width != (heads + 2 * kvHeads) * headDim)
    return emitOpError() << "qkv width " << width
                         << " must equal (num_heads + 2 * num_kv_heads) * "
                            "head_dim = ("
                         << heads << " + 2 * " << kvHeads << ") * " << headDim;
  if (qWidth != heads * headDim)
    return emitOpError() << "q width " << qWidth << " must equal num_heads * "
                         << "head_dim = " << heads << " * " << headDim;
  if (failed(expectSameRows(*this, getQkv().getType(), "qkv",
                            getPositions().getType(), "positions")) ||
      failed(expectSameRows(*this, getQkv().getType(), "qkv",
                            getQ().getType(), "q")) ||
      failed(verifyRopeAttrs(*this)))
    return failure();
  return verifyKvLayoutAttrs(*this, getBlockSizeAttr(), getKvDtypeAttr(),
                             getLayoutAttr());
}

//===----------------------------------------------------------------------===//
// SiluMulOp / LogitsOp
//===----------------------------------------------------------------------===//

void SiluMulOp::build(OpBuilder &b, OperationState &state, ValueRange inputs) {
  int64_t width = ShapedType::kDynamic;
  Value first = inputs.empty() ? Value() : inputs[0];
  if (first) {
    int64_t w = dimOr(first.getType(), 1, ShapedType::kDynamic);
    width = inputs.size() == 1 && !ShapedType::isDynamic(w) ? w / 2 : w;
  }
  Type type = first ? Type(activationType(first, width))
                    : Type(RankedTensorType::get({ShapedType::kDynamic, width},
                                                 b.getF32Type()));
  build(b, state, type, inputs);
}

LogicalResult SiluMulOp::verify() {
  auto inputs = getInputs();
  if (inputs.size() != 1 && inputs.size() != 2)
    return emitOpError() << "takes one fused [rows, 2*I] operand or two "
                            "[rows, I] operands, got "
                         << inputs.size() << " operands";
  int64_t out;
  if (failed(expectActivation(*this, getResult().getType(), "result", out)))
    return failure();
  int64_t gate;
  if (failed(expectActivation(*this, inputs[0].getType(),
                              inputs.size() == 1 ? "gate_up" : "gate", gate)))
    return failure();
  if (inputs.size() == 1) {
    if (gate % 2 != 0 || out != gate / 2)
      return emitOpError() << "fused gate_up width " << gate
                           << " must be twice the result width " << out;
  } else {
    int64_t up;
    if (failed(expectActivation(*this, inputs[1].getType(), "up", up)))
      return failure();
    if (gate != up || out != gate)
      return emitOpError() << "gate, up and result widths must agree, got "
                           << gate << ", " << up << ", " << out;
    if (failed(expectSameRows(*this, inputs[0].getType(), "gate",
                              inputs[1].getType(), "up")))
      return failure();
  }
  return expectSameRows(*this, inputs[0].getType(), "input",
                        getResult().getType(), "result");
}

LogicalResult LogitsOp::verify() {
  int64_t d, v;
  ArrayRef<int64_t> w;
  if (failed(expectActivation(*this, getX().getType(), "x", d)) ||
      failed(expectStaticF32(*this, getWeight().getType(), "weight", 2, w)) ||
      failed(expectActivation(*this, getResult().getType(), "result", v)))
    return failure();
  if (w[1] != d)
    return emitOpError() << "weight is [" << w[0] << ", " << w[1]
                         << "] ([vocab, hidden]) but x has width " << d;
  if (v != w[0])
    return emitOpError() << "result width " << v
                         << " must equal the vocabulary size " << w[0];
  return success();
}

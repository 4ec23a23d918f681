//===- PlanWriter.cpp - `llm` IR → plan file ------------------------------===//
#include "compiler/PlanWriter.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "codegen/KernelEmitter.h"
#include "codegen/KernelFamilies.h"
#include "codegen/NvrtcCompiler.h"
#include "ir/LLMDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "runtime/plan/plan_file.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/quant/quant_format.h"
#include "runtime/tokenizer/tokenizer_fb.h"

using namespace mlir;
namespace fb = llmrt::fb;
namespace quant = llmrt::quant;

namespace llmc {
namespace {

/// A tensor of the plan: a checkpoint tensor or a concatenation of several.
struct PlanTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::string> parts; ///< source tensor names, concatenated on dim 0
  std::string quant;              ///< storage ("" = f32, "f16", "bf16" or a quant_format.h format)
  /// Dense storage of 2-byte elements ("f16" / "bf16").
  bool halfDense() const { return llmc::llm::isDenseHalf(quant); }
  bool quantized() const { return !quant.empty() && !halfDense(); }
  uint64_t offset = 0, size = 0;
};

struct Lowering {
  Lowering(ModuleOp module, const LoadedModel &model, const PlanWriterOptions &opts)
      : module(module), model(model), opts(opts) {}
  ModuleOp module;
  const LoadedModel &model;
  const PlanWriterOptions &opts;
  flatbuffers::FlatBufferBuilder fbb{1 << 20};

  std::vector<PlanTensor> tensors;
  std::map<std::string, int> tensorIndex;
  /// Weight-producing value → its description; a tensor enters the plan only
  /// when a step uses it (weights left dead by fusion are not written).
  DenseMap<Value, PlanTensor> weightOf;
  DenseMap<Value, int> valueId;   ///< activation value → plan value id
  std::vector<flatbuffers::Offset<fb::Value>> values;
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  std::map<std::string, int> kernelIndex;

  llmrt::Status error(Operation *op, const std::string &msg) {
    std::string name = op ? op->getName().getStringRef().str() : "module";
    return llmrt::invalid_argument("lowering " + name + ": " + msg);
  }

  int addTensor(PlanTensor t) {
    auto it = tensorIndex.find(t.name);
    if (it != tensorIndex.end())
      return it->second;
    int id = static_cast<int>(tensors.size());
    tensorIndex[t.name] = id;
    tensors.push_back(std::move(t));
    return id;
  }

  llmrt::StatusOr<int> addValue(Value v, fb::RowKind rows, uint64_t offset,
                                std::string name) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type)
      return llmrt::invalid_argument("value of non-tensor type in @forward");
    int64_t width = llm::rowWidth(type);
    if (width <= 0)
      return llmrt::invalid_argument("value '" + name + "' has a dynamic width");
    fb::DType dt = type.getElementType().isInteger(32) ? fb::DType::I32 : fb::DType::F32;
    if (!type.getElementType().isF32() && dt != fb::DType::I32)
      return llmrt::unimplemented("value '" + name + "' has an element type other than f32/i32");
    int id = static_cast<int>(values.size());
    values.push_back(fb::CreateValueDirect(fbb, id, name.c_str(), rows, width, dt, offset));
    valueId[v] = id;
    return id;
  }

  flatbuffers::Offset<fb::Param> param(const std::string &key, Attribute a) {
    auto k = fbb.CreateString(key);
    if (auto i = dyn_cast<IntegerAttr>(a))
      return fb::CreateParam(fbb, k, i.getInt(), 0.0);
    if (auto f = dyn_cast<FloatAttr>(a))
      return fb::CreateParam(fbb, k, 0, f.getValueAsDouble());
    if (auto s = dyn_cast<StringAttr>(a))
      return fb::CreateParam(fbb, k, 0, 0.0, fbb.CreateString(s.getValue().str()));
    if (auto b = dyn_cast<BoolAttr>(a))
      return fb::CreateParam(fbb, k, b.getValue() ? 1 : 0, 0.0);
    if (auto arr = dyn_cast<DenseI64ArrayAttr>(a)) {
      std::vector<int64_t> v(arr.asArrayRef().begin(), arr.asArrayRef().end());
      return fb::CreateParam(fbb, k, 0, 0.0, 0, fbb.CreateVector(v));
    }
    return {};
  }

  /// Writes checkpoint tensor `src` (one part of plan tensor `t`) in t's
  /// quantized format: the checkpoint's own blocks when it stores that format
  /// (checked, never requantized), else round-to-nearest from f32.
  /// Appends the rows of `src` in format t.quant, row layout, to `all`.
  llmrt::Status appendQuantized(const PlanTensor &t, const SourceTensor &src,
                                std::vector<float> &buffer, std::vector<uint8_t> &all) {
    ASSIGN_OR_RETURN(quant::Format f, quant::parse_format(t.quant));
    if (src.shape.size() != 2)
      return llmrt::invalid_argument("tensor '" + src.name + "' is not 2-D");
    const int64_t rows = src.shape[0], k = src.shape[1];
    ASSIGN_OR_RETURN(int64_t rb, quant::row_bytes(f, k));
    const size_t start = all.size();
    all.resize(start + static_cast<size_t>(rows * rb));
    uint8_t *packed = all.data() + start;
    auto native = model.tensors->nativeFormat(src.name);
    if (native && *native == f) {
      // The checkpoint's blocks, as they are (for every target: the CPU and CUDA kernels read
      // every format GGUF blocks are held in).
      RETURN_IF_ERROR(model.tensors->readPacked(src.name, packed));
      for (int64_t r = 0; r < rows; ++r) {
        std::string bad = quant::check_row(f, packed + r * rb, k);
        if (!bad.empty())
          return llmrt::invalid_argument("tensor '" + src.name + "' (" + t.quant + "), row " + std::to_string(r) +
                                         ": " + bad);
      }
    } else {
      buffer.resize(static_cast<size_t>(rows * k));
      RETURN_IF_ERROR(model.tensors->readF32(src.name, buffer.data()));
      for (int64_t r = 0; r < rows; ++r)
        quant::quantize_row(f, buffer.data() + r * k, k, packed + r * rb);
    }
    return llmrt::ok_status();
  }

  quant::Layout weightLayoutKind = quant::Layout::kRowGroups;
  llmrt::StatusOr<int> kernelFor(Operation *op);
  std::vector<std::string> stepsWithoutKernel; // kernelFor's steps that got none (with targets)
  /// The step's tensor-core kernel (emitBatchedKernel), -1 for none.
  llmrt::StatusOr<int> batchedKernelFor(Operation *op);
  /// The index of the kernel an optional emitter gave `op` (added on first use), -1 for none.
  llmrt::StatusOr<int> optionalKernel(Operation *op, FailureOr<std::optional<KernelSpec>> spec);
  /// Index of `spec` in the plan's kernels, compiling it on first use.
  llmrt::StatusOr<int> addKernel(const KernelSpec &spec);
  llmrt::Status lowerForward(func::FuncOp fn,
                             flatbuffers::Offset<fb::Program> &program);
  llmrt::StatusOr<PlanStats> run(const std::string &path);
};

static fb::OpKind opKind(StringRef name) {
  static const std::map<std::string, fb::OpKind, std::less<>> kinds = {
      {"llm.embedding", fb::OpKind::Embedding},
      {"llm.rms_norm", fb::OpKind::RmsNorm},
      {"llm.add_rms_norm", fb::OpKind::AddRmsNorm},
      {"llm.add", fb::OpKind::Add},
      {"llm.linear", fb::OpKind::Linear},
      {"llm.split", fb::OpKind::Split},
      {"llm.rope", fb::OpKind::Rope},
      {"llm.kv_store", fb::OpKind::KvStore},
      {"llm.rope_kv_store", fb::OpKind::RopeKvStore},
      {"llm.paged_attention", fb::OpKind::PagedAttention},
      {"llm.silu_mul", fb::OpKind::SiluMul},
      {"llm.logits", fb::OpKind::Logits},
      {"llm.permute_columns", fb::OpKind::PermuteColumns},
  };
  auto it = kinds.find(name);
  return it == kinds.end() ? fb::OpKind::Unknown : it->second;
}

llmrt::StatusOr<int> Lowering::kernelFor(Operation *op) {
  if (opts.targets.empty())
    return -1;
  if (!hasKernel(op)) {
    stepsWithoutKernel.push_back(op->getName().getStringRef().str());
    return -1;
  }
  FailureOr<KernelSpec> spec = emitKernel(op);
  if (failed(spec))
    return error(op, "kernel emission failed");
  return addKernel(*spec);
}

llmrt::StatusOr<int> Lowering::batchedKernelFor(Operation *op) {
  if (opts.targets.empty() || !hasKernel(op))
    return -1;
  return optionalKernel(op, emitBatchedKernel(op));
}

llmrt::StatusOr<int> Lowering::optionalKernel(Operation *op, FailureOr<std::optional<KernelSpec>> spec) {
  if (failed(spec))
    return error(op, "kernel emission failed");
  if (!*spec)
    return -1;
  return addKernel(**spec);
}

llmrt::StatusOr<int> Lowering::addKernel(const KernelSpec &specRef) {
  const KernelSpec *spec = &specRef;
  auto it = kernelIndex.find(spec->entry);
  if (it != kernelIndex.end())
    return it->second;
  ASSIGN_OR_RETURN(std::vector<KernelImage> images, compileKernel(*spec, opts.targets));
  std::vector<flatbuffers::Offset<fb::KernelImage>> imgs;
  for (const KernelImage &im : images) {
    auto ptx = fbb.CreateVector(reinterpret_cast<const uint8_t *>(im.ptx.data()), im.ptx.size());
    auto cubin = fbb.CreateVector(im.cubin);
    // finishSpec opens every entry with llmcGridDependencyWait(), which holds griddepcontrol.wait
    // from sm_90 on: the PTX says whether this image's does.
    const bool gridDependency = im.ptx.find("griddepcontrol.wait") != std::string::npos;
    imgs.push_back(fb::CreateKernelImage(fbb, fbb.CreateString(im.target), ptx, cubin, im.resources.registers,
                                         im.resources.sharedBytes, im.resources.stackBytes,
                                         im.resources.spillBytes, gridDependency));
  }
  int id = static_cast<int>(kernels.size());
  kernels.push_back(fb::CreateKernelDirect(fbb, spec->entry.c_str(), spec->family.c_str(),
                                           spec->source.c_str(), &spec->blockDim,
                                           spec->gridRule.c_str(), spec->sharedMemBytes, &imgs,
                                           spec->workspaceBytes));
  kernelIndex[spec->entry] = id;
  return id;
}

llmrt::Status Lowering::lowerForward(func::FuncOp fn,
                                     flatbuffers::Offset<fb::Program> &program) {
  if (fn.getNumArguments() != 4)
    return error(fn, "@forward must take (tokens, positions, batch, kv)");
  ASSIGN_OR_RETURN(int tokensId, addValue(fn.getArgument(0), fb::RowKind::Tokens, 0, "tokens"));
  ASSIGN_OR_RETURN(int positionsId, addValue(fn.getArgument(1), fb::RowKind::Tokens, 0, "positions"));
  int outputId = -1;
  int64_t outputWidth = ShapedType::kDynamic;
  for (Operation &opRef : fn.getBody().front()) {
    Operation *op = &opRef;
    StringRef name = op->getName().getStringRef();
    if (name == "llm.weight") {
      auto n = op->getAttrOfType<StringAttr>("name");
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      if (!n)
        return error(op, "missing name");
      const SourceTensor *src = model.tensors->find(n.getValue());
      if (!src)
        return error(op, "model has no tensor '" + n.getValue().str() + "'");
      std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
      if (src->shape != shape)
        return error(op, "tensor '" + n.getValue().str() + "' has a different shape in the model");
      auto q = op->getAttrOfType<StringAttr>("quant");
      weightOf[op->getResult(0)] = PlanTensor{n.getValue().str(), shape, {n.getValue().str()},
                                              q ? q.getValue().str() : std::string()};
      continue;
    }
    if (name == "llm.weight_concat") {
      PlanTensor t;
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      t.shape.assign(type.getShape().begin(), type.getShape().end());
      for (Value in : op->getOperands()) {
        auto it = weightOf.find(in);
        if (it == weightOf.end())
          return error(op, "operand is not a weight");
        const PlanTensor &part = it->second;
        t.parts.insert(t.parts.end(), part.parts.begin(), part.parts.end());
      }
      t.name = "concat(";
      for (size_t i = 0; i < t.parts.size(); ++i)
        t.name += (i ? "," : "") + t.parts[i];
      t.name += ")";
      if (auto q = op->getAttrOfType<StringAttr>("quant"))
        t.quant = q.getValue().str();
      weightOf[op->getResult(0)] = std::move(t);
      continue;
    }
    if (name == "func.return") {
      auto it = valueId.find(op->getOperand(0));
      if (it == valueId.end())
        return error(op, "returned value is not an activation");
      outputId = it->second;
      if (auto t = dyn_cast<RankedTensorType>(op->getOperand(0).getType()); t && t.getRank() == 2)
        outputWidth = t.getDimSize(1);
      continue;
    }
    fb::OpKind kind = opKind(name);
    if (kind == fb::OpKind::Unknown)
      return error(op, "no runtime step for this op");
    std::vector<int> inputs, outputs, weights;
    for (Value in : op->getOperands()) {
      if (isa<llm::BatchType, llm::KvCacheType>(in.getType()))
        continue;
      if (auto w = weightOf.find(in); w != weightOf.end()) {
        weights.push_back(addTensor(w->second));
        continue;
      }
      auto it = valueId.find(in);
      if (it == valueId.end())
        return error(op, "operand is neither an activation nor a weight");
      inputs.push_back(it->second);
    }
    auto offsets = op->getAttrOfType<ArrayAttr>("llm.arena_offsets");
    unsigned tensorResult = 0;
    for (Value r : op->getResults()) {
      if (isa<llm::KvCacheType>(r.getType()))
        continue;
      if (!offsets || tensorResult >= offsets.size())
        return error(op, "result has no arena offset: run the plan-memory pass "
                         "(it cannot be disabled for a runnable plan)");
      uint64_t off = cast<IntegerAttr>(offsets[tensorResult++]).getInt();
      std::string vname = name.drop_front(4).str() + "_" + std::to_string(values.size());
      ASSIGN_OR_RETURN(int id, addValue(r, kind == fb::OpKind::Logits ? fb::RowKind::LogitRows
                                                                      : fb::RowKind::Tokens,
                                        off, vname));
      outputs.push_back(id);
    }
    if ((kind == fb::OpKind::KvStore || kind == fb::OpKind::RopeKvStore ||
         kind == fb::OpKind::PagedAttention) &&
        !op->hasAttr("block_size"))
      return error(op, "KV layout not chosen: run the kv-cache-layout pass "
                       "(it cannot be disabled for a runnable plan)");
    std::vector<std::pair<std::string, Attribute>> attrs;
    for (NamedAttribute a : op->getAttrs())
      if (!a.getName().getValue().starts_with("llm."))
        attrs.emplace_back(a.getName().getValue().str(), a.getValue());
    std::sort(attrs.begin(), attrs.end(),
              [](const auto &x, const auto &y) { return x.first < y.first; });
    std::vector<flatbuffers::Offset<fb::Param>> params;
    for (auto &[k, a] : attrs) {
      auto p = param(k, a);
      if (p.IsNull())
        return error(op, "attribute '" + k + "' has a type the plan cannot hold");
      params.push_back(p);
    }
    ASSIGN_OR_RETURN(int kernel, kernelFor(op));
    ASSIGN_OR_RETURN(int batched, batchedKernelFor(op));
    // Dense GEMMs of big steps through cuBLASLt (the batched kernel stays as the fallback).
    fb::GemmLibrary library = fb::GemmLibrary::None;
    int libraryInput = -1, libraryWeight = -1, libraryRows = 0;
    if (!opts.targets.empty() && batched >= 0 && usesGemmLibrary(op)) {
      library = fb::GemmLibrary::CublasLt;
      ASSIGN_OR_RETURN(libraryInput, optionalKernel(op, emitLibraryInputKernel(op)));
      ASSIGN_OR_RETURN(libraryWeight, optionalKernel(op, emitLibraryWeightKernel(op)));
      if (libraryMinRows(op) != batchedMinRows(op))
        libraryRows = libraryMinRows(op);
    }
    // Int8 activations for a quantized GEMV: the kernel that quantizes its input; the decode
    // attention with the rope_kv_store just before it inside; the decode gate|up GEMV with the
    // silu_mul just after it inside; the decode GEMV with the add_rms_norm after it inside.
    int inputQuant = -1, ropeKernel = -1, siluKernel = -1, normKernel = -1;
    if (kernel >= 0) {
      ASSIGN_OR_RETURN(inputQuant, optionalKernel(op, emitInputQuantKernel(op)));
      ASSIGN_OR_RETURN(ropeKernel, optionalKernel(op, emitRopeAttentionKernel(op)));
      ASSIGN_OR_RETURN(siluKernel, optionalKernel(op, emitSiluLinearKernel(op)));
      ASSIGN_OR_RETURN(normKernel, optionalKernel(op, emitNormLinearKernel(op)));
    }
    std::string loc;
    llvm::raw_string_ostream os(loc);
    op->getLoc().print(os);
    steps.push_back(fb::CreateStepDirect(fbb, kind, &inputs, &outputs, &weights, &params,
                                         kernel, (name.str() + " " + os.str()).c_str(), batched,
                                         batched >= 0 ? batchedMinRows(op) : 0, library, libraryInput,
                                         libraryWeight, libraryRows, inputQuant,
                                         kernel >= 0 && writesQuantizedOutput(op), ropeKernel, siluKernel,
                                         normKernel));
  }
  if (outputId < 0)
    return error(fn, "@forward returns nothing");
  auto fnName = fbb.CreateString("forward");
  auto vals = fbb.CreateVector(values);
  auto stps = fbb.CreateVector(steps);
  // GPU plans reduce each logits row on the device for the sampler (runtime/sampler/logits_summary.h).
  int summaryKernel = -1, samplingKernel = -1;
  // Longer rows than the kernel takes (no model's vocabulary so far) are copied whole instead.
  if (!opts.targets.empty() && outputWidth <= kMaxLogitsSummaryVocab) {
    if (ShapedType::isDynamic(outputWidth))
      return error(fn, "@forward's logits need a static vocab width for the GPU summary kernel");
    llmrt::StatusOr<KernelSpec> summary = emitLogitsSummaryKernel(outputWidth);
    if (!summary.ok())
      return error(fn, "logits summary kernel: " + summary.status().message());
    ASSIGN_OR_RETURN(summaryKernel, addKernel(*summary));
    // The sampler's draws (temperature, top-k/top-p/min-p) on the device, from the summaries' max.
    llmrt::StatusOr<KernelSpec> sampling = emitSamplingKernel(outputWidth);
    if (!sampling.ok())
      return error(fn, "sampling kernel: " + sampling.status().message());
    ASSIGN_OR_RETURN(samplingKernel, addKernel(*sampling));
  }
  program = fb::CreateProgram(fbb, fnName, vals, stps, tokensId, positionsId, outputId, summaryKernel,
                              samplingKernel);
  return llmrt::ok_status();
}

template <typename T>
llmrt::StatusOr<T> dictGet(DictionaryAttr d, StringRef key, const char *what) {
  Attribute a = d ? d.get(key) : Attribute();
  if constexpr (std::is_same_v<T, int64_t>) {
    if (auto i = dyn_cast_or_null<IntegerAttr>(a))
      return i.getInt();
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto f = dyn_cast_or_null<FloatAttr>(a))
      return f.getValueAsDouble();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (auto s = dyn_cast_or_null<StringAttr>(a))
      return s.getValue().str();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto b = dyn_cast_or_null<BoolAttr>(a))
      return b.getValue();
  }
  return llmrt::invalid_argument(std::string("module attribute ") + what + " has no valid '" +
                                 key.str() + "'");
}

llmrt::StatusOr<PlanStats> Lowering::run(const std::string &path) {
  auto fn = module.lookupSymbol<func::FuncOp>("forward");
  if (!fn)
    return llmrt::invalid_argument("module has no @forward function");
  flatbuffers::Offset<fb::Program> program;
  RETURN_IF_ERROR(lowerForward(fn, program));

  // Tensor layout: checkpoint order of first use, 64-byte aligned.
  uint64_t cursor = 0;
  bool anyQuant = false;
  std::string weightLayout = quant::kLayoutRowGroups;
  if (auto l = module->getAttrOfType<StringAttr>("llm.weight_layout"))
    weightLayout = l.getValue().str();
  ASSIGN_OR_RETURN(weightLayoutKind, quant::parse_layout(weightLayout));
  for (PlanTensor &t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= static_cast<uint64_t>(d);
    cursor = (cursor + llmrt::kTensorAlignment - 1) / llmrt::kTensorAlignment * llmrt::kTensorAlignment;
    t.offset = cursor;
    t.size = numel * (t.halfDense() ? 2 : sizeof(float));
    if (t.quantized()) {
      ASSIGN_OR_RETURN(quant::Format f, quant::parse_format(t.quant));
      if (t.shape.size() != 2)
        return llmrt::invalid_argument("quantized tensor '" + t.name + "' is not 2-D");
      ASSIGN_OR_RETURN(t.size, quant::tensor_bytes(f, weightLayoutKind, t.shape[0], t.shape[1]));
      anyQuant = true;
    }
    cursor += t.size;
  }
  const uint64_t weightsSize = cursor;
  std::vector<flatbuffers::Offset<fb::Tensor>> tensorOffsets;
  for (const PlanTensor &t : tensors) {
    fb::DType dt = fb::DType::F32;
    if (t.halfDense())
      dt = t.quant == "bf16" ? fb::DType::BF16 : fb::DType::F16;
    else if (t.quantized())
      dt = t.quant.rfind("int8", 0) == 0 ? fb::DType::I8 : t.quant.rfind("int5", 0) == 0 ? fb::DType::I5 : fb::DType::I4;
    tensorOffsets.push_back(fb::CreateTensorDirect(
        fbb, t.name.c_str(), dt, &t.shape, t.offset, t.size, t.quantized() ? t.quant.c_str() : "",
        t.quantized() ? weightLayout.c_str() : "row_major"));
  }

  // Model info and KV spec come from the module (the IR is the source of truth).
  auto m = module->getAttrOfType<DictionaryAttr>("llm.model");
  if (!m)
    return llmrt::invalid_argument("module has no 'llm.model' attribute");
  ASSIGN_OR_RETURN(std::string arch, dictGet<std::string>(m, "architecture", "llm.model"));
  ASSIGN_OR_RETURN(int64_t hidden, dictGet<int64_t>(m, "hidden_size", "llm.model"));
  ASSIGN_OR_RETURN(int64_t layers, dictGet<int64_t>(m, "num_layers", "llm.model"));
  ASSIGN_OR_RETURN(int64_t heads, dictGet<int64_t>(m, "num_heads", "llm.model"));
  ASSIGN_OR_RETURN(int64_t kvHeads, dictGet<int64_t>(m, "num_kv_heads", "llm.model"));
  ASSIGN_OR_RETURN(int64_t headDim, dictGet<int64_t>(m, "head_dim", "llm.model"));
  ASSIGN_OR_RETURN(int64_t inter, dictGet<int64_t>(m, "intermediate_size", "llm.model"));
  ASSIGN_OR_RETURN(int64_t vocab, dictGet<int64_t>(m, "vocab_size", "llm.model"));
  ASSIGN_OR_RETURN(int64_t maxPos, dictGet<int64_t>(m, "max_position_embeddings", "llm.model"));
  ASSIGN_OR_RETURN(double eps, dictGet<double>(m, "rms_norm_eps", "llm.model"));
  ASSIGN_OR_RETURN(bool tied, dictGet<bool>(m, "tie_word_embeddings", "llm.model"));
  ASSIGN_OR_RETURN(int64_t window, dictGet<int64_t>(m, "sliding_window", "llm.model"));
  ASSIGN_OR_RETURN(double theta, dictGet<double>(m, "rope_theta", "llm.model"));
  ASSIGN_OR_RETURN(std::string ropeType, dictGet<std::string>(m, "rope_type", "llm.model"));
  ASSIGN_OR_RETURN(double factor, dictGet<double>(m, "rope_factor", "llm.model"));
  ASSIGN_OR_RETURN(double lowF, dictGet<double>(m, "rope_low_freq_factor", "llm.model"));
  ASSIGN_OR_RETURN(double highF, dictGet<double>(m, "rope_high_freq_factor", "llm.model"));
  ASSIGN_OR_RETURN(int64_t origMax, dictGet<int64_t>(m, "rope_original_max_position", "llm.model"));
  // Optional descriptive fields: absent in hand-written IR.
  auto optionalString = [&](StringRef key) {
    auto s = dyn_cast_or_null<StringAttr>(m.get(key));
    return s ? s.getValue().str() : std::string();
  };
  std::string name = optionalString("name"), source = optionalString("source");
  auto rope = fb::CreateRopeInfoDirect(fbb, theta, ropeType.c_str(), factor, lowF, highF, origMax);
  auto modelInfo = fb::CreateModelInfoDirect(
      fbb, arch.c_str(), source.c_str(), name.c_str(), hidden, layers, heads, kvHeads, headDim,
      inter, vocab, maxPos, eps, tied, window, rope);

  auto kvAttr = module->getAttrOfType<DictionaryAttr>("llm.kv_spec");
  if (!kvAttr)
    return llmrt::invalid_argument("module has no 'llm.kv_spec': run the kv-cache-layout pass");
  ASSIGN_OR_RETURN(int64_t kvLayers, dictGet<int64_t>(kvAttr, "num_layers", "llm.kv_spec"));
  ASSIGN_OR_RETURN(int64_t kvH, dictGet<int64_t>(kvAttr, "num_kv_heads", "llm.kv_spec"));
  ASSIGN_OR_RETURN(int64_t kvHd, dictGet<int64_t>(kvAttr, "head_dim", "llm.kv_spec"));
  ASSIGN_OR_RETURN(int64_t blockSize, dictGet<int64_t>(kvAttr, "block_size", "llm.kv_spec"));
  ASSIGN_OR_RETURN(std::string kvDtype, dictGet<std::string>(kvAttr, "kv_dtype", "llm.kv_spec"));
  ASSIGN_OR_RETURN(std::string layout, dictGet<std::string>(kvAttr, "layout", "llm.kv_spec"));
  // The cache's element type and the feature a runtime must know to read it.
  const llmrt::KvCacheType *kvType = llmrt::kv_cache_type(kvDtype);
  if (!kvType)
    return llmrt::unimplemented("kv dtype '" + kvDtype + "' has no CPU kernels (f32, bf16, f16, fp8, int8)");
  auto kv = fb::CreateKvSpecDirect(fbb, kvLayers, kvH, kvHd, blockSize, kvType->dtype, layout.c_str());

  auto perToken = fn->getAttrOfType<IntegerAttr>("llm.arena_bytes_per_token");
  if (!perToken)
    return llmrt::invalid_argument("@forward has no 'llm.arena_bytes_per_token': run plan-memory");
  int64_t maxModelLen = opts.maxModelLen > 0 ? std::min(opts.maxModelLen, maxPos) : maxPos;
  auto memory = fb::CreateMemoryPlan(fbb, perToken.getInt(), 0, 0, sizeof(float),
                                     opts.maxTokensPerStep, opts.maxSeqsPerStep, maxModelLen);

  flatbuffers::Offset<fb::Tokenizer> tok;
  if (model.tokenizer)
    tok = llmrt::build_plan_tokenizer(fbb, *model.tokenizer);
  const GenerationDefaults &g = model.generation;
  std::vector<int32_t> eos = g.eosIds.empty() ? model.config.eosIds : g.eosIds;
  if (eos.empty() && model.tokenizer && model.tokenizer->eos_id >= 0)
    eos.push_back(model.tokenizer->eos_id);
  auto gen = fb::CreateGenerationDefaultsDirect(fbb, &eos, g.temperature, g.topP, g.topK, g.minP,
                                                g.repetitionPenalty, g.maxNewTokens);
  auto compile = fb::CreateCompileInfo(fbb, fbb.CreateString(kCompilerVersion),
                                       fbb.CreateVectorOfStrings(opts.commandLine),
                                       fbb.CreateVectorOfStrings(opts.passes),
                                       fbb.CreateVectorOfStrings(opts.targets));
  std::vector<std::string> features = {"forward_v1", kvType->feature, "weights_f32"};
  if (anyQuant)
    features.push_back("weights_quant_v1");
  if (opts.syntheticSeed)
    features.push_back("synthetic_weights");
  auto featuresOff = fbb.CreateVectorOfStrings(features);
  auto tensorsOff = fbb.CreateVector(tensorOffsets);
  std::vector<flatbuffers::Offset<fb::Program>> programs = {program};
  auto programsOff = fbb.CreateVector(programs);
  auto kernelsOff = fbb.CreateVector(kernels);
  auto cpuKernelsOff = fbb.CreateString(opts.cpuKernels);
  fb::PlanBuilder pb(fbb);
  pb.add_schema_major(llmrt::kSchemaMajor);
  pb.add_schema_minor(llmrt::kSchemaMinor);
  pb.add_required_features(featuresOff);
  pb.add_cpu_kernel_abi(llmrt::kCpuKernelAbi);
  pb.add_compile(compile);
  pb.add_model(modelInfo);
  if (!tok.IsNull())
    pb.add_tokenizer(tok);
  pb.add_generation(gen);
  pb.add_tensors(tensorsOff);
  pb.add_kv(kv);
  pb.add_memory(memory);
  pb.add_programs(programsOff);
  pb.add_kernels(kernelsOff);
  pb.add_weights_size(weightsSize);
  pb.add_cpu_kernels(cpuKernelsOff);
  if (!kernels.empty() && !opts.targets.empty()) {
    // "13.0" -> 13000, the driver API's version form.
    const std::string v = nvrtcVersionString();
    const size_t dot = v.find('.');
    if (dot != std::string::npos)
      pb.add_cuda_min_driver_version(std::stoi(v.substr(0, dot)) * 1000 + std::stoi(v.substr(dot + 1)) * 10);
  }
  if (opts.syntheticSeed) {
    pb.add_synthetic_weights(true);
    pb.add_synthetic_seed(*opts.syntheticSeed);
  }
  fb::FinishPlanBuffer(fbb, pb.Finish());

  // Synthetic weights: the file holds no weight bytes (runtime/plan/synthetic_weights.h).
  const uint64_t fileWeights = opts.syntheticSeed ? 0 : weightsSize;
  ASSIGN_OR_RETURN(std::unique_ptr<llmrt::PlanFileWriter> writer,
                   llmrt::PlanFileWriter::create(path, fbb.GetBufferPointer(), fbb.GetSize(), fileWeights));
  // Stream weights: one tensor at a time, never the whole model in memory.
  std::vector<float> buffer;
  std::vector<uint8_t> packed, tiled;
  std::vector<uint16_t> halves;
  const std::vector<PlanTensor> none;
  for (const PlanTensor &t : opts.syntheticSeed ? none : tensors) {
    RETURN_IF_ERROR(writer->pad_to(t.offset));
    packed.clear();
    for (const std::string &part : t.parts) {
      const SourceTensor *src = model.tensors->find(part);
      if (t.quant.empty()) {
        buffer.resize(static_cast<size_t>(src->numElements()));
        RETURN_IF_ERROR(model.tensors->readF32(part, buffer.data()));
        RETURN_IF_ERROR(writer->append(buffer.data(), buffer.size() * sizeof(float)));
        continue;
      }
      if (t.halfDense()) { // rounded to nearest even (exact for a bf16 / f16 checkpoint)
        buffer.resize(static_cast<size_t>(src->numElements()));
        RETURN_IF_ERROR(model.tensors->readF32(part, buffer.data()));
        halves.resize(buffer.size());
        const bool bf16 = t.quant == "bf16";
        for (size_t i = 0; i < buffer.size(); ++i)
          halves[i] = bf16 ? quant::float_to_bf16(buffer[i]) : quant::float_to_half(buffer[i]);
        RETURN_IF_ERROR(writer->append(halves.data(), halves.size() * sizeof(uint16_t)));
        continue;
      }
      RETURN_IF_ERROR(appendQuantized(t, *src, buffer, packed));
    }
    if (!t.quantized())
      continue;
    if (weightLayoutKind == quant::Layout::kRowGroups) {
      RETURN_IF_ERROR(writer->append(packed.data(), packed.size()));
      continue;
    }
    // cpu_interleaved8 / cuda_mma_n8: the concatenated rows regrouped in tiles of 8
    // (quant_format.h).
    quant::Format f = *quant::parse_format(t.quant);
    const int64_t n = t.shape[0], k = t.shape[1], rb = *quant::row_bytes(f, k);
    const int64_t tileBytes = quant::kTileRows * rb;
    tiled.resize(static_cast<size_t>(tileBytes));
    for (int64_t r = 0; r < n; r += quant::kTileRows) {
      quant::pack_tile(f, weightLayoutKind, k, packed.data() + r * rb, std::min(quant::kTileRows, n - r),
                       tiled.data());
      RETURN_IF_ERROR(writer->append(tiled.data(), tiled.size()));
    }
  }
  RETURN_IF_ERROR(writer->finish());
  PlanStats stats;
  stats.weightBytes = weightsSize;
  stats.tensors = tensors.size();
  stats.steps = steps.size();
  stats.kernels = kernels.size();
  stats.stepsWithoutKernel = stepsWithoutKernel;
  return stats;
}

} // namespace

llmrt::StatusOr<PlanStats> writePlan(ModuleOp module, const LoadedModel &model,
                                     const PlanWriterOptions &options,
                                     const std::string &path) {
  Lowering lowering(module, model, options);
  return lowering.run(path);
}

} // namespace llmc

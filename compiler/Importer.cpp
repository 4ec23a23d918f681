//===- Importer.cpp - Model → `llm` IR ------------------------------------===//
//
// One graph builder for the Llama-family decoder; the per-architecture files
// (compiler/models/) only decide which features it uses.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

#include <map>

#include "compiler/models/Architectures.h"
#include "ir/LLMDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace llmc {
namespace {

class GraphBuilder {
public:
  GraphBuilder(MLIRContext &ctx, const LoadedModel &model, const DecoderSpec &spec)
      : ctx(ctx), b(&ctx), loc(b.getUnknownLoc()), model(model),
        cfg(model.config), spec(spec) {}

  llmrt::StatusOr<OwningOpRef<ModuleOp>> build();

private:
  RankedTensorType act(int64_t width) {
    return RankedTensorType::get({ShapedType::kDynamic, width}, b.getF32Type());
  }
  Value op(StringRef name, ValueRange operands, TypeRange results,
           ArrayRef<NamedAttribute> attrs = {}, unsigned result = 0) {
    OperationState state(loc, name);
    state.addOperands(operands);
    state.addTypes(results);
    state.addAttributes(attrs);
    Operation *o = b.create(state);
    return o->getNumResults() ? o->getResult(result) : Value();
  }
  NamedAttribute i64(StringRef n, int64_t v) {
    return b.getNamedAttr(n, b.getI64IntegerAttr(v));
  }
  NamedAttribute f64(StringRef n, double v) {
    return b.getNamedAttr(n, b.getF64FloatAttr(v));
  }
  NamedAttribute str(StringRef n, StringRef v) {
    return b.getNamedAttr(n, b.getStringAttr(v));
  }
  /// llm.weight for `name`, with the shape the checkpoint has; errors if the
  /// tensor is missing or its shape is not `expect`.
  llmrt::StatusOr<Value> weight(const std::string &name,
                                std::vector<int64_t> expect) {
    const SourceTensor *t = model.tensors->find(name);
    if (!t)
      return llmrt::invalid_argument("model has no tensor '" + name + "'");
    if (t->shape != expect) {
      auto fmt = [](const std::vector<int64_t> &s) {
        std::string o = "[";
        for (size_t i = 0; i < s.size(); ++i)
          o += (i ? ", " : "") + std::to_string(s[i]);
        return o + "]";
      };
      return llmrt::invalid_argument("tensor '" + name + "' has shape " +
                                     fmt(t->shape) + ", expected " +
                                     fmt(expect));
    }
    auto type = RankedTensorType::get(expect, b.getF32Type());
    SmallVector<NamedAttribute> attrs{str("name", name)};
    // A matrix the checkpoint stores quantized in a format the plan can keep:
    // --llm-pack-weights decides whether it stays so.
    if (expect.size() == 2)
      if (auto f = model.tensors->nativeFormat(name))
        attrs.push_back(str("source_quant", llmrt::quant::format_name(*f)));
    return op("llm.weight", {}, {type}, attrs);
  }
  llmrt::StatusOr<Value> linear(Value x, const std::string &prefix,
                                int64_t out, int64_t in, bool bias) {
    ASSIGN_OR_RETURN(Value w, weight(prefix + ".weight", {out, in}));
    // Columns stored in another order (GPTQ desc_act): feed x[:, perm], one
    // permute_columns per (input, permutation) so that q/k/v and gate/up
    // with equal permutations still share their input and fuse.
    if (auto perm = model.tensors->inputPermutation(prefix + ".weight")) {
      Value &shared = permuted[{x.getAsOpaquePointer(), *perm}];
      if (!shared)
        shared = op("llm.permute_columns", {x}, {act(in)},
                    {NamedAttribute(b.getStringAttr("perm"), b.getDenseI64ArrayAttr(*perm))});
      x = shared;
    }
    SmallVector<Value> operands{x, w};
    if (bias) {
      ASSIGN_OR_RETURN(Value bv, weight(prefix + ".bias", {out}));
      operands.push_back(bv);
    }
    return op("llm.linear", operands, {act(out)});
  }
  llmrt::StatusOr<Value> rmsNorm(Value x, const std::string &name,
                                 int64_t width, int64_t group) {
    ASSIGN_OR_RETURN(Value w, weight(name, {group}));
    return op("llm.rms_norm", {x, w}, {act(width)},
              {f64("eps", cfg.rmsNormEps)});
  }
  Value rope(Value x, Value positions, int64_t heads) {
    const RopeScaling &rs = cfg.ropeScaling;
    return op("llm.rope", {x, positions}, {act(heads * cfg.headDim)},
              {i64("num_heads", heads), i64("head_dim", cfg.headDim),
               f64("theta", cfg.ropeTheta), str("style", spec.ropeStyle),
               str("rope_type", rs.type), f64("factor", rs.factor),
               f64("low_freq_factor", rs.lowFreqFactor),
               f64("high_freq_factor", rs.highFreqFactor),
               i64("original_max_position", rs.originalMaxPosition)});
  }
  DictionaryAttr modelAttr();

  std::map<std::pair<const void *, std::vector<int64_t>>, Value> permuted;
  MLIRContext &ctx;
  OpBuilder b;
  Location loc;
  const LoadedModel &model;
  const ModelConfig &cfg;
  const DecoderSpec &spec;
};

DictionaryAttr GraphBuilder::modelAttr() {
  const RopeScaling &rs = cfg.ropeScaling;
  SmallVector<NamedAttribute> a = {
      str("architecture", cfg.architecture),
      str("name", cfg.name),
      str("source", model.sourceKind),
      i64("hidden_size", cfg.hiddenSize),
      i64("num_layers", cfg.numLayers),
      i64("num_heads", cfg.numHeads),
      i64("num_kv_heads", cfg.numKvHeads),
      i64("head_dim", cfg.headDim),
      i64("intermediate_size", cfg.intermediateSize),
      i64("vocab_size", cfg.vocabSize),
      i64("max_position_embeddings", cfg.maxPositionEmbeddings),
      f64("rms_norm_eps", cfg.rmsNormEps),
      b.getNamedAttr("tie_word_embeddings", b.getBoolAttr(spec.tiedEmbeddings)),
      i64("sliding_window", spec.slidingWindow),
      f64("rope_theta", cfg.ropeTheta),
      str("rope_type", rs.type),
      f64("rope_factor", rs.factor),
      f64("rope_low_freq_factor", rs.lowFreqFactor),
      f64("rope_high_freq_factor", rs.highFreqFactor),
      i64("rope_original_max_position", rs.originalMaxPosition),
  };
  return b.getDictionaryAttr(a);
}

llmrt::StatusOr<OwningOpRef<ModuleOp>> GraphBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr("llm.model", modelAttr());
  b.setInsertionPointToEnd(module->getBody());

  const int64_t d = cfg.hiddenSize, hd = cfg.headDim, nh = cfg.numHeads,
                nkv = cfg.numKvHeads, inter = cfg.intermediateSize,
                vocab = cfg.vocabSize;
  auto idx = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
  Type batchTy = llm::BatchType::get(&ctx), kvTy = llm::KvCacheType::get(&ctx);
  auto fnTy = b.getFunctionType({idx, idx, batchTy, kvTy}, {act(vocab)});
  auto fn = b.create<func::FuncOp>(loc, "forward", fnTy);
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value tokens = entry->getArgument(0), positions = entry->getArgument(1),
        batch = entry->getArgument(2), kv = entry->getArgument(3);

  ASSIGN_OR_RETURN(Value table, weight("model.embed_tokens.weight", {vocab, d}));
  Value h = op("llm.embedding", {tokens, table}, {act(d)});
  for (int64_t l = 0; l < cfg.numLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    ASSIGN_OR_RETURN(Value x, rmsNorm(h, p + ".input_layernorm.weight", d, d));
    ASSIGN_OR_RETURN(Value q, linear(x, p + ".self_attn.q_proj", nh * hd, d, spec.qkvBias));
    ASSIGN_OR_RETURN(Value k, linear(x, p + ".self_attn.k_proj", nkv * hd, d, spec.qkvBias));
    ASSIGN_OR_RETURN(Value v, linear(x, p + ".self_attn.v_proj", nkv * hd, d, spec.qkvBias));
    if (spec.qkNorm) {
      ASSIGN_OR_RETURN(q, rmsNorm(q, p + ".self_attn.q_norm.weight", nh * hd, hd));
      ASSIGN_OR_RETURN(k, rmsNorm(k, p + ".self_attn.k_norm.weight", nkv * hd, hd));
    }
    q = rope(q, positions, nh);
    k = rope(k, positions, nkv);
    kv = op("llm.kv_store", {k, v, kv, batch}, {kvTy},
            {i64("layer", l), i64("num_kv_heads", nkv), i64("head_dim", hd)});
    Value a = op("llm.paged_attention", {q, kv, batch}, {act(nh * hd)},
                 {i64("layer", l), i64("num_heads", nh), i64("num_kv_heads", nkv),
                  i64("head_dim", hd), f64("scale", 1.0 / std::sqrt(double(hd))),
                  i64("sliding_window", spec.slidingWindow)});
    ASSIGN_OR_RETURN(Value o, linear(a, p + ".self_attn.o_proj", d, nh * hd, false));
    h = op("llm.add", {h, o}, {act(d)});
    ASSIGN_OR_RETURN(Value x2, rmsNorm(h, p + ".post_attention_layernorm.weight", d, d));
    ASSIGN_OR_RETURN(Value g, linear(x2, p + ".mlp.gate_proj", inter, d, false));
    ASSIGN_OR_RETURN(Value u, linear(x2, p + ".mlp.up_proj", inter, d, false));
    Value m = op("llm.silu_mul", {g, u}, {act(inter)});
    ASSIGN_OR_RETURN(Value dn, linear(m, p + ".mlp.down_proj", d, inter, false));
    h = op("llm.add", {h, dn}, {act(d)});
  }
  ASSIGN_OR_RETURN(Value n, rmsNorm(h, "model.norm.weight", d, d));
  Value head = table;
  if (!spec.tiedEmbeddings) {
    ASSIGN_OR_RETURN(head, weight("lm_head.weight", {vocab, d}));
  }
  Value logits = op("llm.logits", {n, head, batch}, {act(vocab)});
  b.create<func::ReturnOp>(loc, logits);

  // Diagnostics from the verifier go to the context's handler (the driver
  // prints them); we only need to know whether it passed.
  if (failed(verify(*module)))
    return llmrt::internal_error("imported IR failed verification");
  return module;
}

} // namespace

llmrt::StatusOr<OwningOpRef<ModuleOp>> importModel(MLIRContext &context,
                                                   const LoadedModel &model) {
  ASSIGN_OR_RETURN(DecoderSpec spec, decoderSpecFor(model.config));
  if (!model.tensors)
    return llmrt::internal_error("model has no tensor source");
  context.loadDialect<llm::LLMDialect, func::FuncDialect>();
  GraphBuilder builder(context, model, spec);
  return builder.build();
}

} // namespace llmc

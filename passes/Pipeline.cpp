//===- Pipeline.cpp - the llmc pass pipeline ------------------------------===//

#include "passes/Pipeline.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace llmc {

std::vector<std::string> pipelinePassNames() {
  return {"pack-weights", "fuse-qkv", "fuse-gate-up", "fuse-add-rmsnorm", "kv-cache-layout",
          "fuse-rope-kv-store", "plan-memory"};
}

std::vector<std::string> unknownDisabledPasses(const PipelineOptions &opts) {
  std::vector<std::string> known = pipelinePassNames();
  std::vector<std::string> unknown;
  for (const std::string &name : opts.disabled)
    if (std::find(known.begin(), known.end(), name) == known.end())
      unknown.push_back(name);
  return unknown;
}

void buildPipeline(OpPassManager &pm, const PipelineOptions &opts) {
  auto enabled = [&](const char *name) { return !opts.disabled.count(name); };
  if (enabled("pack-weights")) {
    PackWeightsOptions pack;
    pack.quantize = opts.quantize;
    pack.quantizeEmbeddings = opts.quantizeEmbeddings;
    pack.dequantize = opts.dequantize;
    pack.denseDtype = opts.denseDtype;
    pack.layout = opts.weightLayout;
    pack.target = opts.weightLayout == "cuda-mma" ? "cuda" : "cpu";
    pm.addPass(createPackWeights(pack));
  }
  if (enabled("fuse-qkv"))
    pm.addNestedPass<func::FuncOp>(createFuseQkv());
  if (enabled("fuse-gate-up"))
    pm.addNestedPass<func::FuncOp>(createFuseGateUp());
  if (enabled("fuse-add-rmsnorm"))
    pm.addNestedPass<func::FuncOp>(createFuseAddRmsNorm());
  if (enabled("kv-cache-layout")) {
    KvCacheLayoutOptions kv;
    kv.blockSize = opts.kvBlockSize;
    kv.kvDtype = opts.kvDtype;
    pm.addPass(createKvCacheLayout(kv));
  }
  if (enabled("fuse-rope-kv-store"))
    pm.addNestedPass<func::FuncOp>(createFuseRopeKvStore());
  if (enabled("plan-memory"))
    pm.addNestedPass<func::FuncOp>(createPlanMemory());
}

namespace {
struct LLMPipelineCLOptions : PassPipelineOptions<LLMPipelineCLOptions> {
  Option<int64_t> kvBlockSize{*this, "kv-block-size",
                              llvm::cl::desc("tokens per KV-cache block"),
                              llvm::cl::init(16)};
  Option<std::string> quantize{*this, "quantize",
                               llvm::cl::desc("format for float weights (pack-weights)"),
                               llvm::cl::init("")};
  Option<bool> dequantize{*this, "dequantize",
                          llvm::cl::desc("store every weight as f32 (pack-weights)"),
                          llvm::cl::init(false)};
  Option<std::string> denseDtype{*this, "dense-dtype",
                                 llvm::cl::desc("storage of unquantized weight matrices: f32, f16, bf16 (pack-weights)"),
                                 llvm::cl::init("f32")};
  Option<std::string> weightLayout{*this, "weight-layout",
                                   llvm::cl::desc("quantized weight layout (pack-weights)"),
                                   llvm::cl::init("interleaved8")};
  Option<std::string> kvDtype{*this, "kv-dtype",
                              llvm::cl::desc("KV-cache element type"),
                              llvm::cl::init("f32")};
  ListOption<std::string> disable{
      *this, "disable",
      llvm::cl::desc("passes to skip, without the llm- prefix")};
};
} // namespace

void registerLLMPipeline() {
  PassPipelineRegistration<LLMPipelineCLOptions>(
      "llm-pipeline", "The llmc pass pipeline (fusion, KV layout, memory plan)",
      [](OpPassManager &pm, const LLMPipelineCLOptions &cl) {
        PipelineOptions opts;
        opts.kvBlockSize = cl.kvBlockSize;
        opts.kvDtype = cl.kvDtype;
        opts.quantize = cl.quantize;
        opts.dequantize = cl.dequantize;
        opts.denseDtype = cl.denseDtype;
        opts.weightLayout = cl.weightLayout;
        opts.disabled.insert(cl.disable.begin(), cl.disable.end());
        buildPipeline(pm, opts);
      });
}

} // namespace llmc

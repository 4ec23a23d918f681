//===- Pipeline.h - the llmc pass pipeline ----------------------*- C++ -*-===//

#ifndef LLMC_PASSES_PIPELINE_H
#define LLMC_PASSES_PIPELINE_H

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace llmc {

struct PipelineOptions {
  /// Tokens per KV-cache block (--llm-kv-cache-layout block-size).
  int64_t kvBlockSize = 16;
  /// KV-cache element type (--llm-kv-cache-layout kv-dtype); only "f32" today.
  std::string kvDtype = "f32";
  /// --llm-pack-weights: format for float weights ("" = keep f32), whether
  /// embedding tables / lm_head are quantized too, and dequantize-everything.
  std::string quantize;
  bool quantizeEmbeddings = true;
  bool dequantize = false;
  /// Storage of weight matrices that are not quantized: f32, f16 or bf16.
  std::string denseDtype = "f32";
  /// Quantized weight layout for the CPU: interleaved8 (the SIMD kernels') or row-groups.
  std::string weightLayout = "interleaved8";
  /// Passes to skip, named without the "llm-" prefix, e.g. "fuse-qkv".
  std::set<std::string> disabled;
};

/// The pipeline's pass names without the "llm-" prefix, in order:
/// fuse-qkv, fuse-gate-up, fuse-add-rmsnorm, kv-cache-layout, plan-memory.
std::vector<std::string> pipelinePassNames();

/// Names in `opts.disabled` that are not pipeline passes (for CLI validation;
/// buildPipeline ignores them).
std::vector<std::string> unknownDisabledPasses(const PipelineOptions &opts);

/// Adds the pipeline to `pm`, which must run on builtin.module. Function
/// passes are nested under func.func.
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &opts);

/// Registers the pipeline as "llm-pipeline" for llmc-opt, with options
/// kv-block-size, kv-dtype and disable=<comma-separated names>.
void registerLLMPipeline();

} // namespace llmc

#endif // LLMC_PASSES_PIPELINE_H

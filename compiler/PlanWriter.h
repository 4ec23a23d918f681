//===- PlanWriter.h - `llm` IR → plan file ----------------------*- C++ -*-===//
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/frontend/Model.h"
#include "mlir/IR/BuiltinOps.h"

namespace llmc {

/// Written into every plan's CompileInfo and printed by `llmc --version`.
inline constexpr const char *kCompilerVersion = "llmc 0.1.0";

struct PlanWriterOptions {
  std::vector<std::string> commandLine; ///< recorded in the plan
  std::vector<std::string> passes;      ///< passes that ran, in order
  std::vector<std::string> targets;     ///< GPU targets; empty: no kernel images
  int64_t maxTokensPerStep = 2048;
  int64_t maxSeqsPerStep = 256;
  int64_t maxModelLen = 0;              ///< 0: the model's context
  std::string cpuKernels = "fast";      ///< contract of quantized CPU kernels
  /// --synthetic-weights: no weight bytes; the runtime generates them from this seed.
  std::optional<uint64_t> syntheticSeed;
};

/// Statistics of a written plan, for the driver to print.
struct PlanStats {
  uint64_t weightBytes = 0;
  uint64_t fileBytes = 0;
  size_t tensors = 0;
  size_t steps = 0;
  size_t kernels = 0;
  /// With targets: the op names of the steps that got no GPU kernel (the CUDA executor refuses
  /// such a plan), in step order.
  std::vector<std::string> stepsWithoutKernel;
};

/// Lowers the @forward function of `module` (after the pipeline ran) to a plan
/// program, streams the referenced weights from `model`'s tensor source (one
/// tensor at a time; derived weights are concatenated on the way) and writes
/// the plan file. The module is the only description of the computation; the
/// model supplies tensor bytes, tokenizer and generation defaults.
llmrt::StatusOr<PlanStats> writePlan(mlir::ModuleOp module,
                                     const LoadedModel &model,
                                     const PlanWriterOptions &options,
                                     const std::string &path);

} // namespace llmc

//===- Driver.h - llmc compile / inspect ------------------------*- C++ -*-===//
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmc {

struct CompileOptions {
  std::string modelPath;              ///< HF folder or .gguf
  std::string outputPath;             ///< plan.fb
  std::string dumpIrDir;              ///< write IR after import and after each pass
  std::string fromIr;                 ///< compile this .mlir instead of importing
  std::vector<std::string> disabledPasses;
  std::vector<std::string> targets;   ///< GPU targets; empty = none
  bool targetsGiven = false;          ///< --target named them (not 'default')
  int64_t kvBlockSize = 16;
  int64_t maxModelLen = 0;
  int64_t maxTokensPerStep = 2048;
  int64_t maxSeqsPerStep = 256;
  std::vector<std::string> commandLine;
  bool quiet = false;
  /// --quantize: a format of runtime/quant/quant_format.h (expandQuantizeSpec).
  std::string quantize;
  bool quantizeEmbeddings = true;
  bool dequantize = false;
  std::string weightDtype = "f32";
  bool tensorCores = true;  // --no-tensor-cores: GPU linear kernels stay on the f32 CUDA-core path  // --weight-dtype: storage of matrices not quantized
  std::string weightLayout = "interleaved8";  // --weight-layout
  std::string denseGemm = "cublaslt";  ///< --dense-gemm: cublaslt | generated
  std::string quantGemm = "cublaslt";  ///< --quant-gemm: cublaslt | generated
  std::string quantGemv = "int8";      ///< --quant-gemv: int8 (activations, dp4a) | f32
  /// --gemv-l2-prefetch MiB: the decode GEMV's weight bytes asked of the L2 before its wait on
  /// the kernel before (codegen LinearParams::l2PrefetchBytes); 0: none.
  int64_t gemvL2PrefetchMiB = 16;
  std::string cpuKernels = "fast";    ///< reference | fast
  /// auto (the weightDtype: f32, bf16 or f16) | f32 | bf16 | f16 | int8
  std::string kvCacheDtype = "auto";
  /// --synthetic-weights SEED: modelPath is a config.json (or its folder); the plan holds no
  /// weights and the runtime generates them (runtime/plan/synthetic_weights.h).
  std::optional<uint64_t> syntheticSeed;
};

/// `--quantize` shorthand to a format name: "int8" (int8-g32-f16-sym, like
/// GGUF Q8_0), "int4" (int4-g128-f16-min), optionally with "-gN" or "-row" and
/// "-sym" / "-asym"; a full format name passes through.
llmrt::StatusOr<std::string> expandQuantizeSpec(const std::string &spec);

/// load → import (or parse --from-ir) → passes → codegen → plan file.
llmrt::Status compile(const CompileOptions &options);

} // namespace llmc

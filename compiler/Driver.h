//===- Driver.h - llmc compile / inspect ------------------------*- C++ -*-===//
#pragma once

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
  int64_t kvBlockSize = 16;
  int64_t maxModelLen = 0;
  int64_t maxTokensPerStep = 2048;
  int64_t maxSeqsPerStep = 256;
  std::vector<std::string> commandLine;
  bool quiet = false;
};

/// load → import (or parse --from-ir) → passes → codegen → plan file.
llmrt::Status compile(const CompileOptions &options);

} // namespace llmc

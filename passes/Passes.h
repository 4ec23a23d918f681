//===- Passes.h - `llm` passes ----------------------------------*- C++ -*-===//
//
// Declarations of the llm passes (generated from Passes.td):
//   std::unique_ptr<mlir::Pass> llmc::createFuseQkv();
//   std::unique_ptr<mlir::Pass> llmc::createFuseGateUp();
//   std::unique_ptr<mlir::Pass> llmc::createFuseAddRmsNorm();
//   std::unique_ptr<mlir::Pass> llmc::createKvCacheLayout();
//   std::unique_ptr<mlir::Pass> llmc::createKvCacheLayout(const KvCacheLayoutOptions &);
//   std::unique_ptr<mlir::Pass> llmc::createFuseRopeKvStore();
//   std::unique_ptr<mlir::Pass> llmc::createPlanMemory();
// and void llmc::registerLLMPasses() (command-line registration for llmc-opt).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PASSES_PASSES_H
#define LLMC_PASSES_PASSES_H

#include "ir/LLMDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>
#include <string>

namespace llmc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace llmc

#endif // LLMC_PASSES_PASSES_H

//===- llmc-opt.cpp - mlir-opt for the llm dialect ------------------------===//
//
// Parses, verifies and transforms `llm` IR; used by the lit tests.
//   llmc-opt in.mlir --llm-fuse-qkv --llm-plan-memory
//   llmc-opt in.mlir --llm-pipeline='kv-block-size=32 disable=fuse-qkv'
//
//===----------------------------------------------------------------------===//

#include "ir/LLMDialect.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<llmc::llm::LLMDialect, mlir::func::FuncDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  llmc::registerLLMPasses();
  llmc::registerLLMPipeline();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "llmc optimizer driver\n", registry));
}

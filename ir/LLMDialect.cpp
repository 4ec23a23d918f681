//===- LLMDialect.cpp - `llm` dialect registration, types, generated ops ---===//

#include "ir/LLMDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::llm;

#include "ir/LLMOpsDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/LLMOpsTypes.cpp.inc"

#define GET_OP_CLASSES
#include "ir/LLMOps.cpp.inc"

void LLMDialect::initialize() {
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "ir/LLMOps.cpp.inc"
      >();
}

void LLMDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/LLMOpsTypes.cpp.inc"
      >();
}

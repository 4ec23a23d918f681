//===- Importer.h - Model → `llm` IR ----------------------------*- C++ -*-===//
#pragma once

#include <string>

#include "compiler/frontend/Model.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc {

/// Builds the `@forward` function of `model` in the `llm` dialect. Weights
/// become llm.weight references by Hugging Face tensor name; model
/// hyper-parameters go into the module attribute `llm.model`, which the plan
/// writer reads (the IR is the single source of truth for the program).
llmrt::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(mlir::MLIRContext &context, const LoadedModel &model);

} // namespace llmc

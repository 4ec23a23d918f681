//===- HfModel.h - A Hugging Face folder as a LoadedModel ------*- C++ -*-===//
#pragma once

#include "compiler/frontend/Model.h"

namespace llmc {

/// `dir` holds config.json, model.safetensors or model.safetensors.index.json,
/// and optionally generation_config.json. The tokenizer is left empty.
llmrt::StatusOr<LoadedModel> loadHfModel(const std::string &dir);

} // namespace llmc

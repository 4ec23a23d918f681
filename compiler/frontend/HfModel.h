//===- HfModel.h - A Hugging Face folder as a LoadedModel ------*- C++ -*-===//
#pragma once

#include "compiler/frontend/Model.h"

namespace llmc {

/// `dir` holds config.json, model.safetensors or model.safetensors.index.json,
/// and optionally generation_config.json. The tokenizer is left empty.
llmrt::StatusOr<LoadedModel> loadHfModel(const std::string &dir);

/// A model from its config.json alone (`path`: the file or its folder; generation_config.json
/// beside it is read too): sourceKind "synthetic", every tensor expectedTensors() lists as f32
/// with no data (readF32 fails). For `llmc compile --synthetic-weights`: the runtime generates
/// the weights at load.
llmrt::StatusOr<LoadedModel> loadSyntheticModel(const std::string &path);

} // namespace llmc

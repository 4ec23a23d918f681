//===- Architectures.h - Supported model architectures ----------*- C++ -*-===//
//
// Each supported architecture lives in its own file and turns a ModelConfig into
// a DecoderSpec: the features of the shared decoder-only graph that this
// architecture uses. The importer builds IR from the spec only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "compiler/frontend/Model.h"
#include "runtime/base/status.h"

namespace llmc {

/// Features of a pre-norm decoder-only transformer (Llama family).
struct DecoderSpec {
  bool qkvBias = false;        ///< q/k/v projections carry biases.
  bool qkNorm = false;         ///< per-head RMSNorm on q and k before RoPE.
  int64_t slidingWindow = 0;   ///< attention window (0: full causal).
  std::string ropeStyle = "neox";
  bool tiedEmbeddings = false; ///< lm_head shares model.embed_tokens.weight.
};

using ArchitectureFn = llmrt::StatusOr<DecoderSpec> (*)(const ModelConfig &);

struct Architecture {
  const char *name;
  ArchitectureFn spec;
};

llmrt::StatusOr<DecoderSpec> llamaSpec(const ModelConfig &config);
llmrt::StatusOr<DecoderSpec> mistralSpec(const ModelConfig &config);
llmrt::StatusOr<DecoderSpec> qwen2Spec(const ModelConfig &config);
llmrt::StatusOr<DecoderSpec> qwen3Spec(const ModelConfig &config);

/// All supported architectures, in a fixed order.
const std::vector<Architecture> &architectures();
/// "LlamaForCausalLM, MistralForCausalLM, ..." for error messages.
std::string supportedArchitectureList();
/// The spec for config.architecture, or a clear error naming it and the supported list.
llmrt::StatusOr<DecoderSpec> decoderSpecFor(const ModelConfig &config);

/// Checks shared by every architecture (positive dims, heads divide, rope type known).
llmrt::Status checkCommon(const ModelConfig &config);

} // namespace llmc

//===- Architectures.cpp - Registry of supported architectures ------------===//
#include "compiler/models/Architectures.h"

namespace llmc {

const std::vector<Architecture> &architectures() {
  static const std::vector<Architecture> list = {
      {"LlamaForCausalLM", llamaSpec},
      {"MistralForCausalLM", mistralSpec},
      {"Qwen2ForCausalLM", qwen2Spec},
      {"Qwen3ForCausalLM", qwen3Spec},
  };
  return list;
}

std::string supportedArchitectureList() {
  std::string out;
  for (const Architecture &a : architectures()) {
    if (!out.empty())
      out += ", ";
    out += a.name;
  }
  return out;
}

llmrt::StatusOr<DecoderSpec> decoderSpecFor(const ModelConfig &config) {
  for (const Architecture &a : architectures())
    if (config.architecture == a.name) {
      RETURN_IF_ERROR(checkCommon(config));
      auto spec = a.spec(config);
      if (!spec.ok())
        return spec.status().with_context(config.architecture);
      return spec;
    }
  return llmrt::unimplemented("architecture '" + config.architecture +
                              "' is not supported; supported: " +
                              supportedArchitectureList());
}

llmrt::Status checkCommon(const ModelConfig &c) {
  auto positive = [](int64_t v, const char *field) -> llmrt::Status {
    if (v <= 0)
      return llmrt::invalid_argument(std::string("config field '") + field +
                                     "' must be positive, got " +
                                     std::to_string(v));
    return llmrt::ok_status();
  };
  RETURN_IF_ERROR(positive(c.hiddenSize, "hidden_size"));
  RETURN_IF_ERROR(positive(c.numLayers, "num_hidden_layers"));
  RETURN_IF_ERROR(positive(c.numHeads, "num_attention_heads"));
  RETURN_IF_ERROR(positive(c.numKvHeads, "num_key_value_heads"));
  RETURN_IF_ERROR(positive(c.headDim, "head_dim"));
  RETURN_IF_ERROR(positive(c.intermediateSize, "intermediate_size"));
  RETURN_IF_ERROR(positive(c.vocabSize, "vocab_size"));
  RETURN_IF_ERROR(positive(c.maxPositionEmbeddings, "max_position_embeddings"));
  if (c.numHeads % c.numKvHeads != 0)
    return llmrt::invalid_argument(
        "num_attention_heads (" + std::to_string(c.numHeads) +
        ") is not a multiple of num_key_value_heads (" +
        std::to_string(c.numKvHeads) + ")");
  if (c.headDim % 2 != 0)
    return llmrt::invalid_argument("head_dim must be even for RoPE, got " +
                                   std::to_string(c.headDim));
  const std::string &t = c.ropeScaling.type;
  if (t != "default" && t != "linear" && t != "llama3")
    return llmrt::unimplemented("rope_scaling type '" + t +
                                "' is not supported (default, linear, llama3)");
  if (t != "default" && c.ropeScaling.factor <= 0)
    return llmrt::invalid_argument("rope_scaling.factor must be positive");
  if (t == "llama3" && c.ropeScaling.originalMaxPosition <= 0)
    return llmrt::invalid_argument(
        "rope_scaling llama3 needs original_max_position_embeddings");
  if (c.rmsNormEps <= 0)
    return llmrt::invalid_argument("rms_norm_eps must be positive");
  if (c.ropeTheta <= 0)
    return llmrt::invalid_argument("rope_theta must be positive");
  return llmrt::ok_status();
}

} // namespace llmc

//===- Qwen2.cpp - Qwen2ForCausalLM ---------------------------------------===//
//
// Qwen2 / Qwen2.5: Llama-shaped decoder with biases on the q, k and v
// projections (none on o_proj); small models tie their embeddings.
//
//===----------------------------------------------------------------------===//
#include "compiler/models/Architectures.h"

namespace llmc {

llmrt::StatusOr<DecoderSpec> qwen2Spec(const ModelConfig &config) {
  DecoderSpec spec;
  spec.qkvBias = true;
  spec.slidingWindow = config.slidingWindow;
  spec.tiedEmbeddings = config.tieWordEmbeddings;
  return spec;
}

} // namespace llmc

//===- Llama.cpp - LlamaForCausalLM ---------------------------------------===//
//
// Llama 1/2/3 and SmolLM: pre-norm decoder, RMSNorm, SwiGLU MLP, GQA, RoPE
// (rope_scaling "linear" and "llama3"), optional attention_bias, optional tying.
//
//===----------------------------------------------------------------------===//
#include "compiler/models/Architectures.h"

namespace llmc {

llmrt::StatusOr<DecoderSpec> llamaSpec(const ModelConfig &config) {
  if (config.slidingWindow != 0)
    return llmrt::invalid_argument(
        "LlamaForCausalLM has no sliding window, but the config sets one");
  DecoderSpec spec;
  spec.qkvBias = config.attentionBias;
  spec.tiedEmbeddings = config.tieWordEmbeddings;
  return spec;
}

} // namespace llmc

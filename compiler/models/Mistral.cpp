//===- Mistral.cpp - MistralForCausalLM -----------------------------------===//
//
// Llama-shaped decoder whose attention may be limited to a sliding window of
// `sliding_window` positions (Mistral 7B v0.1: 4096).
//
//===----------------------------------------------------------------------===//
#include "compiler/models/Architectures.h"

namespace llmc {

llmrt::StatusOr<DecoderSpec> mistralSpec(const ModelConfig &config) {
  if (config.slidingWindow < 0)
    return llmrt::invalid_argument("sliding_window must not be negative");
  DecoderSpec spec;
  spec.slidingWindow = config.slidingWindow;
  spec.tiedEmbeddings = config.tieWordEmbeddings;
  return spec;
}

} // namespace llmc

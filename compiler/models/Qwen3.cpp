//===- Qwen3.cpp - Qwen3ForCausalLM ---------------------------------------===//
//
// Qwen3 dense: no q/k/v biases (unless attention_bias), per-head RMSNorm on
// queries and keys (q_norm, k_norm over head_dim) before RoPE; head_dim is
// explicit in the config and need not equal hidden_size / heads.
//
//===----------------------------------------------------------------------===//
#include "compiler/models/Architectures.h"

namespace llmc {

llmrt::StatusOr<DecoderSpec> qwen3Spec(const ModelConfig &config) {
  DecoderSpec spec;
  spec.qkvBias = config.attentionBias;
  spec.qkNorm = true;
  spec.slidingWindow = config.slidingWindow;
  spec.tiedEmbeddings = config.tieWordEmbeddings;
  return spec;
}

} // namespace llmc

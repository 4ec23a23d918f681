//===- KernelFamilies.h - Kernel generators per family ----------*- C++ -*-===//
//
// One generator per kernel family (one family per .cpp file), taking plain
// parameters, so they can be used and tested without MLIR. KernelEmitter.h
// extracts these parameters from `llm` ops. Errors (sizes out of range,
// unknown RoPE style/type) are InvalidArgument / Unimplemented statuses.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_KERNELFAMILIES_H
#define LLMC_CODEGEN_KERNELFAMILIES_H

#include "codegen/KernelSpec.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

/// llm.embedding: tokens[T] (i32), table[vocab, dim] -> [T, dim].
struct EmbeddingParams {
  int64_t vocab = 0;
  int64_t dim = 0;
};
llmrt::StatusOr<KernelSpec> emitEmbeddingKernel(const EmbeddingParams &p);

/// llm.rms_norm: x[T, dim], w[group] -> [T, dim], normalizing each group of
/// `group` columns (dim % group == 0). llm.add_rms_norm uses group == dim.
struct RmsNormParams {
  int64_t dim = 0;
  int64_t group = 0;
  float eps = 0.0f;
};
llmrt::StatusOr<KernelSpec> emitRmsNormKernel(const RmsNormParams &p);
/// llm.add_rms_norm: x, residual [T, dim], w[dim] -> normed, sum.
llmrt::StatusOr<KernelSpec> emitAddRmsNormKernel(const RmsNormParams &p);

/// llm.rope with Hugging Face semantics.
struct RopeParams {
  int64_t numHeads = 0;
  int64_t headDim = 0;
  double theta = 10000.0;
  std::string style = "neox";       // "neox" (rotate halves) | "interleaved"
  std::string ropeType = "default"; // "default" | "linear" | "llama3"
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPosition = 8192;
};
/// The inverse frequency of each rotation pair (headDim / 2 values) with the
/// rope type folded in, as HF's rope init functions compute them (fp32).
llmrt::StatusOr<std::vector<float>> computeRopeInvFreq(const RopeParams &p);
llmrt::StatusOr<KernelSpec> emitRopeKernel(const RopeParams &p);

/// llm.silu_mul: gate[T, inter] * up[T, inter], or fused gate_up[T, 2*inter]
/// (gate first) -> [T, inter].
struct SiluMulParams {
  int64_t inter = 0;
  bool fused = false;
};
llmrt::StatusOr<KernelSpec> emitSiluMulKernel(const SiluMulParams &p);

} // namespace llmc

#endif // LLMC_CODEGEN_KERNELFAMILIES_H

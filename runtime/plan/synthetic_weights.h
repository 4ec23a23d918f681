// Synthetic weights: a plan compiled with `llmc compile --synthetic-weights SEED config.json` holds
// no weight bytes; Plan::open generates them here, so that a model of any size (a Llama-3-8B
// shape for benchmarks) travels as a file of a few hundred KiB.
//
// Values are deterministic in (seed, tensor name, row) and independent of the thread count:
//   f32 [n, k] matrices   uniform in [-a, a], a = sqrt(3 / k) (variance 1/k: activations stay O(1))
//   f32 1-D "*.bias"      uniform in [-0.02, 0.02]
//   f32 1-D otherwise     (norm weights) 1 + uniform in [-0.1, 0.1]
//   f16 / bf16 [n, k]     the f32 rows above rounded to nearest even
//   quantized [n, k]      the f32 rows above quantized with quantize_row (round to nearest) into
//                         the tensor's format, then packed into its layout
// They only exercise speed and memory: the model's outputs are meaningless.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/plan/plan_generated.h"

namespace llmrt {

/// Fills the weight section `weights` (`size` bytes, the plan's weights_size) for every tensor
/// of `plan`; `threads` <= 0 uses the hardware concurrency. Errors for a tensor whose dtype,
/// format or layout has no generator.
Status generate_synthetic_weights(const fb::Plan& plan, uint64_t seed, uint8_t* weights,
                                  uint64_t size, int threads = 0);

}  // namespace llmrt

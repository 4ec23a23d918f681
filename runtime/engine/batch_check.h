// The checks every executor makes on a step's batch before running it (PROGRAM.md: ragged batch,
// block tables, kv slots, logits indices), shared by the CPU and CUDA executors.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/engine/executor.h"

namespace llmrt {

/// OK when `b` is a valid step: sizes within the limits, positions = context_len - n + index,
/// kv slots from the block tables, padding rows with slot -1, logits indices inside the batch
/// (and `logits` non-null when any are asked). Fills seq_of_row[T] (the sequence of each row, -1
/// for padding) when non-null.
Status check_batch(const BatchInput& b, const float* logits, const BatchLimits& limits, int32_t* seq_of_row);

}  // namespace llmrt

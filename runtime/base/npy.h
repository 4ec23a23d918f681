// Minimal writer of NumPy .npy files (format 1.0, little-endian float32, C order) for
// `llmrt run --logits-out`. Written here because nothing packaged writes .npy from C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace llmrt

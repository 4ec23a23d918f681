// The CUDA driver as the runtime sees it: loaded at run time with dlopen("libcuda.so.1") (one
// llmrt binary for GPU and CPU machines; nothing links libcuda), behind an interface so that the
// host-side logic (module selection, driver checks) is tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability, e.g. 9.0 for H100/H200
  uint64_t total_memory = 0;       // bytes
};

class Driver {
 public:
  virtual ~Driver() = default;
  /// CUDA driver API version, cuDriverGetVersion's form: 1000 * major + 10 * minor (13000).
  virtual StatusOr<int> version() = 0;
  virtual StatusOr<std::vector<DeviceInfo>> devices() = 0;
};

/// dlopen("libcuda.so.1") and cuInit(0). Errors: Unavailable "no CUDA driver: ..." when the
/// library is absent (a machine without a GPU driver), Internal naming the failing call else.
StatusOr<std::unique_ptr<Driver>> load_driver();

/// "13.0" for 13000.
std::string driver_version_name(int version);

}  // namespace llmrt::cuda

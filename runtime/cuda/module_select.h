// Which kernel image of a plan a CUDA device loads, decided on the host (no GPU calls):
//   1. a CUBIN built for exactly the device's compute capability (sm_90 on 9.0; an
//      arch-specific sm_90a CUBIN only there);
//   2. else a CUBIN of the same major version and a lower minor (sm_80 on 8.6/8.9): binary
//      compatible per CUDA's compatibility rules, noted;
//   3. else PTX of the highest compute capability not above the device's (not arch-specific
//      "a" PTX), JIT-compiled by the driver at load: a warning (slower start);
//   4. else an error naming the kernel, the plan's targets and the device.
// The plan's cuda_min_driver_version (the toolkit that built the images) must not exceed the
// driver's version.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/plan/plan_generated.h"

namespace llmrt::cuda {

struct Target {
  int major = 0, minor = 0;
  char suffix = 0;  // 0, 'a' (arch-specific) or 'f' (family)
};
/// Parses "sm_90", "sm_90a", "sm_100f", "sm_121"; false for anything else.
bool parse_target(const std::string& name, Target* out);

struct ImageChoice {
  int image = -1;           // index into the kernel's images
  std::string target;       // its target
  bool jit = false;         // PTX, JIT-compiled by the driver
  bool compatible = false;  // a CUBIN of a lower minor version of the same major
  bool grid_dependency_control = false;  // the image's KernelImage.grid_dependency_control
};

/// The image of `kernel` that a device of compute capability cc_major.cc_minor loads (rules
/// above), or an error naming the kernel, its targets and the device.
StatusOr<ImageChoice> choose_image(const fb::Kernel& kernel, const DeviceInfo& device);

struct PlanCheck {
  std::vector<ImageChoice> choices;   // one per kernel, plan order
  std::vector<std::string> warnings;  // JIT / compatible-CUBIN notes, one per target used
};

/// Every kernel of `plan` on `device` under a driver of `driver_version` (cuDriverGetVersion
/// form). Errors: no kernel images (compiled with --target none), driver older than the plan's
/// images need, a kernel with no usable image.
StatusOr<PlanCheck> check_plan(const fb::Plan& plan, const DeviceInfo& device, int driver_version);

}  // namespace llmrt::cuda

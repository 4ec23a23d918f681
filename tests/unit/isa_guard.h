// Restores the CPU kernels' active ISA level (runtime/cpu/cpu_features.h) when a test that
// switches it ends.
#pragma once

#include "runtime/cpu/cpu_features.h"

namespace llmrt {

struct IsaGuard {
  CpuIsa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

}  // namespace llmrt

// Restores the CPU kernels' active ISA level (runtime/cpu/cpu_features.h) when a test that
// switches it ends.
#pragma once

#include <cstdio>
#include <vector>

#include "runtime/cpu/cpu_features.h"

namespace llmrt {

struct IsaGuard {
  CpuIsa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

// The SIMD dispatch levels this CPU can run (each one left out is printed, so a log shows what
// was covered).
inline std::vector<CpuIsa> simd_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512Vnni}) {
    if (static_cast<int>(isa) > static_cast<int>(detected_isa())) {
      std::printf("  [level %s not on this CPU: not tested here]\n", isa_name(isa));
      continue;
    }
    out.push_back(isa);
  }
  return out;
}

// Scalar, then every SIMD level this CPU can run.
inline std::vector<CpuIsa> isa_levels() {
  std::vector<CpuIsa> out = simd_isas();
  out.insert(out.begin(), CpuIsa::kScalar);
  return out;
}

}  // namespace llmrt

#include "runtime/cpu/cpu_features.h"

#include <atomic>

namespace llmrt {
namespace {

CpuIsa probe() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C comes with every AVX2 CPU; the quantized kernels decode f16 scales with it.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return __builtin_cpu_supports("avxvnni") ? CpuIsa::kAvx2Vnni : CpuIsa::kAvx2;
#endif
  return CpuIsa::kScalar;
}

std::atomic<int>& active() {
  static std::atomic<int> isa{static_cast<int>(detected_isa())};
  return isa;
}

}  // namespace

CpuIsa detected_isa() {
  static const CpuIsa isa = probe();
  return isa;
}

CpuIsa active_isa() { return static_cast<CpuIsa>(active().load(std::memory_order_relaxed)); }

void set_active_isa(CpuIsa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) isa = detected_isa();
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
}

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2+fma";
    case CpuIsa::kAvx2Vnni: return "avx2+fma+avx-vnni";
  }
  return "unknown";
}

}  // namespace llmrt

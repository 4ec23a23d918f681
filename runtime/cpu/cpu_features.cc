#include "runtime/cpu/cpu_features.h"

#include <atomic>
#include <string>

namespace llmrt {
namespace {

CpuIsa probe() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C comes with every AVX2 CPU; the quantized kernels decode f16 scales with it.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
      return CpuIsa::kAvx512Vnni;
    return __builtin_cpu_supports("avxvnni") ? CpuIsa::kAvx2Vnni : CpuIsa::kAvx2;
  }
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

bool parse_isa(const char* name, CpuIsa* isa) {
  const std::string n = name;
  for (CpuIsa i : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512Vnni}) {
    const std::string full = isa_name(i);
    const std::string shrt = i == CpuIsa::kScalar ? "scalar" : i == CpuIsa::kAvx2 ? "avx2" : i == CpuIsa::kAvx2Vnni ? "avx2-vnni" : "avx512-vnni";
    if (n == full || n == shrt) {
      *isa = i;
      return true;
    }
  }
  return false;
}

bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avxvnni") != 0);
  return has;
#else
  return false;
#endif
}

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2+fma";
    case CpuIsa::kAvx2Vnni: return "avx2+fma+avx-vnni";
    case CpuIsa::kAvx512Vnni: return "avx2+fma+avx512-vnni";
  }
  return "unknown";
}

}  // namespace llmrt

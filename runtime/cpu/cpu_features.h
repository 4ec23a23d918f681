// Instruction-set dispatch for the CPU kernels.
//
// Every SIMD kernel has a scalar twin that performs the same floating-point operations in the same
// order (fused multiply-adds included), so the two paths give bit-identical results; tests force
// the scalar path with set_active_isa() and compare.
#pragma once

namespace llmrt {

/// Ordered: each level includes the ones below. kAvx2Vnni adds AVX-VNNI (VEX vpdpbusd), used by
/// the quantized kernels only; its integer sums equal the AVX2 ones exactly.
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx2Vnni = 2 };

/// Best ISA this CPU (and OS) supports: AVX2+FMA+F16C (+AVX-VNNI) or scalar.
CpuIsa detected_isa();
/// ISA the kernels use now (default: detected_isa()).
CpuIsa active_isa();
/// Chooses the ISA for subsequent kernel calls (process-wide; clamped to detected_isa()).
/// Meant for tests and benchmarks; do not switch while kernels are running.
void set_active_isa(CpuIsa isa);
const char* isa_name(CpuIsa isa);

}  // namespace llmrt

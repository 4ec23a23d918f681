// Instruction-set dispatch for the CPU kernels.
//
// Every SIMD kernel has a scalar twin that performs the same floating-point operations in the same
// order (fused multiply-adds included), so all paths give bit-identical results; tests force each
// level with set_active_isa() and compare. Elementwise kernels are written once with Highway
// (vector_ops.h, AVX2 and AVX-512 from one source). Reductions (dot products, the f32 and
// quantized linear tiles) are intrinsics next to their scalar statement: their contracts fix the
// reduction tree (8 lanes, canonical order) independently of the register width, and Highway
// 1.0.3 (Debian's) has no int8 dot-product op.
#pragma once

namespace llmrt {

/// Ordered: each level includes the ones below. kAvx2Vnni adds VNNI dot products (vpdpbusd) and
/// kAvx512Vnni 512-bit ones (AVX-512 F/BW/VL/VNNI), used by the quantized kernels only; their
/// integer sums equal the AVX2 ones exactly. (A CPU with AVX-512 VNNI but without the VEX form,
/// AVX-VNNI, runs the kAvx2Vnni level's kernels without vpdpbusd: cpu_has_avx_vnni().)
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx2Vnni = 2, kAvx512Vnni = 3 };

/// Best ISA this CPU (and OS) supports: AVX2+FMA+F16C (+AVX-VNNI, + AVX-512 VNNI) or scalar.
CpuIsa detected_isa();
/// ISA the kernels use now (default: detected_isa()).
CpuIsa active_isa();
/// Chooses the ISA for subsequent kernel calls (process-wide; clamped to detected_isa()).
/// Meant for tests and benchmarks; do not switch while kernels are running.
void set_active_isa(CpuIsa isa);
const char* isa_name(CpuIsa isa);
/// Parses an isa_name() or its short form: scalar, avx2, avx2-vnni, avx512-vnni; false if unknown.
bool parse_isa(const char* name, CpuIsa* isa);
/// Whether the CPU has AVX-VNNI (VEX-encoded vpdpbusd on 256-bit registers).
bool cpu_has_avx_vnni();

}  // namespace llmrt

//===- KernelSource.h - Helpers for writing kernel source -------*- C++ -*-===//
//
// Internal to codegen/: formatting of compile-time constants, template
// substitution and the deterministic entry naming shared by all families.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_KERNELSOURCE_H
#define LLMC_CODEGEN_KERNELSOURCE_H

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSpec.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmc {
namespace detail {

/// A float as a CUDA C++ literal that reads back to the same bits, e.g.
/// "9.99999975e-06f". Requires a finite value.
std::string floatLiteral(float value);

/// FNV-1a, 64 bits: stable across platforms and runs.
uint64_t fnv1a64(std::string_view bytes);

/// Replaces every "${NAME}" in `tmpl` with its value. Every placeholder in the
/// template must be bound and every binding used (asserted: templates are
/// ours, not input).
std::string substitute(std::string_view tmpl,
                       const std::vector<std::pair<std::string, std::string>>
                           &bindings);

/// CUDA source of blockSum(v, red) and blockMax(v, red): reductions of floats
/// or doubles over a block of kBlock threads (a power of two the including
/// source defines) in a fixed tree order, through `red` (kBlock values of
/// shared memory). Every thread of the block must call them; they end with a
/// barrier so `red` may be reused at once.
extern const char *const kBlockReductions;

/// CUDA source of halfToFloat, bf16ToFloat (exact), floatToHalf, floatToBf16 (round to nearest
/// even), the 16-byte Vec16 and loadFloat4.
extern const char *const kFloatConversions;

/// CUDA source of a KV cache's element for kvDtype "f32", "bf16", "f16" or "fp8": the type KvElem
/// (float, the 16-bit pattern or the E4M3 code), toKv(x) (rounded to nearest even, as the CPU
/// backend stores it; fp8 saturating at +-448) and fromKv(e) (exact). bf16 / f16 / fp8 include
/// kFloatConversions. Empty for other types.
std::string kvElementSource(const std::string &kvDtype);
/// The C type of a cache element as kernel parameters declare it: "float", "unsigned short" (the
/// bf16 / f16 bit pattern), "unsigned char" (fp8 codes) or "signed char" (int8 codes).
const char *kvElemType(const std::string &kvDtype);
/// The entry-name suffix of cache kernels: "" (f32), "_bf16", "_f16", "_fp8" or "_i8".
std::string kvEntrySuffix(const std::string &kvDtype);

/// CUDA source of toTf32(v) (cvt.rna.tf32.f32: f32 rounded to 10 mantissa bits, ties away) and
/// mmaTf32(acc, a, b) (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 over the warp, the PTX
/// ISA's fragment layout; every lane of the warp must call it). sm_80+.
extern const char *const kTf32Mma;

/// CUDA source of llm.rope's rotation for the including source's kHd, kHalf and kNeox: the
/// table kInvFreq[kHalf] of p's inverse frequencies, rotatePair(src, dst, i, pos) (rotates pair i
/// of the head at src into dst, which may be src) and rotatedAt(src, d, pos) (element d of the
/// rotated head, by the same operations: the values rotatePair writes, bit for bit).
/// Errors on an unknown style or rope type.
llmrt::StatusOr<std::string> ropeRotationSource(const RopeParams &p);

/// CUDA source of storeRowI8(value, codes, scale, lane) for the including source's kHd: one warp
/// stores the kHd values value(d) of a head row into an int8 KV cache as the CPU backend does
/// (runtime/cpu/attention.cc): s = amax / 127, codes = rint(x * (1 / s)), 0 for an all-zero
/// row. value(d) is called once per d (the lane's values are held in registers).
extern const char *const kInt8RowStore;

/// CUDA source of q8RowBytes<K>() and storeQ8<K, V>(row, e0, v, store): V consecutive values
/// of a row of K from element e0 written into its int8 row of the fast contract (the layout of
/// emitQuantizeQ8Kernel, bit for bit its output for the same values) by the 32 / V lanes of the
/// warp holding their sub-block (shuffles: every lane of the warp calls it; only lanes with
/// `store` write, whole sub-blocks of them); storeQ8Value<K>(q8, row, e, y), one value per lane,
/// nothing when q8 is null. Defined in QuantizeQ8Kernel.cpp.
extern const char *const kQuantizeQ8Store;

/// CUDA source of addRmsNormLastBlock(y, other, w, normed, sum, q8, work, T), the add_rms_norm
/// of p (its kernel's operations and order: the same bits) done after a kernel of `threads`
/// threads per block by its last block to finish (LinearParams::addRmsNorm; every thread of
/// every block calls it last; `work`: a zero-filled workspace word it leaves zero). With
/// p.quantizedOutput the including source defines storeQ8Value (kQuantizeQ8Store).
llmrt::StatusOr<std::string> addRmsNormEpilogueSource(const RmsNormParams &p, int threads);

/// CUDA source of the quantized tiles' exact dequantization for the including source's kN, kK
/// and a quantized weightSource's constants: kTiles and dequantSubBlock(base, w, hi, span, j, n,
/// q, v, at) (lane (n, q)'s 8 values of sub-block j of a span and their k offsets; int5: hi its
/// byte of fifth bits). Used by the
/// quantized linear kernels and dequant_bf16; defined in DequantKernel.cpp.
extern const char *const kQuantDequant;

/// Storage of a weight tensor as a kernel reads it: "f32", "f16", "bf16" (dense, row-major) or
/// a quantized format of runtime/quant/quant_format.h in the cuda_mma_n8 layout.
struct WeightSource {
  bool dense = true;
  int denseType = 2;       // 0 f16, 1 bf16, 2 f32
  std::string constants;   // CUDA source: the storage constants and readers (see weightSource)
  std::string tag;         // for entry names: "f32", "int4_g32_f16_min_mma8", ...
  int64_t tileBytes = 0;   // quantized: bytes of one tile of 8 rows
};

/// The CUDA source that reads a weight of `storage` with rows of `k` elements:
///   * always halfToFloat / bf16ToFloat (exact conversions, no cuda_fp16.h);
///   * dense: kWeightType and weightAt(w, i) (element i of the row-major tensor);
///   * quantized: kGroup, kGroups, kBits, kScaleType, kScaleBytes, kOffset, kTileBytes,
///     kOffsetsAt, kCodesAt, kW, kSpanBytes, kSpans and loadScale(p), the tile geometry of
///     cuda_mma_n8 (quant_format.h).
/// An error names the storage when it is neither.
llmrt::StatusOr<WeightSource> weightSource(const std::string &storage, int64_t k);

/// Threads per block for a block reduction over `n` elements: a power of two
/// in [32, 1024], at most ~4 elements per thread below 1024.
int reductionBlockSize(int64_t n);

/// Threads per block for `n` independent elements per row: a power of two in
/// [32, 256].
int elementwiseBlockSize(int64_t n);

/// Completes a spec: `body` holds "${ENTRY}" where the entry symbol goes. The
/// entry is `prefix` + "_" + 12 hex digits of the body's hash, so different
/// bodies never share an entry and equal bodies always do. Every __global__
/// function of the source first calls llmcGridDependencyWait() (defined in
/// front of the body): griddepcontrol.wait + launch_dependents on sm_90+, so
/// the runtime may launch it overlapped with the kernel before it
/// (programmatic dependent launch); empty below sm_90. A function whose text
/// (up to the next __global__) calls it itself is left as it is: it must make
/// that call before reading anything a kernel writes and before any write.
KernelSpec finishSpec(std::string family, const std::string &prefix,
                      const std::string &body, int blockSize,
                      std::string gridRule);

/// Largest row width / vocabulary we specialize for (keeps every in-row index
/// in int and every constant well inside the CUDA limits).
inline constexpr int64_t kMaxDim = int64_t(1) << 24;
inline constexpr int64_t kMaxVocab = 2147483647;

} // namespace detail
} // namespace llmc

#endif // LLMC_CODEGEN_KERNELSOURCE_H

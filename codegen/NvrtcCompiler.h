//===- NvrtcCompiler.h - Compile kernel specs with NVRTC --------*- C++ -*-===//
//
// Compiles a KernelSpec's CUDA C++ to PTX and CUBIN for each GPU target with
// NVRTC (no GPU or driver needed). No MLIR dependency. In a build without the
// CUDA toolkit (LLMC_ENABLE_CUDA off) compileKernel returns Unavailable
// "NVRTC not available in this build".
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_NVRTCCOMPILER_H
#define LLMC_CODEGEN_NVRTCCOMPILER_H

#include "codegen/KernelSpec.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

/// What ptxas reported for the CUBIN's entry (--ptxas-options=-v in the
/// program log): the occupancy and launch inputs a runtime needs.
struct KernelResources {
  int registers = -1;       ///< per thread; -1 = not reported
  unsigned sharedBytes = 0; ///< static shared memory per block
  unsigned stackBytes = 0;  ///< stack frame per thread
  unsigned spillBytes = 0;  ///< spill stores + loads per thread
  int barriers = 0;         ///< named barriers used
};

/// Parses ptxas' verbose report ("Used 32 registers, used 1 barriers, 1024
/// bytes smem", "8 bytes stack frame, 0 bytes spill stores, 0 bytes spill
/// loads"). False when no "Used N registers" line is found.
bool parsePtxasReport(const std::string &log, KernelResources *out);

/// One compiled image of a kernel (maps onto llmrt.fb.KernelImage).
struct KernelImage {
  std::string target;         ///< "sm_90"
  std::string ptx;            ///< PTX text (no trailing NUL), `.target sm_90`
  std::vector<uint8_t> cubin; ///< ELF for exactly `target`, never empty
  KernelResources resources;  ///< of the CUBIN (registers always reported)
};

/// For each target, one NVRTC compile with --gpu-architecture=<target>, which
/// yields both the CUBIN (checked non-empty) and the PTX it was assembled
/// from (the same PTX a compute_XX compile produces). Options: see
/// nvrtcOptions. Fails with InvalidArgument for an empty spec / target list or
/// a bad target (validateTarget), Internal when an NVRTC call fails (the
/// message names the call, the NVRTC error name and code, the target and the
/// program log) or the PTX lacks the entry, Unavailable without NVRTC.
llmrt::StatusOr<std::vector<KernelImage>>
compileKernel(const KernelSpec &spec, const std::vector<std::string> &targets);

/// The curated default SKUs: sm_80, sm_86, sm_89, sm_90.
std::vector<std::string> defaultTargets();

/// OK when NVRTC 13 accepts `target` as a real architecture: "sm_<N>" with N
/// one of 75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121 (from
/// nvrtcGetSupportedArchs when NVRTC is present), optionally suffixed "a"
/// (N >= 90, arch-specific) or "f" (N >= 100, family-specific).
llmrt::Status validateTarget(const std::string &target);

/// The NVRTC options compileKernel uses for `target` (recorded in plans).
std::vector<std::string> nvrtcOptions(const std::string &target);

/// True when this build links NVRTC.
bool nvrtcAvailable();

/// "13.0", or "" without NVRTC. Part of any compile-cache key.
std::string nvrtcVersionString();

/// Compile cache: compileKernel keeps each image as DIR/<key>.ptx and DIR/<key>.cubin, key =
/// XXH3-128 of the NVRTC version, target, options, entry and source, so a recompile of an
/// unchanged model (or another model with the same shapes) skips NVRTC. DIR: setKernelCacheDir,
/// else $LLMC_KERNEL_CACHE, else $XDG_CACHE_HOME/llmc/kernels or ~/.cache/llmc/kernels; "off"
/// disables it. An entry that is damaged (CUBIN not an ELF, PTX without the entry) is compiled
/// again and rewritten; files are written to a temporary name and renamed (concurrent llmc
/// processes share a cache safely). Cache I/O errors never fail a compile.
void setKernelCacheDir(const std::string &dir);
std::string kernelCacheDir();  ///< "" when disabled
struct KernelCacheStats {
  int hits = 0;    ///< images read from the cache
  int misses = 0;  ///< images compiled by NVRTC (and stored)
};
KernelCacheStats kernelCacheStats();  ///< since the process started

} // namespace llmc

#endif // LLMC_CODEGEN_NVRTCCOMPILER_H

//===- KernelSpec.h - A specialized CUDA kernel instance --------*- C++ -*-===//
//
// A KernelSpec is one GPU kernel instance: CUDA C++ source specialized with the
// compile-time constants of one `llm` op (sizes, eps, RoPE frequencies), the
// entry symbol and the launch geometry. It maps 1:1 onto `llmrt.fb.Kernel` in
// runtime/plan/plan.fbs (images are added by compileKernel in NvrtcCompiler.h).
//
// This header has no MLIR dependency.
//
// Launch contract, common to every family:
//   * blockDim must be exactly `blockDim` (the source hard-codes it as
//     __launch_bounds__ and its reduction width);
//   * gridRule gives the natural gridDim.x as a function of the runtime row
//     count T (tokens):
//       "rows"      gridDim.x = T
//       "rows*<k>"  gridDim.x = T * k  (k a positive decimal integer)
//       "rows/<c>*<k>"  gridDim.x = ceil(T / c) * k  (items of c rows)
//     "rows/<c>*<k> + seqs*<s>"  that plus s per sequence of the step (the
//       tiled paged attention's query tiles never mix sequences)
//     any of them followed by " x<m> when rows<=<r>": m times that when
//       T <= r (paged attention: more blocks for the split contexts of small steps)
//     Every kernel walks its work items with a grid-stride loop, so any
//     gridDim.x >= 1 is correct (a runtime may cap the grid); gridDim.y/z = 1;
//   * dynamic shared memory is `sharedMemBytes`;
//   * all tensors are dense row-major fp32 (ids/positions i32), pointers 16-byte
//     aligned (linear/logits read weights and activations in 16-byte loads; the
//     runtime's tensors and arena values are 256- and 64-byte aligned); T is the
//     last kernel argument (`int T`), T >= 0.
//
// Kernel parameters per family (in order):
//   embedding     (const int *tokens, const float *table, float *out, int T)
//                 ids outside [0, V) produce a zero row (never read out of
//                 bounds).
//   rms_norm      (const float *x, const float *w, float *out, int T)
//   add_rms_norm  (const float *x, const float *residual, const float *w,
//                  float *normed, float *sum, int T)
//   rope          (const float *x, const int *positions, float *out, int T)
//   rope_kv_store (const float *qkv, const int *positions, const long long *kv_slots,
//                  float *q_out, k_cache, v_cache[, k_scales, v_scales], int T)
//                  (KernelFamilies.h)
//   linear, logits (const float *x, const unsigned char *w, const float *bias,
//                  const int *rows, float *y, int T)  (KernelFamilies.h)
//   sample        (const float *logits, const unsigned char *summaries,
//                  const unsigned char *draws, int *tokens, int n)  (KernelFamilies.h)
//   silu_mul      two operands: (const float *gate, const float *up,
//                                float *out, int T)
//                 fused:        (const float *gate_up, float *out, int T)
// Elementwise-safe aliasing: rope may run in place (out == x), add_rms_norm
// may write `sum` over `x` or `residual`, silu_mul may write `out` over
// `gate` (two-operand form). embedding/rms_norm outputs must not alias inputs.
//
// Numerics: fp32 storage and accumulation, no fast-math. Reductions (RMS)
// run in a fixed order that depends only on the compile-time sizes: each
// thread sums its strided elements in index order, then a shared-memory tree
// over the block. Results therefore do not depend on T or on the grid size.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_KERNELSPEC_H
#define LLMC_CODEGEN_KERNELSPEC_H

#include <string>
#include <vector>

namespace llmc {

struct KernelSpec {
  /// "embedding" | "rms_norm" | "add_rms_norm" | "rope" | "silu_mul".
  std::string family;
  /// Unique, deterministic entry symbol: a readable prefix with the shape
  /// (e.g. llm_rms_norm_d576_g576) and a hash of the specialized body, so equal
  /// entries mean byte-identical sources and callers may deduplicate by entry.
  std::string entry;
  /// Self-contained CUDA C++ (no #include), `extern "C"` entry.
  std::string source;
  /// {x, y, z}; always three values.
  std::vector<int> blockDim;
  /// See the launch contract above: "rows", "rows*<k>" or "rows/<c>*<k>".
  std::string gridRule;
  /// Dynamic shared memory per block, bytes.
  unsigned sharedMemBytes = 0;
  /// Device workspace the kernel takes as `unsigned char *work` (before T), bytes; zero-filled
  /// before its first launch, and the kernel leaves it zero-filled where it must be. 0: none
  /// (no such parameter). Launches run one at a time, so kernels may share one workspace.
  uint64_t workspaceBytes = 0;
};

} // namespace llmc

#endif // LLMC_CODEGEN_KERNELSPEC_H

// Dense GEMMs through a library loaded at run time: cuBLASLt (libcublasLt, dlopen'ed like libcuda,
// so one llmrt binary serves GPU and CPU machines and nothing links it). A plan step records the
// choice (Step.gemm_library, `llmc compile --dense-gemm`); the step's generated tensor-core kernel
// stays in the plan as the fallback when the library is absent or refuses a shape.
//
// A step's product is y[rows, n] = x[rows, k] w[n, k]^T (+ bias[n]), every matrix row-major, y and
// the bias f32. cuBLASLt is column-major: a row-major [r, c] matrix is the column-major [c, r] one
// with leading dimension c, so the step is D[n, rows] = op(A) B with A = w as the column-major
// [k, n] matrix (ld k) transposed, B = x as [k, rows] (ld k) and D = y as [n, rows] (ld n).
// lt_call() builds exactly those arguments; the cuBLASLt backend passes them through and the
// tests evaluate them with cuBLAS's column-major definition on the host, so the mapping is
// checked without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/cuda/cuda_driver.h"

namespace llmrt::cuda {

/// The operand types of one library GEMM.
enum class GemmInput {
  kBf16,  // w and x bf16 (the step's to_bf16 kernel wrote x), f32 accumulation and output
  kTf32,  // w and x f32, multiplied on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
};

/// One step's GEMM: y[rows, n] = x[rows, k] w[n, k]^T (+ bias[n] when bias).
struct GemmShape {
  int64_t n = 0, k = 0;
  GemmInput input = GemmInput::kBf16;
  bool bias = false;
};

// cuBLASLt's enumerators, as its headers define them (cublas_api.h, cublasLt.h,
// library_types.h; not included: the runtime builds without the CUDA toolkit).
// tests/unit/gemm_library_test.cc checks every value against the real headers where they exist.
namespace lt {
inline constexpr int kStatusSuccess = 0;         // CUBLAS_STATUS_SUCCESS
inline constexpr int kStatusNotSupported = 15;   // CUBLAS_STATUS_NOT_SUPPORTED
inline constexpr int kR32F = 0;                  // CUDA_R_32F
inline constexpr int kR16BF = 14;                // CUDA_R_16BF
inline constexpr int kCompute32F = 68;           // CUBLAS_COMPUTE_32F
inline constexpr int kCompute32FFastTf32 = 77;   // CUBLAS_COMPUTE_32F_FAST_TF32
inline constexpr int kOpN = 0;                   // CUBLAS_OP_N
inline constexpr int kOpT = 1;                   // CUBLAS_OP_T
inline constexpr int kDescTransA = 3;            // CUBLASLT_MATMUL_DESC_TRANSA
inline constexpr int kDescTransB = 4;            // CUBLASLT_MATMUL_DESC_TRANSB
inline constexpr int kDescEpilogue = 7;          // CUBLASLT_MATMUL_DESC_EPILOGUE
inline constexpr int kDescBiasPointer = 8;       // CUBLASLT_MATMUL_DESC_BIAS_POINTER
inline constexpr int kDescBiasDataType = 26;     // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
inline constexpr int kEpilogueDefault = 1;       // CUBLASLT_EPILOGUE_DEFAULT
inline constexpr int kEpilogueBias = 4;          // CUBLASLT_EPILOGUE_BIAS
inline constexpr int kPrefMaxWorkspace = 1;      // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
inline constexpr size_t kAlgoBytes = 64;         // sizeof(cublasLtMatmulAlgo_t)
inline constexpr size_t kHeuristicResultBytes = 96;  // sizeof(cublasLtMatmulHeuristicResult_t)
}  // namespace lt

/// The arguments of one cublasLtMatmul (D = alpha op(A) op(B) + beta C, column-major), alpha 1,
/// beta 0, C = D.
struct LtCall {
  struct Layout {
    int type = 0;  // cudaDataType
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
  };
  int compute = 0, scale_type = 0;  // cublasComputeType_t, cudaDataType
  int trans_a = 0, trans_b = 0;     // cublasOperation_t
  Layout a, b, c, d;
  int epilogue = 0;                 // cublasLtEpilogue_t
  int bias_type = 0;                // cudaDataType of the bias (with kEpilogueBias)
};
/// The call computing `g` for `rows` rows (the mapping in the file comment).
LtCall lt_call(const GemmShape& g, int64_t rows);

class GemmLibrary {
 public:
  virtual ~GemmLibrary() = default;
  /// "cuBLASLt 13.1.0 (libcublasLt.so.13)".
  virtual std::string name() const = 0;
  /// Device workspace a call may use: the executor allocates it once, in its memory plan.
  virtual uint64_t workspace_bytes() const = 0;
  /// Enqueues y = x w^T (+ bias) for `rows` rows on the driver's stream (recorded into the graph
  /// while the stream is capturing). x is in the shape's input type (bf16 or f32), w row-major
  /// [n, k] in it too, bias f32 [n] (0 without), y f32. Unimplemented when the library has no
  /// algorithm for the shape (the caller runs its generated kernel instead); other errors name
  /// the failing call.
  virtual Status matmul(const GemmShape& g, int64_t rows, DevicePtr w, DevicePtr x, DevicePtr bias, DevicePtr y,
                        DevicePtr workspace) = 0;
};

/// cuBLASLt over `driver`'s current context and stream: dlopen of $LLMRT_CUBLASLT when set, else
/// libcublasLt.so.13, .so.12 (the loader's search path), then /usr/local/cuda/lib64's. Errors:
/// Unavailable "cuBLASLt not found: ..." when no library loads (naming what was tried);
/// Internal naming the call that failed (cublasLtCreate without a usable device).
StatusOr<std::unique_ptr<GemmLibrary>> load_cublaslt(Driver* driver);

/// The cuBLASLt workspace: 32 MiB, NVIDIA's recommendation for Hopper (cuBLAS docs, "cublasLtMatmul
/// workspace"), ample on older GPUs.
inline constexpr uint64_t kCublasLtWorkspaceBytes = uint64_t{32} << 20;

}  // namespace llmrt::cuda

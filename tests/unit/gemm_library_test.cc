// The dense GEMM library's host side (runtime/cuda/gemm_library.h), no GPU needed:
// - lt_call(): the cublasLtMatmul arguments of a step, evaluated on the host exactly as cuBLAS
//   defines a column-major matmul (each operand read through its Layout's type, rows, cols and
//   leading dimension, transposed as its op says, D written through D's layout), must give the
//   row-major y = x w^T (+ bias) the step needs;
// - the cuBLASLt enumerators and struct sizes gemm_library.h restates, against the toolkit's
//   cublasLt.h when this test was built with it (else skipped, saying so);
// - load_cublaslt()'s answers on this machine.
#include "runtime/cuda/gemm_library.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/quant/quant_format.h"

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define LLMRT_TEST_HAVE_CUBLASLT_H 1
#endif

#if defined(__SANITIZE_ADDRESS__)
#define LLMRT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLMRT_TEST_ASAN 1
#endif
#endif

namespace llmrt::cuda {
namespace {

// A buffer as the device would hold it: f32 values, or bf16 bit patterns.
struct Buffer {
  int type = lt::kR32F;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  size_t size() const { return type == lt::kR16BF ? bf16.size() : f32.size(); }
  const void* data() const {
    return type == lt::kR16BF ? static_cast<const void*>(bf16.data()) : static_cast<const void*>(f32.data());
  }
  float value(size_t i) const {
    return type == lt::kR16BF ? quant::bf16_to_float(bf16[i]) : f32[i];
  }
};

// `n` values in [-2, 2) of `type` (bf16 ones are exact bf16 numbers).
Buffer random_buffer(int type, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Buffer b;
  b.type = type;
  for (size_t i = 0; i < n; ++i) {
    if (type == lt::kR16BF)
      b.bf16.push_back(quant::float_to_bf16(dist(rng)));
    else
      b.f32.push_back(dist(rng));
  }
  return b;
}

// Element (i, j) of the column-major matrix `l` over `mem` (the bytes cuBLASLt would read:
// element i + j * ld, of l.type). Fails the test on reads past the buffer or a type mismatch.
double element(const LtCall::Layout& l, const void* mem, size_t elements, uint64_t i, uint64_t j) {
  const uint64_t e = i + j * static_cast<uint64_t>(l.ld);
  EXPECT_LT(e, elements) << "read past the buffer: (" << i << ", " << j << ") with ld " << l.ld;
  if (e >= elements) return NAN;
  if (l.type == lt::kR16BF) return quant::bf16_to_float(static_cast<const uint16_t*>(mem)[e]);
  if (l.type == lt::kR32F) return static_cast<const float*>(mem)[e];
  ADD_FAILURE() << "layout type " << l.type << " is neither CUDA_R_32F nor CUDA_R_16BF";
  return NAN;
}

// op(M) of a layout: its rows and columns, and element (i, j).
struct Op {
  const LtCall::Layout& l;
  int trans;
  const void* mem;
  size_t elements;
  uint64_t rows() const { return trans == lt::kOpN ? l.rows : l.cols; }
  uint64_t cols() const { return trans == lt::kOpN ? l.cols : l.rows; }
  double at(uint64_t i, uint64_t j) const {
    return trans == lt::kOpN ? element(l, mem, elements, i, j) : element(l, mem, elements, j, i);
  }
};

// cublasLtMatmul(c) with alpha 1, beta 0 over A = `a`, B = `b` (the operands the backend
// passes: the weight and the input), bias `bias` with the bias epilogue, written into `d`
// (f32) through D's layout, as cuBLAS defines it: D = op(A) op(B) (+ bias[i] on row i of D).
void evaluate(const LtCall& c, const Buffer& a, const Buffer& b, const std::vector<float>& bias,
              std::vector<float>* d) {
  ASSERT_TRUE(c.trans_a == lt::kOpN || c.trans_a == lt::kOpT) << c.trans_a;
  ASSERT_TRUE(c.trans_b == lt::kOpN || c.trans_b == lt::kOpT) << c.trans_b;
  // Column-major layouts: the leading dimension spans a column.
  for (const LtCall::Layout* l : {&c.a, &c.b, &c.d})
    ASSERT_GE(static_cast<uint64_t>(l->ld), l->rows) << "ld below the rows of a column-major matrix";
  // C is D (beta 0, written in place): the same layout.
  EXPECT_EQ(c.c.type, c.d.type);
  EXPECT_EQ(c.c.rows, c.d.rows);
  EXPECT_EQ(c.c.cols, c.d.cols);
  EXPECT_EQ(c.c.ld, c.d.ld);
  ASSERT_EQ(c.d.type, lt::kR32F) << "the steps' outputs are f32";
  const Op op_a{c.a, c.trans_a, a.data(), a.size()}, op_b{c.b, c.trans_b, b.data(), b.size()};
  ASSERT_EQ(op_a.cols(), op_b.rows()) << "inner dimensions differ";
  ASSERT_EQ(c.d.rows, op_a.rows());
  ASSERT_EQ(c.d.cols, op_b.cols());
  ASSERT_TRUE(c.epilogue == lt::kEpilogueDefault || c.epilogue == lt::kEpilogueBias) << c.epilogue;
  if (c.epilogue == lt::kEpilogueBias) {
    ASSERT_EQ(c.bias_type, lt::kR32F);
    ASSERT_EQ(bias.size(), c.d.rows) << "cuBLASLt's bias has one value per row of D";
  }
  for (uint64_t i = 0; i < c.d.rows; ++i)
    for (uint64_t j = 0; j < c.d.cols; ++j) {
      double sum = c.epilogue == lt::kEpilogueBias ? bias[i] : 0.0;
      for (uint64_t l = 0; l < op_a.cols(); ++l) sum += op_a.at(i, l) * op_b.at(l, j);
      const uint64_t e = i + j * static_cast<uint64_t>(c.d.ld);
      ASSERT_LT(e, d->size()) << "write past y: D(" << i << ", " << j << ")";
      (*d)[e] = static_cast<float>(sum);
    }
}

TEST(GemmLibrary, LtCallComputesTheRowMajorProduct) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dim(1, 19);
  int cases = 0;
  for (GemmInput input : {GemmInput::kBf16, GemmInput::kTf32})
    for (bool bias : {false, true})
      for (int rep = 0; rep < 12; ++rep) {
        GemmShape g;
        g.n = dim(rng) + (rep == 0 ? 0 : rep % 3);  // n != k != rows mostly; 1s included
        g.k = rep == 1 ? 1 : dim(rng) + 7;
        g.input = input;
        g.bias = bias;
        const int64_t rows = rep == 2 ? 1 : dim(rng);
        SCOPED_TRACE("n " + std::to_string(g.n) + " k " + std::to_string(g.k) + " rows " + std::to_string(rows) +
                     (input == GemmInput::kBf16 ? " bf16" : " tf32") + (bias ? " bias" : ""));
        const LtCall c = lt_call(g, rows);
        // Operand and compute types.
        const int in = input == GemmInput::kBf16 ? lt::kR16BF : lt::kR32F;
        EXPECT_EQ(c.a.type, in);
        EXPECT_EQ(c.b.type, in);
        EXPECT_EQ(c.compute, input == GemmInput::kBf16 ? lt::kCompute32F : lt::kCompute32FFastTf32);
        EXPECT_EQ(c.scale_type, lt::kR32F);
        EXPECT_EQ(c.epilogue, bias ? lt::kEpilogueBias : lt::kEpilogueDefault);
        // The step's row-major operands: w [n, k], x [rows, k] (both of the input type), bias [n].
        const Buffer w = random_buffer(in, static_cast<size_t>(g.n * g.k), rng);
        const Buffer x = random_buffer(in, static_cast<size_t>(rows * g.k), rng);
        std::vector<float> b;
        if (bias) b = random_buffer(lt::kR32F, static_cast<size_t>(g.n), rng).f32;
        // y [rows, n] as cuBLASLt writes it through D's layout; NaN where it writes nothing.
        std::vector<float> y(static_cast<size_t>(rows * g.n), NAN);
        evaluate(c, w, x, b, &y);
        if (::testing::Test::HasFatalFailure()) return;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < g.n; ++j) {
            double want = bias ? b[static_cast<size_t>(j)] : 0.0;
            for (int64_t l = 0; l < g.k; ++l)
              want += double(x.value(static_cast<size_t>(r * g.k + l))) * w.value(static_cast<size_t>(j * g.k + l));
            const float got = y[static_cast<size_t>(r * g.n + j)];
            ASSERT_NEAR(got, want, 1e-5 * (1.0 + std::fabs(want))) << "y[" << r << ", " << j << "]";
          }
        ++cases;
      }
  EXPECT_EQ(cases, 48);
}

TEST(GemmLibrary, LtCallKeepsLargeShapesWhole) {
  // Llama-3-8B's logits-sized product (a vocabulary of 128256 by 4096) over 8192 rows: every
  // dimension and leading dimension as given, none narrowed.
  GemmShape g;
  g.n = 128256;
  g.k = 4096;
  const LtCall c = lt_call(g, 8192);
  const Op op_a{c.a, c.trans_a, nullptr, 0}, op_b{c.b, c.trans_b, nullptr, 0};
  EXPECT_EQ(op_a.rows(), 128256u);
  EXPECT_EQ(op_a.cols(), 4096u);
  EXPECT_EQ(op_b.rows(), 4096u);
  EXPECT_EQ(op_b.cols(), 8192u);
  EXPECT_EQ(c.d.rows, 128256u);
  EXPECT_EQ(c.d.cols, 8192u);
  EXPECT_EQ(c.d.ld, 128256);
  EXPECT_EQ(c.a.ld, 4096);
  EXPECT_EQ(c.b.ld, 4096);
}

TEST(GemmLibrary, ConstantsMatchTheCublasLtHeaders) {
#ifndef LLMRT_TEST_HAVE_CUBLASLT_H
  GTEST_SKIP() << "cublasLt.h not found (no CUDA toolkit when this test was configured): the cuBLASLt "
                  "enumerators and struct sizes in runtime/cuda/gemm_library.h are unchecked";
#else
  EXPECT_EQ(lt::kStatusSuccess, static_cast<int>(CUBLAS_STATUS_SUCCESS));
  EXPECT_EQ(lt::kStatusNotSupported, static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_EQ(lt::kR32F, static_cast<int>(CUDA_R_32F));
  EXPECT_EQ(lt::kR16BF, static_cast<int>(CUDA_R_16BF));
  EXPECT_EQ(lt::kCompute32F, static_cast<int>(CUBLAS_COMPUTE_32F));
  EXPECT_EQ(lt::kCompute32FFastTf32, static_cast<int>(CUBLAS_COMPUTE_32F_FAST_TF32));
  EXPECT_EQ(lt::kOpN, static_cast<int>(CUBLAS_OP_N));
  EXPECT_EQ(lt::kOpT, static_cast<int>(CUBLAS_OP_T));
  EXPECT_EQ(lt::kDescTransA, static_cast<int>(CUBLASLT_MATMUL_DESC_TRANSA));
  EXPECT_EQ(lt::kDescTransB, static_cast<int>(CUBLASLT_MATMUL_DESC_TRANSB));
  EXPECT_EQ(lt::kDescEpilogue, static_cast<int>(CUBLASLT_MATMUL_DESC_EPILOGUE));
  EXPECT_EQ(lt::kDescBiasPointer, static_cast<int>(CUBLASLT_MATMUL_DESC_BIAS_POINTER));
  EXPECT_EQ(lt::kDescBiasDataType, static_cast<int>(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE));
  EXPECT_EQ(lt::kEpilogueDefault, static_cast<int>(CUBLASLT_EPILOGUE_DEFAULT));
  EXPECT_EQ(lt::kEpilogueBias, static_cast<int>(CUBLASLT_EPILOGUE_BIAS));
  EXPECT_EQ(lt::kPrefMaxWorkspace, static_cast<int>(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES));
  EXPECT_EQ(lt::kAlgoBytes, sizeof(cublasLtMatmulAlgo_t));
  EXPECT_EQ(lt::kHeuristicResultBytes, sizeof(cublasLtMatmulHeuristicResult_t));
  EXPECT_EQ(offsetof(cublasLtMatmulHeuristicResult_t, algo), 0u);  // the backend reads the algorithm there
  // The backend declares the entry points with int for these enumerations, int32_t for the
  // TRANSA/TRANSB and BIAS_DATA_TYPE attributes and uint32_t for EPILOGUE (cuBLASLt's documented
  // attribute types): the enumerations must have those sizes.
  EXPECT_EQ(sizeof(cublasStatus_t), sizeof(int));
  EXPECT_EQ(sizeof(cudaDataType_t), sizeof(int32_t));
  EXPECT_EQ(sizeof(cublasComputeType_t), sizeof(int));
  EXPECT_EQ(sizeof(cublasOperation_t), sizeof(int32_t));
  EXPECT_EQ(sizeof(cublasLtEpilogue_t), sizeof(uint32_t));
  EXPECT_EQ(sizeof(cublasLtMatmulDescAttributes_t), sizeof(int));
  EXPECT_EQ(sizeof(cublasLtMatmulPreferenceAttributes_t), sizeof(int));
#endif
}

// A driver with no device: load_cublaslt only asks it for its stream.
class NoDevice : public Driver {
 public:
  StatusOr<int> version() override { return 13000; }
  StatusOr<std::vector<DeviceInfo>> devices() override { return std::vector<DeviceInfo>{}; }
  Status use_device(int) override { return unavailable("no device"); }
  StatusOr<DevicePtr> alloc(uint64_t) override { return unavailable("no device"); }
  Status free(DevicePtr) override { return unavailable("no device"); }
  Status copy_to_device(DevicePtr, const void*, uint64_t) override { return unavailable("no device"); }
  Status copy_to_host(void*, DevicePtr, uint64_t) override { return unavailable("no device"); }
  Status copy_on_device(DevicePtr, DevicePtr, uint64_t) override { return unavailable("no device"); }
  StatusOr<ModuleHandle> load_module(const void*, size_t, bool) override { return unavailable("no device"); }
  StatusOr<FunctionHandle> get_function(ModuleHandle, const std::string&) override {
    return unavailable("no device");
  }
  Status launch(FunctionHandle, unsigned, const int[3], unsigned, void**) override { return unavailable("no device"); }
  Status synchronize() override { return ok_status(); }
  void* stream() override { return &fake_stream_; }  // never used: cublasLtCreate fails first here
  void* fake_stream_ = nullptr;
};

// A driver without a stream of its own (stream() nullptr): the library would enqueue on the
// legacy stream, out of order with the executor's work.
class NoStream : public NoDevice {
 public:
  void* stream() override { return nullptr; }
};

TEST(GemmLibrary, LoadCublasLtSaysWhatHappened) {
  auto none = load_cublaslt(nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  NoStream streamless;
  auto refused = load_cublaslt(&streamless);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("needs the driver's stream"), std::string::npos)
      << refused.status().message();
#ifdef LLMRT_TEST_ASAN
  GTEST_SKIP() << "not loading libcublasLt under AddressSanitizer (its bundled CUDA runtime is not instrumented)";
#else
  // $LLMRT_CUBLASLT first: a path that does not exist is tried, then the usual names. Whatever
  // this machine has, the answer says which: a library named by its version and file, "not
  // found" naming what was tried, or the call that failed (no usable device here).
  const char* old = std::getenv("LLMRT_CUBLASLT");
  const std::string saved = old ? old : "";
  const std::string missing = "/nonexistent/llmrt-test/libcublasLt.so.99";
  ASSERT_EQ(setenv("LLMRT_CUBLASLT", missing.c_str(), 1), 0);
  NoDevice driver;
  auto lib = load_cublaslt(&driver);
  if (old) setenv("LLMRT_CUBLASLT", saved.c_str(), 1);
  else unsetenv("LLMRT_CUBLASLT");
  if (lib.ok()) {
    ASSERT_NE(*lib, nullptr);
    EXPECT_EQ((*lib)->name().rfind("cuBLASLt ", 0), 0u) << (*lib)->name();
    EXPECT_NE((*lib)->name().find("(libcublasLt.so."), std::string::npos) << (*lib)->name();
    EXPECT_EQ((*lib)->workspace_bytes(), kCublasLtWorkspaceBytes);
  } else if (lib.status().code() == StatusCode::kUnavailable) {
    EXPECT_NE(lib.status().message().find("cuBLASLt not found"), std::string::npos) << lib.status().message();
    EXPECT_NE(lib.status().message().find(missing), std::string::npos) << lib.status().message();
  } else {
    EXPECT_EQ(lib.status().code(), StatusCode::kInternal) << lib.status().to_string();
    EXPECT_NE(lib.status().message().find("cublasLt"), std::string::npos) << lib.status().message();
  }
#endif
}

}  // namespace
}  // namespace llmrt::cuda

//===- ElementwiseKernel.cpp - llm.add, llm.split, llm.permute_columns ----===//
//
// Row-parallel data movement: one block per row, threads over columns.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <algorithm>

namespace llmc {

namespace {

// `out` may alias `a` or `b` (each element is read and written by one thread).
constexpr const char *kAddTemplate = R"cuda(// llmc kernel: add, width=${D}
// Params: (const float *a, const float *b, float *out, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kD = ${D};
constexpr int kBlock = ${BLOCK};
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *a, const float *b, float *out, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long base = (long long)row * kD;
    for (int j = threadIdx.x; j < kD; j += kBlock)
      out[base + j] = a[base + j] + b[base + j];
  }
}
)cuda";

// Each output j receives columns [kFirst[j], kFirst[j] + kWidth[j]); the
// parameter list (one pointer per output) is generated.
constexpr const char *kSplitTemplate = R"cuda(// llmc kernel: split, rows of ${D} into ${PARTS}
// Params: (const float *x, ${OUT_PARAMS}, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kD = ${D};
constexpr int kBlock = ${BLOCK};
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ x, ${OUT_PARAMS}, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const float *in = x + (long long)row * kD;
${COPIES}  }
}
)cuda";

constexpr const char *kPermuteTemplate = R"cuda(// llmc kernel: permute_columns, width=${D}
// y[t, j] = x[t, perm[j]]; perm (device memory, from the plan) is checked to
// be a permutation of 0..${D}-1 when the runtime uploads it.
// Params: (const float *x, const int *perm, float *out${Q8_NOTE}, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr int kD = ${D};
constexpr int kBlock = ${BLOCK};
${Q8_STORE}} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *__restrict__ x, const int *__restrict__ perm,
         float *__restrict__ out${Q8_PARAM}, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const long long base = (long long)row * kD;
    for (int j = threadIdx.x; j < kD; j += kBlock) {
      const float y = x[base + perm[j]];
      out[base + j] = y;${Q8_WRITE}
    }
  }
}
)cuda";

llmrt::Status checkWidth(const char *what, int64_t d) {
  if (d <= 0 || d > detail::kMaxDim)
    return llmrt::invalid_argument(std::string(what) + ": width " + std::to_string(d) + " outside [1, 2^24]");
  return llmrt::ok_status();
}

} // namespace

llmrt::StatusOr<KernelSpec> emitAddKernel(int64_t width) {
  RETURN_IF_ERROR(checkWidth("add", width));
  const int block = detail::elementwiseBlockSize(width);
  return detail::finishSpec(
      "add", "llm_add_d" + std::to_string(width),
      detail::substitute(kAddTemplate, {{"D", std::to_string(width)}, {"BLOCK", std::to_string(block)}}), block,
      "rows");
}

llmrt::StatusOr<KernelSpec> emitSplitKernel(int64_t width, const std::vector<int64_t> &sizes) {
  RETURN_IF_ERROR(checkWidth("split", width));
  if (sizes.empty() || sizes.size() > 16)
    return llmrt::invalid_argument("split: " + std::to_string(sizes.size()) + " results (1 to 16 supported)");
  int64_t first = 0, widest = 0;
  std::string params, copies, parts, tag;
  for (size_t j = 0; j < sizes.size(); ++j) {
    if (sizes[j] <= 0)
      return llmrt::invalid_argument("split: result " + std::to_string(j) + " has width " +
                                     std::to_string(sizes[j]));
    const std::string out = "out" + std::to_string(j), w = std::to_string(sizes[j]);
    params += (j ? ", " : "") + std::string("float *__restrict__ ") + out;
    copies += "    for (int j = threadIdx.x; j < " + w + "; j += kBlock)\n      " + out + "[(long long)row * " + w +
              " + j] = in[" + std::to_string(first) + " + j];\n";
    parts += (j ? " + " : "") + w;
    tag += "_" + w;
    first += sizes[j];
    widest = std::max(widest, sizes[j]);
  }
  if (first != width)
    return llmrt::invalid_argument("split: result widths add up to " + std::to_string(first) + ", not the row's " +
                                   std::to_string(width));
  const int block = detail::elementwiseBlockSize(widest);
  return detail::finishSpec("split", "llm_split_d" + std::to_string(width) + tag,
                            detail::substitute(kSplitTemplate, {{"D", std::to_string(width)},
                                                                {"PARTS", parts},
                                                                {"OUT_PARAMS", params},
                                                                {"COPIES", copies},
                                                                {"BLOCK", std::to_string(block)}}),
                            block, "rows");
}

llmrt::StatusOr<KernelSpec> emitPermuteColumnsKernel(int64_t width, bool quantizedOutput) {
  RETURN_IF_ERROR(checkWidth("permute_columns", width));
  if (quantizedOutput && width % 32 != 0)
    return llmrt::invalid_argument("permute_columns: int8 output rows need a multiple of 32 columns, got " +
                                   std::to_string(width));
  const int block = detail::elementwiseBlockSize(width);
  // With q8 rows a warp's 32 columns are one sub-block (kD and kBlock multiples of 32).
  const char *write = "\n      storeQ8Value<kD>(q8, row, j, y);";
  return detail::finishSpec(
      "permute_columns", "llm_permute_columns_d" + std::to_string(width) + (quantizedOutput ? "_q8" : ""),
      detail::substitute(kPermuteTemplate, {{"D", std::to_string(width)},
                                            {"BLOCK", std::to_string(block)},
                                            {"Q8_NOTE", quantizedOutput ? ", unsigned char *q8" : ""},
                                            {"Q8_STORE", quantizedOutput ? detail::kQuantizeQ8Store : ""},
                                            {"Q8_PARAM", quantizedOutput ? ", unsigned char *__restrict__ q8" : ""},
                                            {"Q8_WRITE", quantizedOutput ? write : ""}}),
      block, "rows");
}

} // namespace llmc

//===- EmbeddingKernel.cpp - llm.embedding: row gather --------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {
constexpr const char *kTemplate = R"cuda(// llmc kernel: embedding (row gather), vocab=${V} dim=${D}
// out[t, :] = table[tokens[t], :]; an id outside [0, vocab) yields a zero row.
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr long long kVocab = ${V}LL;
constexpr int kD = ${D};
constexpr int kBlock = ${BLOCK};
} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const int *__restrict__ tokens, const float *__restrict__ table,
         float *__restrict__ out, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const int id = tokens[row];
    float *dst = out + (long long)row * kD;
    if (id >= 0 && id < kVocab) {
      const float *src = table + (long long)id * kD;
      for (int j = threadIdx.x; j < kD; j += kBlock)
        dst[j] = src[j];
    } else {
      for (int j = threadIdx.x; j < kD; j += kBlock)
        dst[j] = 0.0f;
    }
  }
}
)cuda";
} // namespace

llmrt::StatusOr<KernelSpec> emitEmbeddingKernel(const EmbeddingParams &p) {
  if (p.vocab <= 0 || p.vocab > detail::kMaxVocab)
    return llmrt::invalid_argument("embedding: vocab size " +
                                   std::to_string(p.vocab) +
                                   " outside [1, 2^31-1]");
  if (p.dim <= 0 || p.dim > detail::kMaxDim)
    return llmrt::invalid_argument("embedding: dim " + std::to_string(p.dim) +
                                   " outside [1, 2^24]");
  int block = detail::elementwiseBlockSize(p.dim);
  std::string body = detail::substitute(
      kTemplate, {{"V", std::to_string(p.vocab)},
                  {"D", std::to_string(p.dim)},
                  {"BLOCK", std::to_string(block)}});
  return detail::finishSpec("embedding",
                            "llm_embedding_v" + std::to_string(p.vocab) +
                                "_d" + std::to_string(p.dim),
                            body, block, "rows");
}

} // namespace llmc

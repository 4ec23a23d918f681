//===- EmbeddingKernel.cpp - llm.embedding: row gather --------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

namespace llmc {

namespace {
constexpr const char *kHeader = R"cuda(// llmc kernel: embedding (row gather), vocab=${V} dim=${D} table=${TABLE}
// out[t, :] = table[tokens[t], :] (dequantized exactly as the CPU's dequantize_row does); an id
// outside [0, vocab) yields a zero row.
// Params: (const int *tokens, const unsigned char *table, float *out, int T)
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
namespace {
constexpr long long kVocab = ${V}LL;
constexpr int kD = ${D};
constexpr int kBlock = ${BLOCK};
} // namespace
)cuda";

constexpr const char *kDenseRow = R"cuda(namespace {
__device__ __forceinline__ float tableAt(const unsigned char *table, long long id, int j) {
  return weightAt(table, id * kD + j);
}
} // namespace
)cuda";

// Element j of row id in the cuda_mma_n8 tile (quant_format.h, cuda_mma_code_pos). The value
// rules are dequantize_row's, product and sum rounded separately (no FMA), so the table reads
// bit for bit as on the CPU.
constexpr const char *kMmaRow = R"cuda(namespace {
__device__ __forceinline__ float tableAt(const unsigned char *table, long long id, int j) {
  const unsigned char *base = table + (id >> 3) * kTileBytes;
  const int r = (int)(id & 7), g = j / kGroup;
  const float d = groupScale(base, g, r);
  const int span = j / 128, sub = j % 128 / 32, i = j % 32;
  const int m = spanSubBlocks(span);
  const int s = i / 16, w = i % 16;
  const int q = w % 8 / 2, b = (w & 1) + 2 * (w / 8); // lane % 4, fragment element
  const unsigned char *lane =
      base + kCodesAt + span * kSpanBytes + (4 * r + q) * m * kW + sub * kW;
  int code;
  if (kBits == 8) {
    const unsigned c = lane[4 * s + b];
    code = kOffset == 0 ? (int)(signed char)c : (int)c;
  } else {
    const int p = 2 * s + (b >> 1) + 4 * (b & 1); // nibble of the lane's word
    code = (lane[p / 2] >> (4 * (p % 2))) & 15;
    if (kBits == 5) // its fifth bit
      code |= (int)((fifthBits(base, span, sub, 4 * r + q) >> p) & 1u) << 4;
    if (kOffset == 3) // nl: the code's grid value
      code = (int)(signed char)(nlGrid4((unsigned)code) & 255u);
  }
  if (kOffset == 2)
    return __fadd_rn(__fmul_rn(d, (float)code), groupMin(base, g, r));
  const int zero = kOffset == 1 ? (int)base[kOffsetsAt + g * 8 + r] : kOffset == 0 ? kSymCode : 0;
  return __fmul_rn(d, (float)(code - zero));
}
} // namespace
)cuda";

constexpr const char *kGather = R"cuda(
extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const int *__restrict__ tokens, const unsigned char *__restrict__ table,
         float *__restrict__ out, int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const int id = tokens[row];
    float *dst = out + (long long)row * kD;
    if (id >= 0 && id < kVocab) {
      for (int j = threadIdx.x; j < kD; j += kBlock)
        dst[j] = tableAt(table, id, j);
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
  auto storage = detail::weightSource(p.table, p.dim);
  if (!storage.ok())
    return llmrt::invalid_argument("embedding: table " + storage.status().message());
  int block = detail::elementwiseBlockSize(p.dim);
  std::string body = detail::substitute(kHeader, {{"V", std::to_string(p.vocab)},
                                                  {"D", std::to_string(p.dim)},
                                                  {"TABLE", p.table},
                                                  {"BLOCK", std::to_string(block)}}) +
                     storage->constants + (storage->dense ? kDenseRow : kMmaRow) + kGather;
  return detail::finishSpec("embedding",
                            "llm_embedding_v" + std::to_string(p.vocab) + "_d" +
                                std::to_string(p.dim) + "_" + storage->tag,
                            body, block, "rows");
}

} // namespace llmc

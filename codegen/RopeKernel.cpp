//===- RopeKernel.cpp - llm.rope: rotary position embedding ---------------===//
//
// Hugging Face semantics. The inverse frequencies (with the rope type folded
// in) are computed here, at codegen time, and emitted as a table; the kernel
// computes angle = float(position) * inv_freq[i] in fp32, as HF does, and
// rotates one pair per thread:
//   neox:        pair (i, i + hd/2)   out = (x0 c - x1 s, x1 c + x0 s)
//   interleaved: pair (2i, 2i + 1)    same rotation
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelFamilies.h"
#include "codegen/KernelSource.h"

#include <cmath>
#include <cstdio>
#include <numbers>

namespace llmc {

namespace {
constexpr const char *kTemplate = R"cuda(// llmc kernel: rope, style=${STYLE} type=${TYPE} heads=${H} head_dim=${HD} theta=${THETA}
// Launch: blockDim.x = ${BLOCK}, gridDim.x = T (grid-stride over rows).
// May run in place (out == x): each thread reads its pair, then writes it.
namespace {
constexpr int kHeads = ${H};
constexpr int kHd = ${HD};
constexpr int kHalf = kHd / 2;
constexpr int kWidth = kHeads * kHd;
constexpr int kPairs = kHeads * kHalf;
constexpr int kBlock = ${BLOCK};
constexpr bool kNeox = ${NEOX};
${ROTATION}} // namespace

extern "C" __global__ void __launch_bounds__(kBlock)
${ENTRY}(const float *x, const int *__restrict__ positions, float *out,
         int T) {
  for (int row = blockIdx.x; row < T; row += gridDim.x) {
    const float pos = (float)positions[row];
    const float *src = x + (long long)row * kWidth;
    float *dst = out + (long long)row * kWidth;
    for (int p = threadIdx.x; p < kPairs; p += kBlock) {
      const int head = p / kHalf;
      rotatePair(src + head * kHd, dst + head * kHd, p - head * kHalf, pos);
    }
  }
}
)cuda";

// The rotation of one head, given kHd, kHalf and kNeox; the inverse frequencies follow as a table.
constexpr const char *kRotation = R"cuda(// inv_freq of rotation pair i. Global rather than __constant__ memory: the
// threads of a warp read different entries.
__device__ const float kInvFreq[kHalf] = {
${TABLE}};

// Rotates pair i of one head (src, dst point at it; dst may be src):
//   neox: (i, i + kHalf), interleaved: (2i, 2i + 1); out = (x0 c - x1 s, x1 c + x0 s).
// rotatePairBy: the same with the angle's sine and cosine given (one angle serves pair i of
// every head); rotatedPairBy: its two values (*r0 for element *a, *r1 for *b), for a caller
// that stores them in another type (a 16-bit or fp8 KV cache).
__device__ __forceinline__ void rotatedPairBy(const float *src, int i, float s, float c, int *a, int *b, float *r0,
                                              float *r1) {
  *a = kNeox ? i : 2 * i;
  *b = kNeox ? *a + kHalf : *a + 1;
  const float x0 = src[*a];
  const float x1 = src[*b];
  *r0 = x0 * c - x1 * s;
  *r1 = x1 * c + x0 * s;
}
__device__ __forceinline__ void rotatePairBy(const float *src, float *dst, int i, float s, float c) {
  int a, b;
  float r0, r1;
  rotatedPairBy(src, i, s, c, &a, &b, &r0, &r1);
  dst[a] = r0;
  dst[b] = r1;
}
__device__ __forceinline__ void rotatePair(const float *src, float *dst, int i, float pos) {
  float s, c;
  sincosf(pos * kInvFreq[i], &s, &c); // one accurate range reduction for both
  rotatePairBy(src, dst, i, s, c);
}

// Element d of the rotated head at src: the value rotatePair writes there, by the same operations.
__device__ __forceinline__ float rotatedAt(const float *src, int d, float pos) {
  const bool first = kNeox ? d < kHalf : (d & 1) == 0;
  const int i = kNeox ? (first ? d : d - kHalf) : d >> 1;
  float s, c;
  sincosf(pos * kInvFreq[i], &s, &c);
  if (first) {
    const float x0 = src[d];
    const float x1 = src[kNeox ? d + kHalf : d + 1];
    return x0 * c - x1 * s;
  }
  const float x0 = src[kNeox ? d - kHalf : d - 1];
  const float x1 = src[d];
  return x1 * c + x0 * s;
}
)cuda";

bool finitePositive(double v) { return std::isfinite(v) && v > 0.0; }
} // namespace

llmrt::StatusOr<std::vector<float>> computeRopeInvFreq(const RopeParams &p) {
  if (p.headDim <= 0 || p.headDim % 2 != 0)
    return llmrt::invalid_argument("rope: head_dim " +
                                   std::to_string(p.headDim) +
                                   " must be positive and even");
  if (!finitePositive(p.theta))
    return llmrt::invalid_argument("rope: theta must be finite and > 0");
  const int64_t half = p.headDim / 2;
  std::vector<double> inv(half);
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0 / std::pow(p.theta, double(2 * i) / double(p.headDim));

  if (p.ropeType == "default") {
    // nothing to fold in
  } else if (p.ropeType == "linear") {
    if (!finitePositive(p.factor))
      return llmrt::invalid_argument("rope: linear factor must be > 0");
    for (double &f : inv)
      f /= p.factor;
  } else if (p.ropeType == "llama3") {
    if (!finitePositive(p.factor) || !finitePositive(p.lowFreqFactor) ||
        !finitePositive(p.highFreqFactor) || p.originalMaxPosition <= 0)
      return llmrt::invalid_argument(
          "rope: llama3 needs factor, low_freq_factor, high_freq_factor and "
          "original_max_position > 0");
    if (p.highFreqFactor <= p.lowFreqFactor)
      return llmrt::invalid_argument(
          "rope: llama3 needs high_freq_factor > low_freq_factor");
    const double oldLen = double(p.originalMaxPosition);
    const double lowWavelen = oldLen / p.lowFreqFactor;
    const double highWavelen = oldLen / p.highFreqFactor;
    for (double &f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < highWavelen) {
        // high frequency: unchanged
      } else if (wavelen > lowWavelen) {
        f /= p.factor;
      } else {
        const double smooth = (oldLen / wavelen - p.lowFreqFactor) /
                              (p.highFreqFactor - p.lowFreqFactor);
        f = (1.0 - smooth) * f / p.factor + smooth * f;
      }
    }
  } else {
    return llmrt::unimplemented("rope: rope_type '" + p.ropeType +
                                "' has no GPU kernel (supported: default, "
                                "linear, llama3)");
  }
  std::vector<float> out(half);
  for (int64_t i = 0; i < half; ++i)
    out[i] = static_cast<float>(inv[i]);
  return out;
}

llmrt::StatusOr<std::string> detail::ropeRotationSource(const RopeParams &p) {
  if (p.style != "neox" && p.style != "interleaved")
    return llmrt::invalid_argument("rope: style '" + p.style +
                                   "' is not 'neox' or 'interleaved'");
  ASSIGN_OR_RETURN(std::vector<float> invFreq, computeRopeInvFreq(p));
  std::string table;
  for (size_t i = 0; i < invFreq.size(); ++i) {
    table += (i % 4 == 0) ? "    " : " ";
    table += detail::floatLiteral(invFreq[i]);
    table += ",";
    if (i % 4 == 3 || i + 1 == invFreq.size())
      table += "\n";
  }
  return detail::substitute(kRotation, {{"TABLE", table}});
}

llmrt::StatusOr<KernelSpec> emitRopeKernel(const RopeParams &p) {
  if (p.numHeads <= 0 || p.headDim <= 0 ||
      p.numHeads * p.headDim > detail::kMaxDim)
    return llmrt::invalid_argument(
        "rope: num_heads * head_dim = " + std::to_string(p.numHeads) + " * " +
        std::to_string(p.headDim) + " outside [1, 2^24]");
  ASSIGN_OR_RETURN(std::string rotation, detail::ropeRotationSource(p));
  char theta[32];
  std::snprintf(theta, sizeof(theta), "%.17g", p.theta);
  int block = detail::elementwiseBlockSize(p.numHeads * p.headDim / 2);
  std::string body = detail::substitute(
      kTemplate, {{"STYLE", p.style},
                  {"TYPE", p.ropeType},
                  {"H", std::to_string(p.numHeads)},
                  {"HD", std::to_string(p.headDim)},
                  {"THETA", theta},
                  {"BLOCK", std::to_string(block)},
                  {"NEOX", p.style == "neox" ? "true" : "false"},
                  {"ROTATION", rotation}});
  return detail::finishSpec(
      "rope",
      "llm_rope_" + std::string(p.style == "neox" ? "neox" : "interleaved") +
          "_h" + std::to_string(p.numHeads) + "_d" + std::to_string(p.headDim),
      body, block, "rows");
}

} // namespace llmc

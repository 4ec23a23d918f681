//===- QuantCheckpoint.h - GPTQ and AWQ checkpoints as plain weights -*- C++ -*-===//
//
// A Hugging Face folder whose config.json has a `quantization_config` of
// quant_method "gptq" or "awq" stores each quantized linear X as
//   GPTQ:     X.qweight I32 [in * bits / 32, out]  codes packed along the input dim,
//                       value j of a word at bits [bits * j, bits * j + bits)
//             X.qzeros  I32 [groups, out * bits / 32]  zero points packed along out;
//                       checkpoint_format "gptq" (v1) stores zero - 1 per field,
//                       subtracted from the whole word (0x11111111 for 4 bits)
//             X.scales  F16 [groups, out]
//             X.g_idx   I32 [in]  group of each input (i / group_size unless desc_act)
//   AWQ GEMM: X.qweight I32 [in, out / 8]  8 codes of one input along out, nibble p
//                       holding column 8c + {0,2,4,6,1,3,5,7}[p]
//             X.qzeros  I32 [groups, out / 8]  same order; zero points as they are
//             X.scales  F16 [groups, out]
// with weight[o][i] = scale[g][o] * (q[i][o] - zero[g][o]), g the group of i.
//
// QuantCheckpointSource hides those tensors and shows X.weight ([out, in],
// SourceDType::Packed) instead, so validateModelTensors and the importer see
// ordinary weights: readF32 dequantizes exactly (every product is exact in
// f32), and where the groups are contiguous runs of the input dim the weight
// is kept as it is: nativeFormat names the cpu_row_groups format
// (runtime/quant/quant_format.h) and readPacked repacks the codes, zero points
// and scale bits into it without requantizing.
//
// desc_act checkpoints quantize the inputs in an order of their own: g_idx is
// then a permutation of group runs. When every group holds exactly group_size
// inputs (what GPTQ writes), X.weight is shown with its columns reordered by
// group (stable: column j holds input perm[j], inputPermutation) and is native
// like the others; the importer feeds such a linear x[:, perm]. Other g_idx
// (uneven groups) stay exact f32 through readF32.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/Model.h"
#include "compiler/frontend/Safetensors.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace llmc {

struct QuantConfig {
  enum class Method { Gptq, Awq };
  Method method = Method::Gptq;
  int bits = 4;           // 4 | 8 (AWQ: 4)
  int64_t groupSize = -1; // -1: one group per row
  bool sym = true;
  bool descAct = false;
  /// GPTQ v1 ("gptq" checkpoint format): qzeros hold zero - 1.
  bool zerosMinusOne = false;
};

/// Reads `quantization_config` from a config.json text: nullopt when the
/// field is absent or null; errors (prefixed with `where`) for an unknown
/// quant_method, unsupported bits, group sizes, formats or per-module
/// overrides.
llmrt::StatusOr<std::optional<QuantConfig>>
parseQuantConfig(std::string_view configJson, const std::string &where);

class QuantCheckpointSource : public TensorSource {
public:
  /// Pairs every X.qweight of `base` (opened with keepInt32) with its
  /// X.qzeros, X.scales and X.g_idx and checks their dtypes, shapes and
  /// group indices; errors name the tensor and the problem.
  static llmrt::StatusOr<std::unique_ptr<QuantCheckpointSource>>
  create(std::unique_ptr<SafetensorsSource> base, const QuantConfig &config);

  const std::vector<SourceTensor> &tensors() const override { return tensors_; }
  llmrt::Status readF32(std::string_view name, float *out) const override;
  std::optional<llmrt::quant::Format>
  nativeFormat(std::string_view name) const override;
  llmrt::Status readPacked(std::string_view name, uint8_t *out) const override;
  std::optional<std::vector<int64_t>>
  inputPermutation(std::string_view name) const override;

  const QuantConfig &config() const { return config_; }

private:
  struct Linear {
    std::string prefix; // "model.layers.0.self_attn.q_proj"
    int64_t in = 0, out = 0, groups = 0;
    const uint8_t *qweight = nullptr; // little-endian int32 words, maybe unaligned
    const uint8_t *scales = nullptr;
    SafetensorsDType scaleType = SafetensorsDType::F16;
    std::vector<int32_t> gIdx;              // group of each input
    std::vector<int64_t> perm;              // column j holds input perm[j]; empty: identity
    std::vector<uint8_t> zeros;             // [groups][out], decoded
    std::optional<llmrt::quant::Format> native;
  };

  QuantCheckpointSource() = default;
  uint32_t code(const Linear &l, int64_t o, int64_t i) const;
  float scale(const Linear &l, int64_t g, int64_t o) const;

  std::unique_ptr<SafetensorsSource> base_;
  QuantConfig config_;
  std::vector<SourceTensor> tensors_;
  std::vector<Linear> linears_;
  std::unordered_map<std::string, size_t> byWeightName_; // "X.weight" -> linears_
};

} // namespace llmc

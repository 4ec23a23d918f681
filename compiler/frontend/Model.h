//===- Model.h - Checkpoint-neutral model description ----------*- C++ -*-===//
//
// What the frontends (Hugging Face safetensors folders, GGUF files) hand to
// the importer: the architecture hyper-parameters, generation defaults, a
// lazily converted tensor table in Hugging Face naming, and (for GGUF) the
// tokenizer. Plain C++: no MLIR, so it can be fuzzed and tested alone.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/status.h"
#include "runtime/quant/quant_format.h"
#include "runtime/tokenizer/tokenizer_data.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmc {

/// Element types a checkpoint tensor may be stored in.
/// Packed: a quantized linear weight assembled from several checkpoint tensors
/// (GPTQ/AWQ qweight/qzeros/scales/g_idx); read through readF32/readPacked only.
enum class SourceDType { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
                         Q3_K, IQ4_NL, IQ4_XS, Q2_K, Packed };

/// "F32", "Q4_1", ...
const char *sourceDTypeName(SourceDType type);

struct SourceTensor {
  std::string name;
  SourceDType dtype;
  /// Row-major, outermost first, Hugging Face order ([out, in] for linears).
  std::vector<int64_t> shape;

  int64_t numElements() const;
};

/// A table of checkpoint tensors, converted to f32 one tensor at a time.
class TensorSource {
public:
  virtual ~TensorSource() = default;
  virtual const std::vector<SourceTensor> &tensors() const = 0;
  /// The tensor called `name`, or nullptr.
  const SourceTensor *find(std::string_view name) const;
  /// Converts tensor `name` to f32 (dequantizing, undoing GGUF's llama Q/K
  /// row permutation) into out[numel].
  virtual llmrt::Status readF32(std::string_view name, float *out) const = 0;
  /// The quantized format the plan can keep tensor `name` in without
  /// requantization (its cpu_row_groups bytes, see runtime/quant/quant_format.h),
  /// or nullopt for float tensors and layouts only readF32 can convert.
  virtual std::optional<llmrt::quant::Format>
  nativeFormat(std::string_view name) const {
    return std::nullopt;
  }
  /// For a matrix stored with its input columns reordered: perm[j] is the
  /// input that column j of readF32/readPacked holds, and the model must feed
  /// it x[:, perm] (llm.permute_columns). nullopt: columns in input order.
  virtual std::optional<std::vector<int64_t>>
  inputPermutation(std::string_view name) const {
    return std::nullopt;
  }
  /// Writes tensor `name` ([n, k], Hugging Face row order) as cpu_row_groups
  /// bytes of nativeFormat(name): n * row_bytes(format, k) bytes, bit-exact.
  virtual llmrt::Status readPacked(std::string_view name, uint8_t *out) const {
    return llmrt::unimplemented("tensor '" + std::string(name) +
                                "' has no packed form");
  }
};

struct RopeScaling {
  std::string type = "default"; // default | linear | llama3
  double factor = 1.0, lowFreqFactor = 1.0, highFreqFactor = 4.0;
  int64_t originalMaxPosition = 0;
};

struct GenerationDefaults {
  std::vector<int32_t> eosIds;
  /// 0 means greedy (generation_config.json with "do_sample": false).
  float temperature = 1.0f, topP = 1.0f, minP = 0.0f, repetitionPenalty = 1.0f;
  int32_t topK = 0;
  int32_t maxNewTokens = 0;
};

struct ModelConfig {
  /// LlamaForCausalLM | MistralForCausalLM | Qwen2ForCausalLM | Qwen3ForCausalLM
  std::string architecture;
  /// Model name if known (GGUF general.name, HF _name_or_path) or the folder
  /// name.
  std::string name;
  int64_t hiddenSize = 0, numLayers = 0, numHeads = 0, numKvHeads = 0,
          headDim = 0, intermediateSize = 0, vocabSize = 0,
          maxPositionEmbeddings = 0;
  double rmsNormEps = 1e-6, ropeTheta = 10000.0;
  RopeScaling ropeScaling;
  bool tieWordEmbeddings = false;
  bool attentionBias = false; // q/k/v biases (Qwen2; Llama attention_bias)
  bool qkNorm = false;        // Qwen3
  int64_t slidingWindow = 0;  // 0 = none
  int32_t bosId = -1;
  std::vector<int32_t> eosIds;
};

struct LoadedModel {
  std::string sourceKind; // "hf" | "gguf"
  std::string path;
  ModelConfig config;
  GenerationDefaults generation;
  /// Names in Hugging Face form: model.embed_tokens.weight,
  /// model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight,
  /// model.norm.weight.
  std::unique_ptr<TensorSource> tensors;
  /// Filled for GGUF (tokenizer.ggml.*); empty for HF folders.
  std::optional<llmrt::TokenizerData> tokenizer;
};

/// `path`: a folder with config.json + model.safetensors or
/// model.safetensors.index.json (+ generation_config.json), or a .gguf file.
llmrt::StatusOr<LoadedModel> loadModel(const std::string &path);

/// Parses a Hugging Face config.json. Errors name the offending field and are
/// prefixed with `whereForErrors`.
llmrt::StatusOr<ModelConfig> parseHfConfig(std::string_view json,
                                           const std::string &whereForErrors);

/// Parses a Hugging Face generation_config.json.
llmrt::StatusOr<GenerationDefaults>
parseGenerationConfig(std::string_view json, const std::string &whereForErrors);

/// The architectures the importer supports, comma separated (for errors).
const char *supportedArchitectures();

/// Checks that every dimension of `config` is positive and within generous
/// bounds (so size products cannot overflow) and that heads divide evenly.
llmrt::Status checkConfigBounds(const ModelConfig &config);

/// Checks checkConfigBounds and that `source` holds every tensor `config`
/// requires, with the shape it requires (embedding, per-layer attention/MLP/
/// norm weights, biases when attentionBias, q/k norms when qkNorm, lm_head
/// unless tied).
/// The tensors (Hugging Face names and shapes, as f32) a config implies.
std::vector<SourceTensor> expectedTensors(const ModelConfig &config);

llmrt::Status validateModelTensors(const ModelConfig &config,
                                   const TensorSource &source);

} // namespace llmc

//===- Model.cpp - Checkpoint-neutral model description -------------------===//

#include "compiler/frontend/Model.h"

#include "compiler/frontend/Gguf.h"
#include "compiler/frontend/HfModel.h"
#include "compiler/frontend/Safetensors.h"

#include <sys/stat.h>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;

const char *sourceDTypeName(SourceDType type) {
  switch (type) {
  case SourceDType::F32: return "F32";
  case SourceDType::F16: return "F16";
  case SourceDType::BF16: return "BF16";
  case SourceDType::Q8_0: return "Q8_0";
  case SourceDType::Q4_0: return "Q4_0";
  case SourceDType::Q4_1: return "Q4_1";
  case SourceDType::Q5_0: return "Q5_0";
  case SourceDType::Q5_1: return "Q5_1";
  case SourceDType::Q4_K: return "Q4_K";
  case SourceDType::Q5_K: return "Q5_K";
  case SourceDType::Q6_K: return "Q6_K";
  case SourceDType::Q3_K: return "Q3_K";
  case SourceDType::Q2_K: return "Q2_K";
  case SourceDType::IQ4_NL: return "IQ4_NL";
  case SourceDType::IQ4_XS: return "IQ4_XS";
  case SourceDType::Packed: return "packed";
  }
  return "?";
}

int64_t SourceTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const SourceTensor *TensorSource::find(std::string_view name) const {
  for (const SourceTensor &t : tensors())
    if (t.name == name)
      return &t;
  return nullptr;
}

const char *supportedArchitectures() {
  return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
         "Qwen3ForCausalLM";
}

namespace {
std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
} // namespace

Status checkConfigBounds(const ModelConfig &c) {
  // Generous limits that keep every size product the importer forms
  // (heads × head_dim × hidden, vocab × hidden, ...) far from overflow.
  constexpr int64_t kMaxDim = int64_t(1) << 24, kMaxLayers = 4096;
  const std::pair<const char *, int64_t> dims[] = {
      {"hidden size", c.hiddenSize},       {"attention heads", c.numHeads},
      {"key/value heads", c.numKvHeads},   {"head dim", c.headDim},
      {"intermediate size", c.intermediateSize}, {"vocabulary size", c.vocabSize}};
  for (const auto &[what, v] : dims)
    if (v <= 0 || v > kMaxDim)
      return invalid_argument(std::string(what) + " " + std::to_string(v) +
                              " is out of range (1 to " +
                              std::to_string(kMaxDim) + ")");
  if (c.numLayers <= 0 || c.numLayers > kMaxLayers)
    return invalid_argument("layer count " + std::to_string(c.numLayers) +
                            " is out of range (1 to " +
                            std::to_string(kMaxLayers) + ")");
  if (c.numHeads % c.numKvHeads != 0)
    return invalid_argument("attention heads " + std::to_string(c.numHeads) +
                            " are not a multiple of key/value heads " +
                            std::to_string(c.numKvHeads));
  if (c.maxPositionEmbeddings < 0 || c.slidingWindow < 0)
    return invalid_argument("negative context length or sliding window");
  return llmrt::ok_status();
}

std::vector<SourceTensor> expectedTensors(const ModelConfig &c) {
  std::vector<SourceTensor> out;
  auto expect = [&](const std::string &name, std::vector<int64_t> shape) {
    out.push_back(SourceTensor{name, SourceDType::F32, std::move(shape)});
  };
  const int64_t d = c.hiddenSize, q = c.numHeads * c.headDim,
                kv = c.numKvHeads * c.headDim, inter = c.intermediateSize;
  expect("model.embed_tokens.weight", {c.vocabSize, d});
  expect("model.norm.weight", {d});
  if (!c.tieWordEmbeddings)
    expect("lm_head.weight", {c.vocabSize, d});
  for (int64_t l = 0; l < c.numLayers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    expect(p + "input_layernorm.weight", {d});
    expect(p + "post_attention_layernorm.weight", {d});
    expect(p + "self_attn.q_proj.weight", {q, d});
    expect(p + "self_attn.k_proj.weight", {kv, d});
    expect(p + "self_attn.v_proj.weight", {kv, d});
    expect(p + "self_attn.o_proj.weight", {d, q});
    if (c.attentionBias) {
      expect(p + "self_attn.q_proj.bias", {q});
      expect(p + "self_attn.k_proj.bias", {kv});
      expect(p + "self_attn.v_proj.bias", {kv});
    }
    if (c.qkNorm) {
      expect(p + "self_attn.q_norm.weight", {c.headDim});
      expect(p + "self_attn.k_norm.weight", {c.headDim});
    }
    expect(p + "mlp.gate_proj.weight", {inter, d});
    expect(p + "mlp.up_proj.weight", {inter, d});
    expect(p + "mlp.down_proj.weight", {d, inter});
  }
  return out;
}

Status validateModelTensors(const ModelConfig &c, const TensorSource &source) {
  RETURN_IF_ERROR(checkConfigBounds(c));
  for (const SourceTensor &want : expectedTensors(c)) {
    const SourceTensor *t = source.find(want.name);
    if (!t)
      return llmrt::not_found("missing tensor '" + want.name + "'");
    if (t->shape != want.shape)
      return invalid_argument("tensor '" + want.name + "' has shape " +
                              shapeString(t->shape) + ", the config implies " +
                              shapeString(want.shape));
  }
  return llmrt::ok_status();
}

StatusOr<LoadedModel> loadModel(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return llmrt::not_found(path + ": no such file or folder");
  if (S_ISDIR(st.st_mode))
    return loadHfModel(path);
  auto endsWith = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (endsWith(".safetensors") || endsWith(".json"))
    return invalid_argument(path + ": pass the model folder (with config.json) "
                                   "or a .gguf file, not one of its files");
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(path));
  return loadGgufModel(std::move(file), path);
}

} // namespace llmc

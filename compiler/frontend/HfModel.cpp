//===- HfModel.cpp - Hugging Face config.json and safetensors folders -----===//

#include "compiler/frontend/HfModel.h"

#include "compiler/frontend/QuantCheckpoint.h"
#include "compiler/frontend/Safetensors.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <sys/stat.h>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;
using json = nlohmann::json;

namespace {

const char *jsonTypeName(const json &v) {
  switch (v.type()) {
  case json::value_t::null: return "null";
  case json::value_t::object: return "an object";
  case json::value_t::array: return "an array";
  case json::value_t::string: return "a string";
  case json::value_t::boolean: return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned: return "an integer";
  case json::value_t::number_float: return "a float";
  default: return "invalid";
  }
}

/// Typed field access on a JSON object; errors name the field. A field that
/// is null counts as absent (HF writes "head_dim": null, "sliding_window":
/// null).
class Fields {
public:
  Fields(const json &obj, std::string where, std::string prefix = "")
      : obj_(obj), where_(std::move(where)), prefix_(std::move(prefix)) {}

  const json *get(const char *key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null())
      return nullptr;
    return &*it;
  }
  bool has(const char *key) const { return get(key) != nullptr; }

  Status missing(const char *key) const {
    return invalid_argument(where_ + ": field '" + prefix_ + key +
                            "' is missing");
  }
  Status wrong(const char *key, const json &v, const char *wanted) const {
    return invalid_argument(where_ + ": field '" + prefix_ + key + "' must be " +
                            wanted + ", got " + jsonTypeName(v));
  }
  Status bad(const char *key, const std::string &why) const {
    return invalid_argument(where_ + ": field '" + prefix_ + key + "' " + why);
  }

  /// Integer field; `out` keeps its value when the field is absent and not
  /// required.
  Status integer(const char *key, int64_t &out, bool required,
                 int64_t min = std::numeric_limits<int64_t>::min()) const {
    const json *v = get(key);
    if (!v)
      return required ? missing(key) : llmrt::ok_status();
    if (v->is_number_integer() && !v->is_number_unsigned()) {
      out = v->get<int64_t>();
    } else if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return bad(key, "is out of range");
      out = static_cast<int64_t>(u);
    } else {
      return wrong(key, *v, "an integer");
    }
    if (out < min)
      return bad(key, "must be at least " + std::to_string(min) + ", got " +
                          std::to_string(out));
    return llmrt::ok_status();
  }
  Status number(const char *key, double &out, bool required) const {
    const json *v = get(key);
    if (!v)
      return required ? missing(key) : llmrt::ok_status();
    if (!v->is_number())
      return wrong(key, *v, "a number");
    out = v->get<double>();
    if (!std::isfinite(out))
      return bad(key, "is not finite");
    return llmrt::ok_status();
  }
  Status number(const char *key, float &out, bool required) const {
    double d = out;
    RETURN_IF_ERROR(number(key, d, required));
    out = static_cast<float>(d);
    return llmrt::ok_status();
  }
  Status boolean(const char *key, bool &out) const {
    const json *v = get(key);
    if (!v)
      return llmrt::ok_status();
    if (!v->is_boolean())
      return wrong(key, *v, "a boolean");
    out = v->get<bool>();
    return llmrt::ok_status();
  }
  Status string(const char *key, std::string &out) const {
    const json *v = get(key);
    if (!v)
      return llmrt::ok_status();
    if (!v->is_string())
      return wrong(key, *v, "a string");
    out = v->get<std::string>();
    return llmrt::ok_status();
  }
  /// A token id or a list of them.
  Status tokenIds(const char *key, std::vector<int32_t> &out) const {
    const json *v = get(key);
    if (!v)
      return llmrt::ok_status();
    auto one = [&](const json &x) -> Status {
      constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
      if (x.is_number_unsigned()) {
        if (x.get<uint64_t>() > static_cast<uint64_t>(kMax))
          return bad(key, "holds an out-of-range token id");
      } else if (x.is_number_integer()) {
        return bad(key, "holds a negative token id " +
                            std::to_string(x.get<int64_t>()));
      } else {
        return wrong(key, x, "a token id (integer) or a list of them");
      }
      out.push_back(static_cast<int32_t>(x.get<uint64_t>()));
      return llmrt::ok_status();
    };
    out.clear();
    if (v->is_array()) {
      for (const json &x : *v)
        RETURN_IF_ERROR(one(x));
      return llmrt::ok_status();
    }
    return one(*v);
  }

private:
  const json &obj_;
  std::string where_;
  std::string prefix_;
};

struct ArchDefaults {
  const char *name;
  int64_t maxPositionEmbeddings;
  bool alwaysBias;
  bool qkNorm;
};
constexpr ArchDefaults kArchs[] = {
    {"LlamaForCausalLM", 2048, false, false},
    {"MistralForCausalLM", 4096 * 32, false, false},
    {"Qwen2ForCausalLM", 32768, true, false},
    {"Qwen3ForCausalLM", 32768, false, true},
};

Status parseRopeScaling(const json &rs, const std::string &where,
                        const char *field, RopeScaling &out) {
  if (!rs.is_object())
    return invalid_argument(where + ": field '" + field +
                            "' must be an object or null, got " +
                            jsonTypeName(rs));
  Fields f(rs, where, std::string(field) + ".");
  std::string type;
  if (f.has("rope_type"))
    RETURN_IF_ERROR(f.string("rope_type", type));
  else if (f.has("type"))
    RETURN_IF_ERROR(f.string("type", type));
  else
    return f.missing("rope_type");
  if (type == "default")
    return llmrt::ok_status();
  if (type == "linear") {
    out.type = "linear";
    RETURN_IF_ERROR(f.number("factor", out.factor, true));
  } else if (type == "llama3") {
    out.type = "llama3";
    RETURN_IF_ERROR(f.number("factor", out.factor, true));
    RETURN_IF_ERROR(f.number("low_freq_factor", out.lowFreqFactor, true));
    RETURN_IF_ERROR(f.number("high_freq_factor", out.highFreqFactor, true));
    RETURN_IF_ERROR(f.integer("original_max_position_embeddings",
                              out.originalMaxPosition, true, 1));
    if (!(out.highFreqFactor > out.lowFreqFactor))
      return f.bad("high_freq_factor", "must exceed low_freq_factor");
  } else {
    return llmrt::unimplemented(where + ": rope scaling type '" + type +
                                "' is not supported (default, linear, llama3)");
  }
  if (!(out.factor > 0))
    return f.bad("factor", "must be positive");
  return llmrt::ok_status();
}

} // namespace

StatusOr<ModelConfig> parseHfConfig(std::string_view text,
                                    const std::string &where) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded())
    return invalid_argument(where + ": not valid JSON");
  if (!root.is_object())
    return invalid_argument(where + ": not a JSON object");
  Fields f(root, where);
  ModelConfig c;

  const json *archs = f.get("architectures");
  if (!archs)
    return f.missing("architectures");
  if (!archs->is_array() || archs->empty())
    return f.wrong("architectures", *archs, "a non-empty list of strings");
  const ArchDefaults *arch = nullptr;
  std::string names;
  for (const json &a : *archs) {
    if (!a.is_string())
      return f.wrong("architectures", a, "a list of strings");
    std::string name = a.get<std::string>();
    names += (names.empty() ? "" : ", ") + name;
    for (const ArchDefaults &d : kArchs)
      if (!arch && name == d.name)
        arch = &d;
  }
  if (!arch)
    return llmrt::unimplemented(where + ": architecture " + names +
                                " is not supported (supported: " +
                                supportedArchitectures() + ")");
  c.architecture = arch->name;

  std::string act = "silu";
  RETURN_IF_ERROR(f.string("hidden_act", act));
  if (act != "silu")
    return llmrt::unimplemented(where + ": hidden_act '" + act +
                                "' is not supported (silu)");

  RETURN_IF_ERROR(f.string("_name_or_path", c.name));
  RETURN_IF_ERROR(f.integer("hidden_size", c.hiddenSize, true, 1));
  RETURN_IF_ERROR(f.integer("num_hidden_layers", c.numLayers, true, 1));
  RETURN_IF_ERROR(f.integer("num_attention_heads", c.numHeads, true, 1));
  RETURN_IF_ERROR(f.integer("intermediate_size", c.intermediateSize, true, 1));
  RETURN_IF_ERROR(f.integer("vocab_size", c.vocabSize, true, 1));
  c.numKvHeads = c.numHeads;
  RETURN_IF_ERROR(f.integer("num_key_value_heads", c.numKvHeads, false, 1));
  if (c.numHeads % c.numKvHeads != 0)
    return f.bad("num_key_value_heads",
                 "(" + std::to_string(c.numKvHeads) +
                     ") must divide num_attention_heads (" +
                     std::to_string(c.numHeads) + ")");
  if (f.has("head_dim")) {
    RETURN_IF_ERROR(f.integer("head_dim", c.headDim, true, 1));
  } else {
    if (c.hiddenSize % c.numHeads != 0)
      return f.bad("hidden_size", "is not a multiple of num_attention_heads "
                                  "and head_dim is absent");
    c.headDim = c.hiddenSize / c.numHeads;
  }
  if (c.headDim % 2 != 0)
    return f.bad("head_dim", "must be even for rotary embeddings, got " +
                                 std::to_string(c.headDim));
  c.maxPositionEmbeddings = arch->maxPositionEmbeddings;
  RETURN_IF_ERROR(
      f.integer("max_position_embeddings", c.maxPositionEmbeddings, false, 1));
  RETURN_IF_ERROR(f.number("rms_norm_eps", c.rmsNormEps, false));
  if (!(c.rmsNormEps > 0))
    return f.bad("rms_norm_eps", "must be positive");
  RETURN_IF_ERROR(f.number("rope_theta", c.ropeTheta, false));
  if (const json *rs = f.get("rope_scaling"))
    RETURN_IF_ERROR(parseRopeScaling(*rs, where, "rope_scaling", c.ropeScaling));
  if (const json *rp = f.get("rope_parameters")) { // transformers >= 5
    if (!rp->is_object())
      return f.wrong("rope_parameters", *rp, "an object");
    Fields p(*rp, where, "rope_parameters.");
    RETURN_IF_ERROR(p.number("rope_theta", c.ropeTheta, false));
    RETURN_IF_ERROR(parseRopeScaling(*rp, where, "rope_parameters", c.ropeScaling));
  }
  if (!(c.ropeTheta > 0))
    return f.bad("rope_theta", "must be positive");

  RETURN_IF_ERROR(f.boolean("tie_word_embeddings", c.tieWordEmbeddings));
  c.attentionBias = arch->alwaysBias;
  if (!arch->alwaysBias)
    RETURN_IF_ERROR(f.boolean("attention_bias", c.attentionBias));
  c.qkNorm = arch->qkNorm;

  // Sliding window.
  int64_t window = 0;
  RETURN_IF_ERROR(f.integer("sliding_window", window, false, 0));
  if (c.architecture == "MistralForCausalLM") {
    c.slidingWindow = window;
  } else if (c.architecture == "Qwen2ForCausalLM" ||
             c.architecture == "Qwen3ForCausalLM") {
    bool use = false;
    RETURN_IF_ERROR(f.boolean("use_sliding_window", use));
    if (use && window > 0) {
      int64_t maxWindowLayers = 28; // transformers' default
      RETURN_IF_ERROR(f.integer("max_window_layers", maxWindowLayers, false, 0));
      if (maxWindowLayers == 0)
        c.slidingWindow = window;
      else if (maxWindowLayers < c.numLayers)
        return llmrt::unimplemented(
            where + ": sliding window on only some layers (max_window_layers " +
            std::to_string(maxWindowLayers) + " < num_hidden_layers " +
            std::to_string(c.numLayers) + ") is not supported");
    }
  }
  if (const json *layerTypes = f.get("layer_types")) {
    if (!layerTypes->is_array())
      return f.wrong("layer_types", *layerTypes, "a list of strings");
    bool anySliding = false, anyFull = false;
    for (const json &t : *layerTypes) {
      if (!t.is_string())
        return f.wrong("layer_types", t, "a list of strings");
      std::string s = t.get<std::string>();
      if (s == "sliding_attention")
        anySliding = true;
      else if (s == "full_attention")
        anyFull = true;
      else
        return llmrt::unimplemented(where + ": layer type '" + s +
                                    "' is not supported");
    }
    if (anySliding && anyFull)
      return llmrt::unimplemented(where + ": mixed sliding/full attention "
                                          "layers are not supported");
    if (anySliding && window == 0)
      return f.missing("sliding_window");
    c.slidingWindow = anySliding ? window : 0;
  }

  int64_t bos = -1;
  if (f.has("bos_token_id")) {
    RETURN_IF_ERROR(f.integer("bos_token_id", bos, true, 0));
    if (bos > std::numeric_limits<int32_t>::max())
      return f.bad("bos_token_id", "is out of range");
  }
  c.bosId = static_cast<int32_t>(bos);
  RETURN_IF_ERROR(f.tokenIds("eos_token_id", c.eosIds));
  for (int32_t id : c.eosIds)
    if (id >= c.vocabSize)
      return f.bad("eos_token_id", "holds id " + std::to_string(id) +
                                       " outside the vocabulary");
  if (c.bosId >= c.vocabSize)
    return f.bad("bos_token_id", "is outside the vocabulary");
  Status bounds = checkConfigBounds(c);
  if (!bounds.ok())
    return bounds.with_context(where);
  return c;
}

StatusOr<GenerationDefaults> parseGenerationConfig(std::string_view text,
                                                   const std::string &where) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded())
    return invalid_argument(where + ": not valid JSON");
  if (!root.is_object())
    return invalid_argument(where + ": not a JSON object");
  Fields f(root, where);
  GenerationDefaults g;
  RETURN_IF_ERROR(f.tokenIds("eos_token_id", g.eosIds));
  RETURN_IF_ERROR(f.number("temperature", g.temperature, false));
  RETURN_IF_ERROR(f.number("top_p", g.topP, false));
  RETURN_IF_ERROR(f.number("min_p", g.minP, false));
  RETURN_IF_ERROR(f.number("repetition_penalty", g.repetitionPenalty, false));
  int64_t topK = g.topK, maxNew = g.maxNewTokens;
  RETURN_IF_ERROR(f.integer("top_k", topK, false, 0));
  RETURN_IF_ERROR(f.integer("max_new_tokens", maxNew, false, 0));
  if (topK > std::numeric_limits<int32_t>::max() ||
      maxNew > std::numeric_limits<int32_t>::max())
    return invalid_argument(where + ": top_k or max_new_tokens out of range");
  g.topK = static_cast<int32_t>(topK);
  g.maxNewTokens = static_cast<int32_t>(maxNew);
  if (g.temperature < 0)
    return f.bad("temperature", "must not be negative");
  if (!(g.topP > 0 && g.topP <= 1))
    return f.bad("top_p", "must be in (0, 1]");
  if (!(g.minP >= 0 && g.minP <= 1))
    return f.bad("min_p", "must be in [0, 1]");
  if (!(g.repetitionPenalty > 0))
    return f.bad("repetition_penalty", "must be positive");
  bool doSample = true;
  if (f.has("do_sample")) {
    RETURN_IF_ERROR(f.boolean("do_sample", doSample));
    if (!doSample)
      g.temperature = 0.0f; // greedy
  }
  return g;
}

namespace {
bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// generation_config.json of `dir` when present (else the config's eos ids) into model.generation.
Status readGenerationDefaults(const std::string &dir, LoadedModel &model) {
  model.generation.eosIds = model.config.eosIds;
  const std::string genPath = dir + "/generation_config.json";
  if (!isFile(genPath))
    return llmrt::ok_status();
  ASSIGN_OR_RETURN(std::string genText, readTextFile(genPath));
  ASSIGN_OR_RETURN(model.generation, parseGenerationConfig(genText, genPath));
  if (model.generation.eosIds.empty())
    model.generation.eosIds = model.config.eosIds;
  for (int32_t id : model.generation.eosIds)
    if (id >= model.config.vocabSize)
      return invalid_argument(genPath + ": eos_token_id " + std::to_string(id) +
                              " is outside the vocabulary");
  return llmrt::ok_status();
}

} // namespace

StatusOr<LoadedModel> loadHfModel(const std::string &dirIn) {
  std::string dir = dirIn;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  LoadedModel model;
  model.sourceKind = "hf";
  model.path = dirIn;

  const std::string configPath = dir + "/config.json";
  if (!isFile(configPath))
    return llmrt::not_found(dir + ": no config.json (expected a Hugging Face "
                                  "model folder or a .gguf file)");
  ASSIGN_OR_RETURN(std::string configText, readTextFile(configPath));
  ASSIGN_OR_RETURN(model.config, parseHfConfig(configText, configPath));
  if (model.config.name.empty()) {
    size_t slash = dir.rfind('/');
    model.config.name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  }

  RETURN_IF_ERROR(readGenerationDefaults(dir, model));

  // GPTQ/AWQ: their int32 tensors are read raw and shown as X.weight.
  ASSIGN_OR_RETURN(std::optional<QuantConfig> quant,
                   parseQuantConfig(configText, configPath));
  const bool keepInt32 = quant.has_value();
  std::unique_ptr<SafetensorsSource> source;
  if (isFile(dir + "/model.safetensors")) {
    ASSIGN_OR_RETURN(source, SafetensorsSource::openFile(
                                 dir + "/model.safetensors", keepInt32));
  } else if (isFile(dir + "/model.safetensors.index.json")) {
    ASSIGN_OR_RETURN(source, SafetensorsSource::openIndex(
                                 dir + "/model.safetensors.index.json", keepInt32));
  } else {
    return llmrt::not_found(dir + ": no model.safetensors or "
                                  "model.safetensors.index.json");
  }
  std::unique_ptr<TensorSource> tensors;
  if (quant) {
    auto q = QuantCheckpointSource::create(std::move(source), *quant);
    if (!q.ok())
      return q.status().with_context(dir);
    tensors = std::move(q).value();
  } else {
    tensors = std::move(source);
  }
  Status st = validateModelTensors(model.config, *tensors);
  if (!st.ok())
    return st.with_context(dir);
  model.tensors = std::move(tensors);
  return model;
}

namespace {

// Shapes only: the plan writer never reads synthetic weights.
class SyntheticSource : public TensorSource {
public:
  explicit SyntheticSource(std::vector<SourceTensor> t) : tensors_(std::move(t)) {}
  const std::vector<SourceTensor> &tensors() const override { return tensors_; }
  Status readF32(std::string_view name, float *) const override {
    return llmrt::unimplemented("tensor '" + std::string(name) +
                                "' is synthetic: it has no data to read");
  }

private:
  std::vector<SourceTensor> tensors_;
};

} // namespace

StatusOr<LoadedModel> loadSyntheticModel(const std::string &pathIn) {
  std::string path = pathIn;
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  std::string dir, configPath;
  if (isFile(path)) {
    configPath = path;
    size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    dir = path;
    configPath = dir + "/config.json";
    if (!isFile(configPath))
      return llmrt::not_found(pathIn + ": no such config.json (--synthetic-weights takes a "
                                       "Hugging Face config.json or its folder)");
  }
  LoadedModel model;
  model.sourceKind = "synthetic";
  model.path = dir;
  ASSIGN_OR_RETURN(std::string configText, readTextFile(configPath));
  ASSIGN_OR_RETURN(model.config, parseHfConfig(configText, configPath));
  ASSIGN_OR_RETURN(std::optional<QuantConfig> quant, parseQuantConfig(configText, configPath));
  if (quant)
    return invalid_argument(configPath + ": has a quantization_config; synthetic weights start "
                                         "from float weights (use --quantize for a quantized plan)");
  if (model.config.name.empty())
    model.config.name = "synthetic";
  RETURN_IF_ERROR(readGenerationDefaults(dir, model));
  // parseHfConfig checked the sizes' bounds; the list is exactly what validateModelTensors expects.
  model.tensors = std::make_unique<SyntheticSource>(expectedTensors(model.config));
  return model;
}

} // namespace llmc

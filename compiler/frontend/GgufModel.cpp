//===- GgufModel.cpp - A GGUF file as a LoadedModel -----------------------===//
//
// Maps llama.cpp's metadata keys and tensor names to the Hugging Face view the
// importer uses, and undoes the convert-time Q/K row permutation of arch
// llama (llama.cpp rotates interleaved pairs, HF rotates halves).
//
//===----------------------------------------------------------------------===//

#include "compiler/frontend/Dequant.h"
#include "compiler/frontend/Gguf.h"
#include "runtime/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <unordered_map>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;

namespace {

struct ArchInfo {
  const char *gguf;
  const char *hf;
};
constexpr ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
};

/// Per-layer GGUF suffix → HF suffix (after "model.layers.N.").
struct LayerName {
  const char *gguf;
  const char *hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string fileStem(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0)
    base.resize(base.size() - 5);
  return base;
}

class GgufSource : public TensorSource {
public:
  struct Entry {
    const GgufTensorInfo *info;
    SourceDType dtype;
    /// Head size of a llama-permuted Q/K tensor, 0 when rows are in HF order.
    int64_t permuteHeadDim = 0;
  };

  explicit GgufSource(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {}

  void add(SourceTensor tensor, Entry entry) {
    entries_.emplace(tensor.name, entry);
    tensors_.push_back(std::move(tensor));
  }

  const std::vector<SourceTensor> &tensors() const override { return tensors_; }

  Status readF32(std::string_view name, float *out) const override {
    auto it = entries_.find(std::string(name));
    if (it == entries_.end())
      return llmrt::not_found("no tensor '" + std::string(name) + "' in " +
                              file_->name());
    const Entry &e = it->second;
    const GgufTensorInfo &info = *e.info;
    const uint8_t *src = file_->tensorData(info);
    auto context = [&](Status st) {
      return st.with_context(file_->name() + ": tensor '" + info.name + "'");
    };
    if (e.permuteHeadDim == 0) {
      Status st = dequantize(e.dtype, src, info.numBytes, info.numElements, out);
      return st.ok() ? st : context(st);
    }
    // Rows are the outermost GGUF dimension; each row holds rowElems values.
    int64_t rows = info.dims.back();
    int64_t rowElems = rows == 0 ? 0 : info.numElements / rows;
    int64_t rowBytes = storageBytes(e.dtype, rowElems);
    if (rowBytes >= 0) {
      for (int64_t hfRow = 0; hfRow < rows; ++hfRow) {
        int64_t g = ggufRowForHfRow(hfRow, e.permuteHeadDim);
        Status st = dequantize(e.dtype, src + g * rowBytes, rowBytes, rowElems,
                               out + hfRow * rowElems);
        if (!st.ok())
          return context(st);
      }
      return llmrt::ok_status();
    }
    // Rows that do not fill whole blocks (e.g. a quantized 1-D bias):
    // convert everything, then reorder.
    std::vector<float> tmp(info.numElements);
    Status st = dequantize(e.dtype, src, info.numBytes, info.numElements,
                           tmp.data());
    if (!st.ok())
      return context(st);
    for (int64_t hfRow = 0; hfRow < rows; ++hfRow)
      std::memcpy(out + hfRow * rowElems,
                  tmp.data() + ggufRowForHfRow(hfRow, e.permuteHeadDim) * rowElems,
                  rowElems * sizeof(float));
    return llmrt::ok_status();
  }

  std::optional<llmrt::quant::Format>
  nativeFormat(std::string_view name) const override {
    auto it = entries_.find(std::string(name));
    if (it == entries_.end() || it->second.info->dims.size() != 2)
      return std::nullopt;
    // ggml's blocks in the format that holds them exactly (Dequant.h): Q8_0,
    // Q4_0 and Q4_1 bit for bit, the others widened.
    return heldFormat(it->second.dtype);
  }

  Status readPacked(std::string_view name, uint8_t *out) const override {
    auto format = nativeFormat(name);
    if (!format)
      return TensorSource::readPacked(name, out);
    const Entry &e = entries_.find(std::string(name))->second;
    const GgufTensorInfo &info = *e.info;
    const int64_t rows = info.dims.back();
    const int64_t rowElems = rows == 0 ? 0 : info.numElements / rows;
    auto rb = llmrt::quant::row_bytes(*format, rowElems);
    if (!rb.ok())
      return llmrt::invalid_argument(file_->name() + ": tensor '" + info.name + "': rows of " +
                                     std::to_string(rowElems) + " " + sourceDTypeName(e.dtype) +
                                     " elements: " + std::string(rb.status().message()));
    const uint8_t *src = file_->tensorData(info);
    const int64_t srcRow = storageBytes(e.dtype, rowElems);
    if (srcRow < 0 || srcRow * rows != static_cast<int64_t>(info.numBytes))
      return llmrt::invalid_argument(file_->name() + ": tensor '" + info.name + "': " +
                                     std::to_string(info.numBytes) + " bytes do not hold " +
                                     std::to_string(rows) + " rows of " + std::to_string(rowElems) +
                                     " " + sourceDTypeName(e.dtype) + " elements");
    for (int64_t hfRow = 0; hfRow < rows; ++hfRow) {
      int64_t g = e.permuteHeadDim ? ggufRowForHfRow(hfRow, e.permuteHeadDim) : hfRow;
      repackBlocks(e.dtype, src + g * srcRow, rowElems / blockElements(e.dtype), out + hfRow * *rb);
    }
    return llmrt::ok_status();
  }

  const GgufFile &file() const { return *file_; }

private:
  std::unique_ptr<GgufFile> file_;
  std::vector<SourceTensor> tensors_;
  std::unordered_map<std::string, Entry> entries_;
};

/// Reads an optional value: leaves `out` untouched when the key is absent.
template <typename T, typename Getter>
Status readOptional(const GgufFile &f, const std::string &key, T &out,
                    Getter getter) {
  if (!f.has(key))
    return llmrt::ok_status();
  auto v = (f.*getter)(key);
  if (!v.ok())
    return v.status();
  out = static_cast<T>(*v);
  return llmrt::ok_status();
}

} // namespace

int64_t ggufRowForHfRow(int64_t hfRow, int64_t headDim) {
  int64_t half = headDim / 2;
  int64_t head = hfRow / headDim;
  int64_t r = hfRow % headDim;
  return head * headDim + (r % half) * 2 + r / half;
}

std::optional<std::string> ggufToHfTensorName(std::string_view name) {
  if (name == "token_embd.weight")
    return std::string("model.embed_tokens.weight");
  if (name == "output_norm.weight")
    return std::string("model.norm.weight");
  if (name == "output.weight")
    return std::string("lm_head.weight");
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  std::string_view rest = name.substr(prefix.size());
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 9)
    return std::nullopt;
  int64_t layer = 0;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + dot, layer);
  if (ec != std::errc() || ptr != rest.data() + dot)
    return std::nullopt;
  std::string_view suffix = rest.substr(dot + 1);
  for (const LayerName &ln : kLayerNames)
    if (suffix == ln.gguf)
      return "model.layers." + std::to_string(layer) + "." + ln.hf;
  return std::nullopt;
}

StatusOr<std::optional<llmrt::TokenizerData>>
readGgufTokenizer(const GgufFile &f) {
  if (!f.has("tokenizer.ggml.model"))
    return std::optional<llmrt::TokenizerData>();
  ASSIGN_OR_RETURN(std::string model, f.getString("tokenizer.ggml.model"));
  llmrt::TokenizerData tok;
  if (model == "gpt2") {
    tok.model = "bpe";
    tok.byte_level = true;
  } else if (model == "llama") {
    // SentencePiece-style BPE with byte-fallback tokens.
    tok.model = "bpe";
    tok.byte_level = false;
    tok.add_bos = true; // llama.cpp's default for this tokenizer model
  } else if (model == "none" || model == "no_vocab") {
    return std::optional<llmrt::TokenizerData>();
  } else {
    return llmrt::unimplemented(f.name() + ": tokenizer.ggml.model '" + model +
                                "' is not supported (supported: gpt2, llama)");
  }
  tok.pre = "default";
  RETURN_IF_ERROR(readOptional(f, "tokenizer.ggml.pre", tok.pre,
                               &GgufFile::getString));
  // Byte-level BPE: the name selects a row of the runtime's pre-tokenizer table
  // (runtime/tokenizer/pre_tokenizer.cc); refuse an unknown one here, naming the file.
  if (model == "gpt2" && !tok.pre.empty() &&
      llmrt::PreTokenizer::canonical_name(tok.pre).empty())
    return llmrt::unimplemented(f.name() + ": tokenizer.ggml.pre '" + tok.pre +
                                "' is not a supported pre-tokenizer (supported: " +
                                llmrt::PreTokenizer::supported_names() + ")");
  ASSIGN_OR_RETURN(tok.tokens, f.getStringArray("tokenizer.ggml.tokens"));
  const int64_t n = static_cast<int64_t>(tok.tokens.size());
  if (n == 0)
    return invalid_argument(f.name() + ": tokenizer.ggml.tokens is empty");
  if (f.has("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> types,
                     f.getIntArray("tokenizer.ggml.token_type"));
    if (static_cast<int64_t>(types.size()) != n)
      return invalid_argument(
          f.name() + ": tokenizer.ggml.token_type has " +
          std::to_string(types.size()) + " entries for " + std::to_string(n) +
          " tokens");
    tok.token_types.reserve(n);
    for (int64_t t : types) {
      if (t < 0 || t > 6)
        return invalid_argument(f.name() + ": tokenizer.ggml.token_type value " +
                                std::to_string(t) + " is not a token type");
      tok.token_types.push_back(static_cast<int32_t>(t));
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    ASSIGN_OR_RETURN(tok.merges, f.getStringArray("tokenizer.ggml.merges"));
  } else if (model == "gpt2") {
    return invalid_argument(f.name() +
                            ": byte-level BPE tokenizer without tokenizer.ggml.merges");
  }
  if (model == "llama" && f.has("tokenizer.ggml.scores")) { // SPM: merges by score
    ASSIGN_OR_RETURN(std::vector<double> scores, f.getFloatArray("tokenizer.ggml.scores"));
    tok.scores.assign(scores.begin(), scores.end());
  }
  if (model == "llama") {
    // SentencePiece variants are named in `pre` (runtime/tokenizer/spm.h): the "▁" prefix
    // follows tokenizer.ggml.add_space_prefix (default on, as in llama.cpp).
    bool addSpacePrefix = true;
    RETURN_IF_ERROR(readOptional(f, "tokenizer.ggml.add_space_prefix", addSpacePrefix,
                                 &GgufFile::getBool));
    tok.pre = addSpacePrefix ? "spm" : "spm-no-prefix";
  }
  auto readId = [&](const char *key, int32_t &out) -> Status {
    if (!f.has(key))
      return llmrt::ok_status();
    ASSIGN_OR_RETURN(int64_t id, f.getInt(key));
    if (id < 0 || id >= n)
      return invalid_argument(f.name() + ": " + key + " " + std::to_string(id) +
                              " is outside the vocabulary (" +
                              std::to_string(n) + " tokens)");
    out = static_cast<int32_t>(id);
    return llmrt::ok_status();
  };
  RETURN_IF_ERROR(readId("tokenizer.ggml.bos_token_id", tok.bos_id));
  RETURN_IF_ERROR(readId("tokenizer.ggml.eos_token_id", tok.eos_id));
  RETURN_IF_ERROR(readId("tokenizer.ggml.padding_token_id", tok.pad_id));
  RETURN_IF_ERROR(readOptional(f, "tokenizer.ggml.add_bos_token", tok.add_bos,
                               &GgufFile::getBool));
  RETURN_IF_ERROR(readOptional(f, "tokenizer.ggml.add_eos_token", tok.add_eos,
                               &GgufFile::getBool));
  RETURN_IF_ERROR(readOptional(f, "tokenizer.chat_template", tok.chat_template,
                               &GgufFile::getString));
  return std::optional<llmrt::TokenizerData>(std::move(tok));
}

StatusOr<LoadedModel> loadGgufModel(std::unique_ptr<GgufFile> fileOwned,
                                    const std::string &path) {
  const GgufFile &f = *fileOwned;
  ASSIGN_OR_RETURN(std::string arch, f.getString("general.architecture"));
  const ArchInfo *archInfo = nullptr;
  for (const ArchInfo &a : kArchs)
    if (arch == a.gguf)
      archInfo = &a;
  if (!archInfo)
    return llmrt::unimplemented(f.name() + ": GGUF architecture '" + arch +
                                "' is not supported (supported: llama, qwen2, "
                                "qwen3)");
  const std::string k = arch + ".";
  LoadedModel model;
  model.sourceKind = "gguf";
  model.path = path;
  ModelConfig &c = model.config;
  c.architecture = archInfo->hf;
  c.name = fileStem(path);
  RETURN_IF_ERROR(readOptional(f, "general.name", c.name, &GgufFile::getString));

  auto required = [&](const std::string &key, int64_t &out) -> Status {
    ASSIGN_OR_RETURN(out, f.getInt(key));
    if (out <= 0)
      return invalid_argument(f.name() + ": " + key + " must be positive, got " +
                              std::to_string(out));
    return llmrt::ok_status();
  };
  RETURN_IF_ERROR(required(k + "embedding_length", c.hiddenSize));
  RETURN_IF_ERROR(required(k + "block_count", c.numLayers));
  RETURN_IF_ERROR(required(k + "attention.head_count", c.numHeads));
  RETURN_IF_ERROR(required(k + "feed_forward_length", c.intermediateSize));
  c.numKvHeads = c.numHeads;
  if (f.has(k + "attention.head_count_kv"))
    RETURN_IF_ERROR(required(k + "attention.head_count_kv", c.numKvHeads));
  if (c.numHeads % c.numKvHeads != 0)
    return invalid_argument(f.name() + ": head_count " +
                            std::to_string(c.numHeads) +
                            " is not a multiple of head_count_kv " +
                            std::to_string(c.numKvHeads));
  if (f.has(k + "attention.key_length")) {
    RETURN_IF_ERROR(required(k + "attention.key_length", c.headDim));
  } else {
    if (c.hiddenSize % c.numHeads != 0)
      return invalid_argument(f.name() + ": embedding_length is not a multiple "
                                         "of head_count and key_length is absent");
    c.headDim = c.hiddenSize / c.numHeads;
  }
  if (f.has(k + "attention.value_length")) {
    ASSIGN_OR_RETURN(int64_t v, f.getInt(k + "attention.value_length"));
    if (v != c.headDim)
      return llmrt::unimplemented(f.name() + ": value_length " +
                                  std::to_string(v) + " differs from key_length " +
                                  std::to_string(c.headDim));
  }
  if (c.headDim % 2 != 0)
    return invalid_argument(f.name() + ": head dimension " +
                            std::to_string(c.headDim) + " is odd");
  if (f.has(k + "rope.dimension_count")) {
    ASSIGN_OR_RETURN(int64_t ropeDims, f.getInt(k + "rope.dimension_count"));
    if (ropeDims != c.headDim)
      return llmrt::unimplemented(
          f.name() + ": partial rotary embedding (rope.dimension_count " +
          std::to_string(ropeDims) + " != head dim " +
          std::to_string(c.headDim) + ") is not supported");
  }
  RETURN_IF_ERROR(readOptional(f, k + "context_length",
                               c.maxPositionEmbeddings, &GgufFile::getInt));
  ASSIGN_OR_RETURN(c.rmsNormEps,
                   f.getFloat(k + "attention.layer_norm_rms_epsilon"));
  RETURN_IF_ERROR(readOptional(f, k + "rope.freq_base", c.ropeTheta,
                               &GgufFile::getFloat));
  RETURN_IF_ERROR(readOptional(f, k + "attention.sliding_window",
                               c.slidingWindow, &GgufFile::getInt));
  if (c.slidingWindow < 0)
    return invalid_argument(f.name() + ": negative sliding_window");

  // RoPE scaling.
  std::string scalingType = "none";
  RETURN_IF_ERROR(readOptional(f, k + "rope.scaling.type", scalingType,
                               &GgufFile::getString));
  if (scalingType == "linear") {
    c.ropeScaling.type = "linear";
    ASSIGN_OR_RETURN(c.ropeScaling.factor, f.getFloat(k + "rope.scaling.factor"));
  } else if (scalingType != "none") {
    return llmrt::unimplemented(f.name() + ": rope.scaling.type '" +
                                scalingType + "' is not supported (none, linear)");
  }
  if (f.has(k + "rope.scale_linear")) { // older files
    ASSIGN_OR_RETURN(double factor, f.getFloat(k + "rope.scale_linear"));
    if (factor != 1.0) {
      c.ropeScaling.type = "linear";
      c.ropeScaling.factor = factor;
    }
  }
  if (c.ropeScaling.type == "linear" && !(c.ropeScaling.factor > 0))
    return invalid_argument(f.name() + ": rope scaling factor must be positive");
  RETURN_IF_ERROR(readOptional(f, k + "rope.scaling.original_context_length",
                               c.ropeScaling.originalMaxPosition,
                               &GgufFile::getInt));
  if (f.findTensor("rope_freqs.weight"))
    return llmrt::unimplemented(
        f.name() + ": per-dimension RoPE frequency factors (rope_freqs.weight, "
                   "Llama 3.1-style scaling baked into the file) are not "
                   "supported yet");

  // Tokenizer, special ids, vocabulary size.
  ASSIGN_OR_RETURN(model.tokenizer, readGgufTokenizer(f));
  if (model.tokenizer) {
    c.vocabSize = static_cast<int64_t>(model.tokenizer->tokens.size());
    c.bosId = model.tokenizer->bos_id;
    if (model.tokenizer->eos_id >= 0)
      c.eosIds.push_back(model.tokenizer->eos_id);
  }
  for (const char *key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (!f.has(key))
      continue;
    ASSIGN_OR_RETURN(int64_t id, f.getInt(key));
    if (id < 0 || (c.vocabSize > 0 && id >= c.vocabSize))
      return invalid_argument(f.name() + ": " + key + " " + std::to_string(id) +
                              " is outside the vocabulary");
    if (std::find(c.eosIds.begin(), c.eosIds.end(), id) == c.eosIds.end())
      c.eosIds.push_back(static_cast<int32_t>(id));
  }
  if (c.vocabSize == 0 && f.has(k + "vocab_size"))
    RETURN_IF_ERROR(required(k + "vocab_size", c.vocabSize));
  if (c.vocabSize == 0)
    if (const GgufTensorInfo *embd = f.findTensor("token_embd.weight"))
      if (embd->dims.size() == 2)
        c.vocabSize = embd->dims[1];
  if (c.vocabSize <= 0)
    return invalid_argument(f.name() + ": cannot determine the vocabulary size "
                                       "(no tokenizer.ggml.tokens, vocab_size "
                                       "or token_embd.weight)");

  // Generation defaults (general.sampling.* from newer converters).
  GenerationDefaults &g = model.generation;
  g.eosIds = c.eosIds;
  RETURN_IF_ERROR(readOptional(f, "general.sampling.temp", g.temperature,
                               &GgufFile::getFloat));
  RETURN_IF_ERROR(readOptional(f, "general.sampling.top_p", g.topP,
                               &GgufFile::getFloat));
  RETURN_IF_ERROR(readOptional(f, "general.sampling.min_p", g.minP,
                               &GgufFile::getFloat));
  RETURN_IF_ERROR(readOptional(f, "general.sampling.top_k", g.topK,
                               &GgufFile::getInt));
  RETURN_IF_ERROR(readOptional(f, "general.sampling.penalty_repeat",
                               g.repetitionPenalty, &GgufFile::getFloat));

  // Tensors.
  auto source = std::make_unique<GgufSource>(std::move(fileOwned));
  const bool permuteQk = arch == "llama";
  for (const GgufTensorInfo &info : source->file().tensors()) {
    std::optional<std::string> hfName = ggufToHfTensorName(info.name);
    if (!hfName)
      return llmrt::unimplemented(source->file().name() + ": tensor '" +
                                  info.name + "' has no known role");
    std::optional<SourceDType> dtype = ggmlToSourceDType(info.type);
    if (!dtype) {
      const char *typeName = ggmlTypeName(info.type);
      return llmrt::unimplemented(
          source->file().name() + ": tensor '" + info.name + "' has type " +
          (typeName ? typeName : std::to_string(info.type)) +
          "; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
          "IQ4_NL, IQ4_XS");
    }
    SourceTensor tensor;
    tensor.name = *hfName;
    tensor.dtype = *dtype;
    tensor.shape.assign(info.dims.rbegin(), info.dims.rend());
    GgufSource::Entry entry{&info, *dtype, 0};
    if (permuteQk) {
      auto endsWith = [&](std::string_view suffix) {
        return tensor.name.size() >= suffix.size() &&
               tensor.name.compare(tensor.name.size() - suffix.size(),
                                   suffix.size(), suffix) == 0;
      };
      int64_t heads = 0;
      if (endsWith("self_attn.q_proj.weight") || endsWith("self_attn.q_proj.bias"))
        heads = c.numHeads;
      else if (endsWith("self_attn.k_proj.weight") ||
               endsWith("self_attn.k_proj.bias"))
        heads = c.numKvHeads;
      if (heads > 0) {
        int64_t rows = tensor.shape[0];
        if (rows % heads != 0 || (rows / heads) % 2 != 0)
          return invalid_argument(source->file().name() + ": tensor '" +
                                  info.name + "' has " + std::to_string(rows) +
                                  " rows, not " + std::to_string(heads) +
                                  " heads of an even size");
        entry.permuteHeadDim = rows / heads;
      }
    }
    source->add(std::move(tensor), entry);
  }
  c.tieWordEmbeddings = source->find("lm_head.weight") == nullptr;
  c.attentionBias = source->find("model.layers.0.self_attn.q_proj.bias") != nullptr;
  c.qkNorm = source->find("model.layers.0.self_attn.q_norm.weight") != nullptr;
  if (arch == "qwen3" && !c.qkNorm)
    return invalid_argument(source->file().name() +
                            ": qwen3 model without attn_q_norm tensors");
  if (source->tensors().empty())
    return invalid_argument(path + ": the file has no tensors (a vocab-only "
                                   "GGUF? readGgufTokenizer reads its "
                                   "tokenizer)");
  Status st = validateModelTensors(c, *source);
  if (!st.ok())
    return st.with_context(path);
  model.tensors = std::move(source);
  return model;
}

} // namespace llmc

//===- ModelLoadTest.cpp - loadModel on tiny HF folders and GGUF files ----===//

#include "compiler/frontend/Gguf.h"
#include "compiler/frontend/Model.h"
#include "compiler/frontend/Safetensors.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace llmc;
using namespace llmc::test;

namespace {

struct Tensor {
  std::vector<int64_t> shape; // HF order
  std::vector<float> data;
};

/// A tiny random Llama-style model in Hugging Face naming.
struct TinyModel {
  int64_t hidden = 32, heads = 4, kvHeads = 2, headDim = 8, inter = 64,
          layers = 2, vocab = 16;
  bool bias = false;
  bool tied = false;
  std::map<std::string, Tensor> tensors;

  void generate() {
    uint32_t seed = 100;
    auto add = [&](const std::string &name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      tensors[name] = Tensor{shape, randomFloats(n, seed++)};
    };
    add("model.embed_tokens.weight", {vocab, hidden});
    add("model.norm.weight", {hidden});
    if (!tied)
      add("lm_head.weight", {vocab, hidden});
    for (int64_t l = 0; l < layers; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {hidden});
      add(p + "post_attention_layernorm.weight", {hidden});
      add(p + "self_attn.q_proj.weight", {heads * headDim, hidden});
      add(p + "self_attn.k_proj.weight", {kvHeads * headDim, hidden});
      add(p + "self_attn.v_proj.weight", {kvHeads * headDim, hidden});
      add(p + "self_attn.o_proj.weight", {hidden, heads * headDim});
      if (bias) {
        add(p + "self_attn.q_proj.bias", {heads * headDim});
        add(p + "self_attn.k_proj.bias", {kvHeads * headDim});
        add(p + "self_attn.v_proj.bias", {kvHeads * headDim});
      }
      add(p + "mlp.gate_proj.weight", {inter, hidden});
      add(p + "mlp.up_proj.weight", {inter, hidden});
      add(p + "mlp.down_proj.weight", {hidden, inter});
    }
  }

  std::string configJson(const std::string &arch) const {
    return "{\"architectures\": [\"" + arch + "\"], \"hidden_size\": " +
           std::to_string(hidden) + ", \"num_hidden_layers\": " +
           std::to_string(layers) + ", \"num_attention_heads\": " +
           std::to_string(heads) + ", \"num_key_value_heads\": " +
           std::to_string(kvHeads) + ", \"intermediate_size\": " +
           std::to_string(inter) + ", \"vocab_size\": " + std::to_string(vocab) +
           ", \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0, "
           "\"tie_word_embeddings\": " + (tied ? "true" : "false") +
           ", \"bos_token_id\": 1, \"eos_token_id\": 2}";
  }
};

/// llama.cpp's convert-time permutation of Q/K rows (HF → GGUF), written
/// out from its definition: rows of each head reshaped [2, hd/2] → [hd/2, 2].
std::vector<float> llamaCppPermute(const std::vector<float> &w, int64_t rows,
                                   int64_t cols, int64_t heads) {
  int64_t hd = rows / heads;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t c = 0; c < cols; ++c)
          out[(h * hd + i * 2 + j) * cols + c] = w[(h * hd + j * (hd / 2) + i) * cols + c];
  return out;
}

/// HF → GGUF tensor names (the inverse of the reader's table, written here
/// independently).
std::string ggufName(const std::string &hf) {
  static const std::pair<const char *, const char *> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  std::string rest = hf.substr(std::string("model.layers.").size());
  size_t dot = rest.find('.');
  std::string layer = rest.substr(0, dot), suffix = rest.substr(dot + 1);
  for (const auto &[h, g] : kMap)
    if (suffix == h)
      return "blk." + layer + "." + g;
  return "?";
}

/// Writes `m` as a GGUF of arch `arch` ("llama" permutes Q/K like llama.cpp).
/// Q/K weights are stored as Q8_0 when `quantizeQk`.
Bytes writeGguf(const TinyModel &m, const std::string &arch, bool quantizeQk) {
  GgufBuilder b;
  b.addString("general.architecture", arch);
  b.addString("general.name", "tiny-" + arch);
  b.addU32(arch + ".embedding_length", m.hidden);
  b.addU32(arch + ".block_count", m.layers);
  b.addU32(arch + ".attention.head_count", m.heads);
  b.addU32(arch + ".attention.head_count_kv", m.kvHeads);
  b.addU32(arch + ".feed_forward_length", m.inter);
  b.addU32(arch + ".context_length", 4096);
  b.addU32(arch + ".rope.dimension_count", m.headDim);
  b.addF32(arch + ".rope.freq_base", 500000.0f);
  b.addF32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  b.addString("tokenizer.ggml.model", "gpt2");
  b.addString("tokenizer.ggml.pre", "llama-bpe");
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < m.vocab; ++i)
    tokens.push_back("t" + std::to_string(i));
  b.addStringArray("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(m.vocab, 1);
  types[2] = 3;
  b.addI32Array("tokenizer.ggml.token_type", types);
  b.addStringArray("tokenizer.ggml.merges", {"t 1", "t 2"});
  b.addU32("tokenizer.ggml.bos_token_id", 1);
  b.addU32("tokenizer.ggml.eos_token_id", 2);
  b.addU32("tokenizer.ggml.eot_token_id", 3);
  b.addBool("tokenizer.ggml.add_bos_token", true);
  b.addString("tokenizer.chat_template", "{{ messages }}");
  b.addF32("general.sampling.temp", 0.7f);
  b.addI32("general.sampling.top_k", 20);
  for (const auto &[name, t] : m.tensors) {
    std::vector<float> data = t.data;
    bool isQ = name.find("q_proj") != std::string::npos;
    bool isK = name.find("k_proj") != std::string::npos;
    int64_t rows = t.shape[0];
    int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    if (arch == "llama" && (isQ || isK))
      data = llamaCppPermute(data, rows, cols, isQ ? m.heads : m.kvHeads);
    std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
    if (quantizeQk && (isQ || isK) && t.shape.size() == 2)
      b.addTensor(ggufName(name), 8, dims, quantizeQ8_0(data));
    else
      b.addTensor(ggufName(name), 0, dims, floatBytes(data));
  }
  return b.build();
}

void expectTensorsEqual(const TinyModel &m, const TensorSource &source,
                        float tolerance) {
  EXPECT_EQ(source.tensors().size(), m.tensors.size());
  for (const auto &[name, t] : m.tensors) {
    SCOPED_TRACE(name);
    const SourceTensor *st = source.find(name);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->shape, t.shape);
    std::vector<float> got(t.data.size(), NAN);
    llmrt::Status status = source.readF32(name, got.data());
    ASSERT_TRUE(status.ok()) << status.to_string();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], t.data[i], tolerance) << "element " << i;
  }
}

/// HF-style rotary embedding: rotates element i with i + hd/2 in each head.
std::vector<float> ropeNeox(std::vector<float> x, int64_t heads, int64_t hd,
                            int pos, double theta) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      double angle = pos * std::pow(theta, -2.0 * i / hd);
      float c = std::cos(angle), s = std::sin(angle);
      float &a = x[h * hd + i], &b = x[h * hd + i + hd / 2];
      float a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  return x;
}

/// ggml's "normal" rope: rotates element 2i with 2i + 1 in each head.
std::vector<float> ropeInterleaved(std::vector<float> x, int64_t heads,
                                   int64_t hd, int pos, double theta) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      double angle = pos * std::pow(theta, -2.0 * i / hd);
      float c = std::cos(angle), s = std::sin(angle);
      float &a = x[h * hd + 2 * i], &b = x[h * hd + 2 * i + 1];
      float a0 = a, b0 = b;
      a = a0 * c - b0 * s;
      b = a0 * s + b0 * c;
    }
  return x;
}

std::vector<float> matVec(const std::vector<float> &w, int64_t rows,
                          int64_t cols, const std::vector<float> &x) {
  std::vector<float> y(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r] += w[r * cols + c] * x[c];
  return y;
}

} // namespace

TEST(LoadModel, HfFolderSingleFile) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TinyModel m;
    m.tied = tied;
    m.generate();
    SafetensorsBuilder sb;
    for (const auto &[name, t] : m.tensors)
      sb.addF32(name, t.shape, t.data);
    TempDir dir;
    dir.write("config.json", m.configJson("LlamaForCausalLM"));
    dir.write("generation_config.json",
              std::string(R"({"eos_token_id": [2, 5], "temperature": 0.6, "top_p": 0.9})"));
    dir.write("model.safetensors", sb.build());
    auto loaded = loadModel(dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->sourceKind, "hf");
    EXPECT_EQ(loaded->config.architecture, "LlamaForCausalLM");
    EXPECT_EQ(loaded->config.tieWordEmbeddings, tied);
    EXPECT_EQ(loaded->config.headDim, 8);
    EXPECT_EQ(loaded->config.eosIds, (std::vector<int32_t>{2}));
    EXPECT_EQ(loaded->generation.eosIds, (std::vector<int32_t>{2, 5}));
    EXPECT_FLOAT_EQ(loaded->generation.temperature, 0.6f);
    EXPECT_FALSE(loaded->tokenizer.has_value());
    // No _name_or_path: the folder name.
    EXPECT_EQ(loaded->config.name, dir.path().substr(dir.path().rfind('/') + 1));
    expectTensorsEqual(m, *loaded->tensors, 0.0f);
  }
}

TEST(LoadModel, HfFolderShardedBf16WithQwen2Biases) {
  TinyModel m;
  m.bias = true;
  m.generate();
  // Round the data to bf16 so the stored values are exact.
  for (auto &[name, t] : m.tensors)
    for (float &x : t.data) {
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      bits &= 0xFFFF0000u;
      std::memcpy(&x, &bits, 4);
    }
  SafetensorsBuilder shards[2];
  std::string weightMap;
  int i = 0;
  for (const auto &[name, t] : m.tensors) {
    Bytes bf;
    for (float x : t.data)
      put<uint16_t>(bf, toBf16(x));
    int s = i++ % 2;
    shards[s].add(name, "BF16", t.shape, bf);
    weightMap += (weightMap.empty() ? "" : ",") + ("\"" + name + "\": \"model-0000" +
                                                  std::to_string(s + 1) + "-of-00002.safetensors\"");
  }
  TempDir dir;
  dir.write("config.json", m.configJson("Qwen2ForCausalLM"));
  dir.write("model-00001-of-00002.safetensors", shards[0].build());
  dir.write("model-00002-of-00002.safetensors", shards[1].build());
  dir.write("model.safetensors.index.json",
            "{\"metadata\": {}, \"weight_map\": {" + weightMap + "}}");
  auto loaded = loadModel(dir.path() + "/");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->config.attentionBias);
  EXPECT_EQ(loaded->tensors->find("model.layers.1.self_attn.k_proj.bias")->dtype,
            SourceDType::BF16);
  expectTensorsEqual(m, *loaded->tensors, 0.0f);
}

TEST(LoadModel, HfFolderErrors) {
  TinyModel m;
  m.generate();
  TempDir dir;
  auto err = [&]() {
    auto loaded = loadModel(dir.path());
    return loaded.ok() ? std::string("<ok>") : loaded.status().message();
  };
  EXPECT_NE(err().find("no config.json"), std::string::npos) << err();
  dir.write("config.json", m.configJson("LlamaForCausalLM"));
  EXPECT_NE(err().find("no model.safetensors or model.safetensors.index.json"),
            std::string::npos) << err();
  // A tensor missing: lm_head (the config says untied).
  SafetensorsBuilder sb;
  for (const auto &[name, t] : m.tensors)
    if (name != "lm_head.weight")
      sb.addF32(name, t.shape, t.data);
  dir.write("model.safetensors", sb.build());
  EXPECT_NE(err().find("missing tensor 'lm_head.weight'"), std::string::npos) << err();
  // A tensor with the wrong shape.
  SafetensorsBuilder wrong;
  for (const auto &[name, t] : m.tensors) {
    if (name == "model.layers.1.mlp.up_proj.weight")
      wrong.addF32(name, {t.shape[1], t.shape[0]}, t.data);
    else
      wrong.addF32(name, t.shape, t.data);
  }
  dir.write("model.safetensors", wrong.build());
  EXPECT_NE(err().find("tensor 'model.layers.1.mlp.up_proj.weight' has shape [32, 64], "
                       "the config implies [64, 32]"),
            std::string::npos) << err();
  dir.write("config.json", std::string(R"({"architectures": ["BertModel"]})"));
  EXPECT_NE(err().find("architecture BertModel is not supported"), std::string::npos) << err();
  dir.write("config.json", m.configJson("LlamaForCausalLM"));
  dir.write("generation_config.json", std::string(R"({"top_k": 1.5})"));
  EXPECT_NE(err().find("field 'top_k' must be an integer"), std::string::npos) << err();

  auto none = loadModel("/nonexistent/model");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), llmrt::StatusCode::kNotFound);
  std::string st = dir.write("x.safetensors", sb.build());
  EXPECT_NE(loadModel(st).status().message().find("pass the model folder"), std::string::npos);
  std::string junk = dir.write("junk.gguf", std::string("not a gguf file at all"));
  EXPECT_NE(loadModel(junk).status().message().find("bad magic"), std::string::npos);
}

TEST(LoadModel, GgufLlamaUndoesQkPermutation) {
  for (bool quantize : {false, true}) {
    SCOPED_TRACE(quantize ? "Q8_0 q/k" : "F32");
    TinyModel m;
    m.tied = true;
    m.generate();
    TempDir dir;
    std::string path = dir.write("tiny.gguf", writeGguf(m, "llama", quantize));
    auto loaded = loadModel(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const ModelConfig &c = loaded->config;
    EXPECT_EQ(loaded->sourceKind, "gguf");
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.name, "tiny-llama");
    EXPECT_EQ(c.hiddenSize, 32);
    EXPECT_EQ(c.numHeads, 4);
    EXPECT_EQ(c.numKvHeads, 2);
    EXPECT_EQ(c.headDim, 8);
    EXPECT_EQ(c.vocabSize, 16);
    EXPECT_EQ(c.maxPositionEmbeddings, 4096);
    EXPECT_EQ(c.ropeTheta, 500000.0);
    EXPECT_TRUE(c.tieWordEmbeddings);
    EXPECT_FALSE(c.attentionBias);
    EXPECT_EQ(c.bosId, 1);
    EXPECT_EQ(c.eosIds, (std::vector<int32_t>{2, 3})); // eos + eot
    EXPECT_FLOAT_EQ(loaded->generation.temperature, 0.7f);
    EXPECT_EQ(loaded->generation.topK, 20);
    ASSERT_TRUE(loaded->tokenizer.has_value());
    EXPECT_EQ(loaded->tokenizer->tokens.size(), 16u);
    EXPECT_EQ(loaded->tokenizer->token_types[2], 3);
    EXPECT_EQ(loaded->tokenizer->merges,
              (std::vector<std::string>{"t 1", "t 2"}));
    EXPECT_TRUE(loaded->tokenizer->add_bos);
    EXPECT_EQ(loaded->tokenizer->chat_template, "{{ messages }}");
    // Q8_0 error is at most half a step (amax/127/2 with |x| <= 1) plus the
    // f16 rounding of the scale.
    expectTensorsEqual(m, *loaded->tensors, quantize ? 0.0045f : 0.0f);
    if (quantize)
      EXPECT_EQ(loaded->tensors->find("model.layers.0.self_attn.q_proj.weight")->dtype,
                SourceDType::Q8_0);
  }
}

// llama.cpp applies "normal" (interleaved-pair) RoPE to the permuted rows;
// HF applies neox (half-split) RoPE to the original rows. Both give the same
// q/k up to the same row order, so un-permuting the weights and using neox
// RoPE reproduces what llama.cpp computes.
TEST(LoadModel, GgufRopeConventionsAgreeAfterUnpermute) {
  TinyModel m;
  m.tied = true;
  m.generate();
  TempDir dir;
  std::string path = dir.write("tiny.gguf", writeGguf(m, "llama", false));
  auto loaded = loadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const int64_t rows = m.heads * m.headDim, cols = m.hidden;
  const Tensor &hfQ = m.tensors.at("model.layers.1.self_attn.q_proj.weight");
  std::vector<float> ggufQ = llamaCppPermute(hfQ.data, rows, cols, m.heads);
  std::vector<float> ours(rows * cols);
  ASSERT_TRUE(loaded->tensors->readF32("model.layers.1.self_attn.q_proj.weight",
                                        ours.data()).ok());
  std::vector<float> x = randomFloats(cols, 999);
  for (int pos : {0, 1, 7, 1000}) {
    SCOPED_TRACE(pos);
    // What llama.cpp computes: interleaved rope over GGUF-ordered rows.
    std::vector<float> ref = ropeInterleaved(matVec(ggufQ, rows, cols, x), m.heads,
                                             m.headDim, pos, 500000.0);
    // What we compute: neox rope over the rows the reader returns.
    std::vector<float> got = ropeNeox(matVec(ours, rows, cols, x), m.heads,
                                      m.headDim, pos, 500000.0);
    // Same values, related by the per-head row permutation.
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_NEAR(got[r], ref[ggufRowForHfRow(r, m.headDim)], 1e-5) << "row " << r;
    // And the attention scores q·k agree too, since both q and k use the
    // same permutation within a head (checked on q against itself here).
    double dotRef = 0, dotGot = 0;
    for (int64_t r = 0; r < m.headDim; ++r) {
      dotRef += ref[r] * ref[r];
      dotGot += got[r] * got[r];
    }
    EXPECT_NEAR(dotRef, dotGot, 1e-4);
  }
  // Without un-permuting, neox rope would be wrong (the test can fail).
  std::vector<float> wrong = ropeNeox(matVec(ggufQ, rows, cols, x), m.heads, m.headDim,
                                      7, 500000.0);
  std::vector<float> ref = ropeInterleaved(matVec(ggufQ, rows, cols, x), m.heads,
                                           m.headDim, 7, 500000.0);
  double diff = 0;
  for (int64_t r = 0; r < rows; ++r)
    diff += std::fabs(wrong[r] - ref[r]);
  EXPECT_GT(diff, 1e-2);
}

TEST(LoadModel, GgufQwen2KeepsRowOrderAndHasBiases) {
  TinyModel m;
  m.bias = true;
  m.generate();
  TempDir dir;
  std::string path = dir.write("qwen.gguf", writeGguf(m, "qwen2", false));
  auto loaded = loadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->config.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(loaded->config.attentionBias);
  EXPECT_FALSE(loaded->config.tieWordEmbeddings);
  expectTensorsEqual(m, *loaded->tensors, 0.0f);
}

TEST(LoadModel, GgufLlamaBiasesAreUnpermutedToo) {
  TinyModel m;
  m.bias = true;
  m.tied = true;
  m.generate();
  TempDir dir;
  std::string path = dir.write("b.gguf", writeGguf(m, "llama", true));
  auto loaded = loadModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->config.attentionBias);
  expectTensorsEqual(m, *loaded->tensors, 0.0045f);
}

TEST(LoadModel, GgufModelErrors) {
  TinyModel m;
  m.tied = true;
  m.generate();
  TempDir dir;
  auto errorFor = [&](GgufBuilder &b) {
    std::string p = dir.write("e.gguf", b.build());
    auto loaded = loadModel(p);
    return loaded.ok() ? std::string("<ok>") : loaded.status().message();
  };
  {
    GgufBuilder b;
    b.addString("general.architecture", "falcon");
    std::string e = errorFor(b);
    EXPECT_NE(e.find("GGUF architecture 'falcon' is not supported (supported: llama, "
                     "qwen2, qwen3)"), std::string::npos) << e;
  }
  {
    GgufBuilder b;
    b.addString("general.architecture", "llama");
    b.addU32("llama.embedding_length", 32);
    std::string e = errorFor(b);
    EXPECT_NE(e.find("metadata key 'llama.block_count' is missing"), std::string::npos) << e;
  }
  {
    GgufBuilder b;
    b.addString("general.architecture", "llama");
    b.addString("llama.embedding_length", "32");
    std::string e = errorFor(b);
    EXPECT_NE(e.find("'llama.embedding_length' is string, expected an integer"),
              std::string::npos) << e;
  }
  // Tensor of an unsupported type / unknown role / wrong shape.
  auto modelWith = [&](auto edit) {
    Bytes good = writeGguf(m, "llama", false);
    auto file = GgufFile::parse(good.data(), good.size(), "x");
    EXPECT_TRUE(file.ok());
    GgufBuilder b;
    b.addString("general.architecture", "llama");
    b.addU32("llama.embedding_length", m.hidden);
    b.addU32("llama.block_count", m.layers);
    b.addU32("llama.attention.head_count", m.heads);
    b.addU32("llama.attention.head_count_kv", m.kvHeads);
    b.addU32("llama.feed_forward_length", m.inter);
    b.addF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    b.addU32("llama.vocab_size", m.vocab);
    for (const auto &[name, t] : m.tensors)
      if (!edit(b, ggufName(name), t))
        b.addTensor(ggufName(name), 0, std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend()),
                    floatBytes(t.data));
    return errorFor(b);
  };
  std::string e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) {
    if (n != "blk.0.ffn_up.weight")
      return false;
    b.addTensor(n, 16, {256, 1}, Bytes(66, 0)); // IQ2_XXS
    return true;
  });
  EXPECT_NE(e.find("tensor 'blk.0.ffn_up.weight' has type IQ2_XXS; supported: F32, F16, "
                   "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"),
            std::string::npos) << e;
  e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) {
    if (n != "output_norm.weight")
      return false;
    b.addTensor("blk.0.mystery.weight", 0, {4}, floatBytes({1, 2, 3, 4}));
    return true;
  });
  EXPECT_NE(e.find("tensor 'blk.0.mystery.weight' has no known role"), std::string::npos) << e;
  e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) {
    if (n != "output_norm.weight")
      return false;
    b.addTensor("rope_freqs.weight", 0, {4}, floatBytes({1, 2, 3, 4}));
    b.addTensor(n, 0, {static_cast<uint64_t>(t.shape[0])}, floatBytes(t.data));
    return true;
  });
  EXPECT_NE(e.find("rope_freqs.weight"), std::string::npos) << e;
  e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) {
    if (n != "blk.1.attn_v.weight")
      return false;
    b.addTensor(n, 0, {32, 8}, Bytes(32 * 8 * 4, 0)); // 8 rows, config implies 16
    return true;
  });
  EXPECT_NE(e.find("tensor 'model.layers.1.self_attn.v_proj.weight' has shape [8, 32], "
                   "the config implies [16, 32]"), std::string::npos) << e;
  e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) {
    return n == "blk.1.ffn_down.weight"; // dropped
  });
  EXPECT_NE(e.find("missing tensor 'model.layers.1.mlp.down_proj.weight'"),
            std::string::npos) << e;
  e = modelWith([](GgufBuilder &b, const std::string &n, const Tensor &t) { return false; });
  EXPECT_EQ(e, "<ok>");
}

TEST(LoadModel, GgufTensorNameMapping) {
  EXPECT_EQ(*ggufToHfTensorName("blk.17.attn_q.weight"),
            "model.layers.17.self_attn.q_proj.weight");
  EXPECT_EQ(*ggufToHfTensorName("blk.0.attn_k_norm.weight"),
            "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(*ggufToHfTensorName("output.weight"), "lm_head.weight");
  EXPECT_FALSE(ggufToHfTensorName("blk.x.attn_q.weight"));
  EXPECT_FALSE(ggufToHfTensorName("blk..attn_q.weight"));
  EXPECT_FALSE(ggufToHfTensorName("blk.1"));
  EXPECT_FALSE(ggufToHfTensorName("blk.1.attn_q"));
  EXPECT_EQ(ggufRowForHfRow(0, 8), 0);
  EXPECT_EQ(ggufRowForHfRow(4, 8), 1);  // first element of the second half
  EXPECT_EQ(ggufRowForHfRow(1, 8), 2);
  EXPECT_EQ(ggufRowForHfRow(15, 8), 15);
  EXPECT_EQ(ggufRowForHfRow(11, 8), 8 + 6);
}

// The fuzz seeds were written by the `gguf` / `safetensors` Python packages
// (tests/fuzz/corpus/make_seeds.py): files by someone else's writer.
TEST(LoadModel, PythonWrittenSeedFiles) {
  const std::string corpus = LLMC_FUZZ_CORPUS;
  struct Case {
    const char *file;
    const char *arch;
    SourceDType dtype;
    bool bias;
  };
  for (const Case &c : {Case{"tiny_llama_q8_0.gguf", "LlamaForCausalLM", SourceDType::Q8_0, false},
                        Case{"tiny_llama_q4_0.gguf", "LlamaForCausalLM", SourceDType::Q4_0, false},
                        Case{"tiny_qwen2_q4_1.gguf", "Qwen2ForCausalLM", SourceDType::Q4_1, true}}) {
    SCOPED_TRACE(c.file);
    auto loaded = loadModel(corpus + "/gguf/" + c.file);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(loaded->config.architecture, c.arch);
    EXPECT_EQ(loaded->config.hiddenSize, 32);
    EXPECT_EQ(loaded->config.numLayers, 1);
    EXPECT_EQ(loaded->config.vocabSize, 8);
    EXPECT_TRUE(loaded->config.tieWordEmbeddings);
    EXPECT_EQ(loaded->config.attentionBias, c.bias);
    EXPECT_EQ(loaded->config.name, "tiny");
    ASSERT_TRUE(loaded->tokenizer.has_value());
    EXPECT_EQ(loaded->tokenizer->token_types.back(), 3);
    const SourceTensor *up = loaded->tensors->find("model.layers.0.mlp.up_proj.weight");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->dtype, c.dtype);
    EXPECT_EQ(up->shape, (std::vector<int64_t>{32, 32}));
    for (const SourceTensor &t : loaded->tensors->tensors()) {
      std::vector<float> buf(t.numElements());
      ASSERT_TRUE(loaded->tensors->readF32(t.name, buf.data()).ok()) << t.name;
      for (float x : buf)
        ASSERT_TRUE(std::isfinite(x) && std::fabs(x) < 10) << t.name;
    }
  }
  auto st = SafetensorsSource::openFile(corpus + "/safetensors/mixed.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ((*st)->tensors().size(), 3u);
  EXPECT_EQ((*st)->find("b")->dtype, SourceDType::F16);
  EXPECT_EQ((*st)->find("c")->shape, (std::vector<int64_t>{0, 3}));
}

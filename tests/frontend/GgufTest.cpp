//===- GgufTest.cpp - GGUF reader: metadata, tensors, bad files, real files ===//

#include "compiler/frontend/Gguf.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>

using namespace llmc;
using namespace llmc::test;
using B = GgufBuilder;

namespace {

std::string errorOf(const Bytes &bytes) {
  auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
  return file.ok() ? std::string("<ok>") : file.status().message();
}

#define EXPECT_ERROR_CONTAINS(bytes, text)                                     \
  do {                                                                         \
    std::string msg_ = errorOf(bytes);                                         \
    EXPECT_NE(msg_.find(text), std::string::npos) << "error: " << msg_;        \
  } while (0)

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

GgufBuilder oneTensorFile() {
  GgufBuilder b;
  b.addString("general.architecture", "llama");
  b.addTensor("t", 0, {4, 2}, floatBytes({1, 2, 3, 4, 5, 6, 7, 8}));
  return b;
}

} // namespace

TEST(Gguf, EveryValueTypeRoundTrips) {
  GgufBuilder b;
  Bytes p;
  put<uint8_t>(p, 200);
  b.raw("u8", B::U8, p);
  p.clear();
  put<int8_t>(p, -100);
  b.raw("i8", B::I8, p);
  p.clear();
  put<uint16_t>(p, 60000);
  b.raw("u16", B::U16, p);
  p.clear();
  put<int16_t>(p, -30000);
  b.raw("i16", B::I16, p);
  b.addU32("u32", 4000000000u);
  b.addI32("i32", -2000000000);
  b.addU64("u64", 1ull << 40);
  p.clear();
  put<int64_t>(p, -(1ll << 50));
  b.raw("i64", B::I64, p);
  b.addF32("f32", 0.125f);
  p.clear();
  put<double>(p, 1e-300);
  b.raw("f64", B::F64, p);
  b.addBool("flag", true);
  b.addString("s", "hello");
  b.addStringArray("sa", {"a", "", "ccc"});
  b.addI32Array("ia", {1, -2, 3});
  p.clear(); // array of u8
  put<uint32_t>(p, B::U8);
  put<uint64_t>(p, 3);
  for (uint8_t x : {7, 8, 255})
    put<uint8_t>(p, x);
  b.raw("u8a", B::ARRAY, p);
  p.clear(); // array of f32
  put<uint32_t>(p, B::F32);
  put<uint64_t>(p, 2);
  put<float>(p, 1.5f);
  put<float>(p, -2.5f);
  b.raw("fa", B::ARRAY, p);
  p.clear(); // array of 2 arrays of i16
  put<uint32_t>(p, B::ARRAY);
  put<uint64_t>(p, 2);
  for (int k = 0; k < 2; ++k) {
    put<uint32_t>(p, B::I16);
    put<uint64_t>(p, 2);
    put<int16_t>(p, static_cast<int16_t>(10 * k));
    put<int16_t>(p, static_cast<int16_t>(10 * k + 1));
  }
  b.raw("nested", B::ARRAY, p);
  Bytes bytes = b.build();
  auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufFile &f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(*f.getInt("u8"), 200);
  EXPECT_EQ(*f.getInt("i8"), -100);
  EXPECT_EQ(*f.getInt("u16"), 60000);
  EXPECT_EQ(*f.getInt("i16"), -30000);
  EXPECT_EQ(*f.getInt("u32"), 4000000000ll);
  EXPECT_EQ(*f.getInt("i32"), -2000000000);
  EXPECT_EQ(*f.getInt("u64"), 1ll << 40);
  EXPECT_EQ(*f.getInt("i64"), -(1ll << 50));
  EXPECT_EQ(*f.getFloat("f32"), 0.125);
  EXPECT_EQ(*f.getFloat("f64"), 1e-300);
  EXPECT_EQ(*f.getFloat("u32"), 4e9); // integers convert
  EXPECT_TRUE(*f.getBool("flag"));
  EXPECT_EQ(*f.getString("s"), "hello");
  EXPECT_EQ(*f.getStringArray("sa"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*f.getIntArray("ia"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.getIntArray("u8a"), (std::vector<int64_t>{7, 8, 255}));
  EXPECT_EQ(*f.getFloatArray("fa"), (std::vector<double>{1.5, -2.5}));
  EXPECT_EQ(*f.getFloatArray("ia"), (std::vector<double>{1, -2, 3}));
  const GgufValue *nested = f.findValue("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elementType, GgufValueType::Array);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(nested->arrays[1].ints, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(nested->arrays[1].elementType, GgufValueType::Int16);

  // Wrong types and missing keys name the key.
  auto s = f.getInt("s");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "t.gguf: metadata key 's' is string, expected an integer");
  auto arr = f.getString("sa");
  ASSERT_FALSE(arr.ok());
  EXPECT_NE(arr.status().message().find("array of string"), std::string::npos);
  EXPECT_FALSE(f.getStringArray("ia").ok());
  EXPECT_FALSE(f.getBool("u8").ok());
  auto missing = f.getFloat("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), llmrt::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope' is missing"), std::string::npos);
}

TEST(Gguf, TensorsAndAlignment) {
  for (uint32_t alignment : {32u, 64u, 8u}) {
    GgufBuilder b;
    b.alignment = alignment;
    if (alignment != 32)
      b.addU32("general.alignment", alignment);
    b.addTensor("a", 0, {3}, floatBytes({1, 2, 3}));
    Bytes q8 = quantizeQ8_0(randomFloats(64, 1));
    b.addTensor("q", 8, {32, 2}, q8);
    Bytes bytes = b.build();
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ((*file)->alignment(), alignment);
    const GgufTensorInfo *a = (*file)->findTensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->numBytes, 12u);
    float v[3];
    std::memcpy(v, (*file)->tensorData(*a), 12);
    EXPECT_EQ(v[2], 3.0f);
    const GgufTensorInfo *q = (*file)->findTensor("q");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{32, 2}));
    EXPECT_EQ(q->numElements, 64);
    EXPECT_EQ(q->numBytes, 68u);
    EXPECT_EQ(q->offset % alignment, 0u);
    EXPECT_EQ(std::memcmp((*file)->tensorData(*q), q8.data(), q8.size()), 0);
  }
}

TEST(Gguf, BadInputsGiveClearErrors) {
  EXPECT_ERROR_CONTAINS(Bytes({'G', 'G'}), "too short");
  {
    GgufBuilder b = oneTensorFile();
    b.magic = "GGML";
    EXPECT_ERROR_CONTAINS(b.build(), "bad magic");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.version = 0x03000000u;
    EXPECT_ERROR_CONTAINS(b.build(), "big-endian GGUF files are not supported");
  }
  for (uint32_t v : {1u, 4u, 0x01000000u}) {
    GgufBuilder b = oneTensorFile();
    b.version = v;
    EXPECT_ERROR_CONTAINS(b.build(), "unsupported GGUF version " + std::to_string(v));
  }
  {
    Bytes h = {'G', 'G', 'U', 'F'};
    put<uint32_t>(h, 3);
    put<uint64_t>(h, 0);
    put<uint64_t>(h, 1ull << 60);
    EXPECT_ERROR_CONTAINS(h, "metadata count 1152921504606846976 exceeds");
    Bytes t = {'G', 'G', 'U', 'F'};
    put<uint32_t>(t, 3);
    put<uint64_t>(t, ~0ull);
    put<uint64_t>(t, 0);
    EXPECT_ERROR_CONTAINS(t, "tensor count");
  }
  {
    GgufBuilder b;
    Bytes p;
    put<uint64_t>(p, 1ull << 62); // string length far beyond the file
    b.raw("k", B::STRING, p);
    EXPECT_ERROR_CONTAINS(b.build(), "metadata 'k': value of type string runs past");
  }
  {
    GgufBuilder b;
    Bytes p;
    put<uint32_t>(p, B::U32);
    put<uint64_t>(p, 1ull << 61);
    b.raw("arr", B::ARRAY, p);
    EXPECT_ERROR_CONTAINS(b.build(), "metadata 'arr': array count 2305843009213693952");
  }
  {
    GgufBuilder b;
    b.raw("k", 13, Bytes(8, 0));
    EXPECT_ERROR_CONTAINS(b.build(), "metadata 'k': unknown value type 13");
  }
  {
    GgufBuilder b;
    Bytes p;
    put<uint32_t>(p, 99);
    put<uint64_t>(p, 1);
    b.raw("k", B::ARRAY, p);
    EXPECT_ERROR_CONTAINS(b.build(), "unknown element type 99");
  }
  {
    GgufBuilder b; // arrays nested 100 deep
    Bytes p;
    for (int i = 0; i < 100; ++i) {
      put<uint32_t>(p, B::ARRAY);
      put<uint64_t>(p, 1);
    }
    put<uint32_t>(p, B::U8);
    put<uint64_t>(p, 0);
    b.raw("deep", B::ARRAY, p);
    EXPECT_ERROR_CONTAINS(b.build(), "nested deeper");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addU32("general.architecture", 1); // duplicate key
    EXPECT_ERROR_CONTAINS(b.build(), "duplicate metadata key 'general.architecture'");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("t", 0, {1}, floatBytes({1}));
    EXPECT_ERROR_CONTAINS(b.build(), "duplicate tensor name 't'");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 77, {32}, Bytes(64, 0));
    EXPECT_ERROR_CONTAINS(b.build(), "tensor 'x': unknown ggml type 77");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 0, {1, 1, 1, 1, 1}, floatBytes({1}));
    EXPECT_ERROR_CONTAINS(b.build(), "tensor 'x': has 5 dimensions");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 3, {48}, Bytes(40, 0)); // Q4_1 needs multiples of 32
    EXPECT_ERROR_CONTAINS(b.build(), "not a multiple of the Q4_1 block size 32");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 0, {1ull << 32, 1ull << 32, 1ull << 32}, {});
    EXPECT_ERROR_CONTAINS(b.build(), "tensor 'x': element count overflows");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 0, {4}, floatBytes({1, 2, 3, 4}));
    b.overrideLastOffset(1 << 20);
    EXPECT_ERROR_CONTAINS(b.build(), "tensor 'x': data [1048576, +16) lies outside");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 0, {4}, floatBytes({1, 2, 3, 4}));
    b.overrideLastOffset(2); // not aligned
    EXPECT_ERROR_CONTAINS(b.build(), "data offset 2 is not a multiple of the alignment 32");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addTensor("x", 0, {4}, floatBytes({1, 2, 3, 4}));
    b.overrideLastOffset(0); // on top of 't'
    EXPECT_ERROR_CONTAINS(b.build(), "data of tensors 't' and 'x' overlap");
  }
  {
    GgufBuilder b = oneTensorFile();
    b.addU32("general.alignment", 3);
    EXPECT_ERROR_CONTAINS(b.build(), "general.alignment 3 is not a power of two");
    GgufBuilder c = oneTensorFile();
    c.addString("general.alignment", "32");
    EXPECT_ERROR_CONTAINS(c.build(), "general.alignment must be an integer");
  }
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  GgufBuilder b = oneTensorFile();
  b.addStringArray("tokenizer.ggml.tokens", {"a", "b"});
  b.addTensor("q", 8, {32}, quantizeQ8_0(randomFloats(32, 2)));
  Bytes full = b.build();
  auto parsed = GgufFile::parse(full.data(), full.size(), "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  // The file may end anywhere after the last tensor's data (its padding is
  // optional); any shorter prefix must fail.
  const GgufTensorInfo *q = (*parsed)->findTensor("q");
  size_t needed = ((*parsed)->tensorData(*q) - full.data()) + q->numBytes;
  ASSERT_LT(needed, full.size());
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + n);
    if (n < needed)
      EXPECT_NE(errorOf(cut), "<ok>") << "prefix of " << n << " bytes parsed";
    else
      EXPECT_EQ(errorOf(cut), "<ok>") << "prefix of " << n << " bytes";
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  GgufBuilder b = oneTensorFile();
  b.addStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  b.addI32Array("tokenizer.ggml.token_type", {1, 1, 3});
  Bytes full = b.build();
  std::mt19937 rng(7);
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes bytes = full;
    int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; ++k)
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t");
    if (file.ok()) {
      ++parsed;
      for (const GgufTensorInfo &t : (*file)->tensors())
        ASSERT_LE(t.offset + t.numBytes,
                  bytes.size() - ((*file)->tensorData(t) - t.offset - bytes.data()));
    }
  }
  EXPECT_GT(parsed, 0); // some flips hit only payload bytes
}

// --- real files -------------------------------------------------------------

TEST(GgufReal, VocabOnlyTokenizers) {
  const std::string dir = std::string(LLMC_SHARED_DIR) + "/data/tokenizers/gguf-vocab/";
  if (!exists(dir + "ggml-vocab-gpt-2.gguf"))
    GTEST_SKIP() << "vocab GGUFs not found under " << dir;
  struct Case {
    const char *file;
    size_t tokens, merges;
    int32_t bos, eos, pad;
    const char *pre;
    bool byteLevel, addBos, hasTemplate;
  };
  for (const Case &c : {
           Case{"ggml-vocab-gpt-2.gguf", 50257, 50000, 50256, 50256, -1, "gpt-2", true, false, false},
           Case{"ggml-vocab-llama-bpe.gguf", 128256, 280147, 128000, 128001, -1, "llama-bpe", true, false, false},
           Case{"ggml-vocab-qwen2.gguf", 151936, 151387, 151643, 151643, 151643, "qwen2", true, false, true},
           // SentencePiece files name their variant (runtime/tokenizer/spm.h): add_space_prefix → "spm".
           Case{"ggml-vocab-llama-spm.gguf", 32000, 0, 1, 2, -1, "spm", false, true, false},
       }) {
    SCOPED_TRACE(c.file);
    auto file = GgufFile::open(dir + c.file);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_TRUE((*file)->tensors().empty());
    auto tok = readGgufTokenizer(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    ASSERT_TRUE(tok->has_value());
    const llmrt::TokenizerData &t = **tok;
    EXPECT_EQ(t.tokens.size(), c.tokens);
    EXPECT_EQ(t.token_types.size(), c.tokens);
    EXPECT_EQ(t.merges.size(), c.merges);
    EXPECT_EQ(t.bos_id, c.bos);
    EXPECT_EQ(t.eos_id, c.eos);
    EXPECT_EQ(t.pad_id, c.pad);
    EXPECT_EQ(t.pre, c.pre);
    EXPECT_EQ(t.byte_level, c.byteLevel);
    EXPECT_EQ(t.add_bos, c.addBos);
    EXPECT_EQ(!t.chat_template.empty(), c.hasTemplate);
    // A vocab-only file is not a model.
    auto model = loadModel(dir + c.file);
    EXPECT_FALSE(model.ok());
  }
  auto gpt2 = GgufFile::open(dir + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(gpt2.ok());
  auto tok = readGgufTokenizer(**gpt2);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((**tok).tokens[0], "!");
  EXPECT_EQ((**tok).tokens[50256], "<|endoftext|>");
  EXPECT_EQ((**tok).merges[0], "\xC4\xA0 t"); // "Ġ t"
  auto unsupported = loadModel(dir + "ggml-vocab-gpt-2.gguf");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.status().message().find("GGUF architecture 'gpt2' is not supported"),
            std::string::npos)
      << unsupported.status().message();
}

TEST(GgufReal, SmolLM2Q4_1) {
  const char *env = std::getenv("LLMC_SMOLLM2_GGUF");
  if (!env || !exists(env))
    GTEST_SKIP() << "set LLMC_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf";
  auto loaded = loadModel(env);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const LoadedModel &m = *loaded;
  EXPECT_EQ(m.sourceKind, "gguf");
  const ModelConfig &c = m.config;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.name, "Smollm2 135M 8k Lc100K Mix1 Ep2");
  EXPECT_EQ(c.hiddenSize, 576);
  EXPECT_EQ(c.numLayers, 30);
  EXPECT_EQ(c.numHeads, 9);
  EXPECT_EQ(c.numKvHeads, 3);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.intermediateSize, 1536);
  EXPECT_EQ(c.vocabSize, 49152);
  EXPECT_EQ(c.maxPositionEmbeddings, 8192);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rmsNormEps), 1e-5f);
  EXPECT_EQ(c.ropeTheta, 100000.0);
  EXPECT_EQ(c.ropeScaling.type, "default");
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_FALSE(c.attentionBias);
  EXPECT_FALSE(c.qkNorm);
  EXPECT_EQ(c.bosId, 1);
  EXPECT_EQ(c.eosIds, (std::vector<int32_t>{2}));
  EXPECT_EQ(m.generation.eosIds, (std::vector<int32_t>{2}));
  ASSERT_TRUE(m.tokenizer.has_value());
  EXPECT_EQ(m.tokenizer->tokens.size(), 49152u);
  EXPECT_EQ(m.tokenizer->merges.size(), 48900u);
  EXPECT_EQ(m.tokenizer->pre, "smollm");
  EXPECT_TRUE(m.tokenizer->byte_level);
  EXPECT_FALSE(m.tokenizer->add_bos);
  EXPECT_EQ(m.tokenizer->pad_id, 2);
  EXPECT_NE(m.tokenizer->chat_template.find("<|im_start|>"), std::string::npos);

  // 30 layers × 9 tensors + embedding + final norm; no lm_head (tied).
  EXPECT_EQ(m.tensors->tensors().size(), 272u);
  EXPECT_EQ(m.tensors->find("lm_head.weight"), nullptr);
  const SourceTensor *embd = m.tensors->find("model.embed_tokens.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, SourceDType::Q8_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{49152, 576}));
  const SourceTensor *down = m.tensors->find("model.layers.29.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, SourceDType::Q4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));

  // Reference values: the `gguf` Python package's dequantization, with the
  // inverse of llama.cpp's Q/K permutation applied in numpy.
  std::vector<float> e(49152 * 576);
  ASSERT_TRUE(m.tensors->readF32("model.embed_tokens.weight", e.data()).ok());
  EXPECT_FLOAT_EQ(e[0], -0.10654449462890625f);
  EXPECT_FLOAT_EQ(e[1], 0.032978057861328125f);
  EXPECT_FLOAT_EQ(e[2], 0.048198699951171875f);
  EXPECT_FLOAT_EQ(e[49152 * 576 - 2], -0.11989402770996094f);
  EXPECT_FLOAT_EQ(e[49152 * 576 - 1], -0.0417022705078125f);
  std::vector<float> q(576 * 576);
  ASSERT_TRUE(m.tensors->readF32("model.layers.0.self_attn.q_proj.weight", q.data()).ok());
  const std::pair<int, std::array<float, 2>> qRows[] = {
      {0, {-0.0963134765625f, 0.1573486328125f}},
      {1, {-0.1591796875f, 0.39794921875f}},
      {32, {-0.1173095703125f, -0.1173095703125f}},
      {33, {-0.06280517578125f, 0.1446533203125f}},
      {575, {-0.15679931640625f, 0.154327392578125f}}};
  for (const auto &[row, vals] : qRows) {
    EXPECT_FLOAT_EQ(q[row * 576 + 0], vals[0]) << "q row " << row;
    EXPECT_FLOAT_EQ(q[row * 576 + 1], vals[1]) << "q row " << row;
  }
  std::vector<float> k(192 * 576);
  ASSERT_TRUE(m.tensors->readF32("model.layers.0.self_attn.k_proj.weight", k.data()).ok());
  const std::pair<int, std::array<float, 2>> kRows[] = {
      {1, {0.203369140625f, 0.09136962890625f}},
      {63, {-0.09991455078125f, 0.0892333984375f}},
      {64, {0.1153564453125f, 0.843505859375f}},
      {191, {0.015869140625f, -0.4342041015625f}}};
  for (const auto &[row, vals] : kRows) {
    EXPECT_FLOAT_EQ(k[row * 576 + 0], vals[0]) << "k row " << row;
    EXPECT_FLOAT_EQ(k[row * 576 + 1], vals[1]) << "k row " << row;
  }
  std::vector<float> d(576 * 1536);
  ASSERT_TRUE(m.tensors->readF32("model.layers.29.mlp.down_proj.weight", d.data()).ok());
  EXPECT_FLOAT_EQ(d[576 * 1536 - 2], -0.08984375f);
  EXPECT_FLOAT_EQ(d[576 * 1536 - 1], 0.056640625f);
  std::vector<float> n(576);
  ASSERT_TRUE(m.tensors->readF32("model.norm.weight", n.data()).ok());
  EXPECT_FLOAT_EQ(n[0], 1.7578125f);
  EXPECT_FLOAT_EQ(n[2], 1.78125f);
}
